package a2a_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/a2a"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
)

type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  *a2a.Task       `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func call(t *testing.T, s *prototest.Stack, key, agent, method, params string) rpcAnswer {
	t.Helper()
	status, body := s.Do("POST", "/a2a/"+agent, `{"jsonrpc":"2.0","id":7,"method":"`+method+`","params":`+params+`}`, "Authorization", "Bearer "+key)
	if status != 200 {
		t.Fatalf("%s: %d %s", method, status, body)
	}
	var a rpcAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || string(a.ID) != "7" {
		t.Fatalf("%s: %v %s", method, err, body)
	}
	return a
}

func send(text, contextID string) string {
	m := map[string]any{"kind": "message", "role": "user", "messageId": "m1", "parts": []map[string]string{{"kind": "text", "text": text}}}
	if contextID != "" {
		m["contextId"] = contextID
	}
	b, _ := json.Marshal(map[string]any{"message": m})
	return string(b)
}

// TestAgentAsA2AAgent: the agent card, message/send (a task that is the
// turn, its text an artifact), a second message in the same context,
// tasks/get, tasks/cancel of an ended task, and what other tenants and
// bad requests get.
func TestAgentAsA2AAgent(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, a2a.Protocol{})
	if status, b := s.Do("POST", "/v1/agents", `{"name":"echo","model":"scripted/echo","tools":["echo"]}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	status, body := s.Do("GET", "/a2a/echo/.well-known/agent-card.json", "", "Authorization", "Bearer ka")
	var card struct {
		Name, URL, ProtocolVersion string
		Capabilities               struct{ Streaming bool }
		Skills                     []struct{ ID string }
		SecuritySchemes            map[string]any
	}
	if status != 200 || json.Unmarshal([]byte(body), &card) != nil || card.Name != "echo" || !strings.HasSuffix(card.URL, "/a2a/echo") ||
		card.ProtocolVersion == "" || len(card.Skills) != 2 || card.SecuritySchemes["bearer"] == nil {
		t.Fatalf("card: %d %s", status, body)
	}

	a := call(t, s, "ka", "echo", "message/send", send("hello a2a", ""))
	if a.Error != nil || a.Result == nil || a.Result.Status.State != "completed" || a.Result.ContextID == "" ||
		len(a.Result.Artifacts) != 1 || !strings.Contains(a.Result.Artifacts[0].Parts[0].Text, "hello a2a") {
		t.Fatalf("message/send: %+v %+v", a.Result, a.Error)
	}
	first := a.Result
	a = call(t, s, "ka", "echo", "message/send", send("again", first.ContextID))
	if a.Error != nil || a.Result.ContextID != first.ContextID || a.Result.ID == first.ID {
		t.Fatalf("second message: %+v %+v", a.Result, a.Error)
	}
	a = call(t, s, "ka", "echo", "tasks/get", `{"id":"`+first.ID+`"}`)
	if a.Error != nil || a.Result.ID != first.ID || a.Result.Status.State != "completed" {
		t.Fatalf("tasks/get: %+v %+v", a.Result, a.Error)
	}
	if a = call(t, s, "ka", "echo", "tasks/cancel", `{"id":"`+first.ID+`"}`); a.Error == nil || a.Error.Code != -32002 {
		t.Fatalf("cancel of an ended task: %+v", a.Error)
	}

	// Another tenant: no such agent, no such task.
	if status, body := s.Do("GET", "/a2a/echo/.well-known/agent-card.json", "", "Authorization", "Bearer kb"); status != 404 {
		t.Fatalf("another tenant's card: %d %s", status, body)
	}
	if status, body := s.Do("POST", "/v1/agents", `{"name":"echo","model":"scripted/echo"}`, "Authorization", "Bearer kb"); status != 201 {
		t.Fatalf("globex agent: %d %s", status, body)
	}
	if a = call(t, s, "kb", "echo", "tasks/get", `{"id":"`+first.ID+`"}`); a.Error == nil || a.Error.Code != -32001 {
		t.Fatalf("another tenant's task: %+v", a.Error)
	}
	if a = call(t, s, "kb", "echo", "message/send", send("x", first.ContextID)); a.Error == nil {
		t.Fatalf("another tenant's context: %+v", a.Result)
	}

	for _, c := range []struct {
		method, params string
		code           int
	}{
		{"message/send", `{"message":{"role":"agent","parts":[{"kind":"text","text":"x"}]}}`, -32602},
		{"message/send", `{"message":{"role":"user","parts":[{"kind":"file","file":{}}]}}`, -32602},
		{"message/send", `{"message":{"role":"user","parts":[{"kind":"audio"}]}}`, -32004},
		{"message/send", `{"message":{"role":"user","parts":[]}}`, -32602},
		{"message/send", `[1,2]`, -32602},
		{"tasks/get", `{}`, -32602},
		{"tasks/get", `{"id":"turn_nope"}`, -32001},
		{"no/such", `{}`, -32601},
	} {
		if a := call(t, s, "ka", "echo", c.method, c.params); a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s %s: %+v, want code %d", c.method, c.params, a.Error, c.code)
		}
	}
	for _, body := range []string{`{`, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tasks/get\",\"params\":{\"id\":\"\xff\"}}", strings.Repeat("[", 10000)} {
		status, resp := s.Do("POST", "/a2a/echo", body, "Authorization", "Bearer ka")
		if status >= 500 || !strings.Contains(resp, `"error"`) {
			t.Errorf("%.40q: %d %s", body, status, resp)
		}
	}
	if status, resp := s.Do("POST", "/a2a/echo", `{}`, "Authorization", "Bearer zz"); status != 401 || !strings.Contains(resp, `"jsonrpc"`) {
		t.Errorf("a wrong key: %d %s", status, resp)
	}
	if status, _ := s.Do("GET", "/a2a/echo", "", "Authorization", "Bearer ka"); status != 405 {
		t.Errorf("GET /a2a/echo: %d", status)
	}
}
