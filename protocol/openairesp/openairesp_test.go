package openairesp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

type event struct {
	Type           string `json:"type"`
	SequenceNumber int64  `json:"sequence_number"`
	Delta          string `json:"delta"`
	Response       *struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"response"`
}

// events parses a Responses SSE stream.
func events(t *testing.T, body string) []event {
	t.Helper()
	var out []event
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("bad frame %q: %v", data, err)
			}
			out = append(out, ev)
		}
	}
	for i := 1; i < len(out); i++ {
		if out[i].SequenceNumber <= out[i-1].SequenceNumber {
			t.Fatalf("sequence %d after %d", out[i].SequenceNumber, out[i-1].SequenceNumber)
		}
	}
	return out
}

func text(evs []event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == "response.output_text.delta" {
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}

// TestReplayNumbersLikeLive: however a part's text was chunked live, a
// replay of the finished response (one delta per part) numbers every
// other event as the live stream did, and its delta ends at the number of
// the live stream's last delta of that part.
func TestReplayNumbersLikeLive(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	for _, chunk := range []int{1, 5} {
		agent := "chunk" + itoa(chunk)
		s.Agent(`{"name":"` + agent + `","model":"scripted/x","model_params":{"script":[{"reasoning":"a thought","text":"the answer is 42","chunk":` + itoa(chunk) + `}]}}`)
		_, body := s.Do("POST", "/openai/v1/responses", `{"model":"`+agent+`","input":"q","stream":true}`)
		live := events(t, body)
		if text(live) != "the answer is 42" {
			t.Fatalf("chunk %d: text %q", chunk, text(live))
		}
		_, body = s.Do("GET", "/openai/v1/responses/"+live[0].Response.ID+"?stream=true", "")
		replay := events(t, body)
		// Keep each delta run's last number only.
		shape := func(evs []event) []string {
			var out []string
			for i, ev := range evs {
				if strings.HasSuffix(ev.Type, ".delta") && i+1 < len(evs) && evs[i+1].Type == ev.Type {
					continue
				}
				out = append(out, ev.Type+"@"+itoa(int(ev.SequenceNumber)))
			}
			return out
		}
		l, r := shape(live), shape(replay)
		if strings.Join(l, " ") != strings.Join(r, " ") {
			t.Fatalf("chunk %d:\n live   %v\n replay %v", chunk, l, r)
		}
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// TestResumeWhileRunning cuts a background stream at every event of a
// running turn and resumes: the rest follows with no gap or duplicate.
func TestResumeWhileRunning(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"one two three","hang":true}]}}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/openai/v1/responses",
		strings.NewReader(`{"model":"bot","input":"go","stream":true,"background":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var live []event
	sc := bufio.NewScanner(resp.Body)
	for text(live) != "one two three" && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev event
			_ = json.Unmarshal([]byte(data), &ev)
			live = append(live, ev)
		}
	}
	cancel()
	resp.Body.Close()
	id := live[0].Response.ID
	for i, ev := range live {
		// A resume of a running turn never ends by itself: read what it
		// sends within a short wait.
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		rreq, _ := http.NewRequestWithContext(rctx, "GET", s.URL+"/openai/v1/responses/"+id+"?stream=true&starting_after="+itoa(int(ev.SequenceNumber)), nil)
		rresp, err := http.DefaultClient.Do(rreq)
		if err != nil {
			t.Fatal(err)
		}
		var rest []event
		rsc := bufio.NewScanner(rresp.Body)
		for rsc.Scan() {
			if data, ok := strings.CutPrefix(rsc.Text(), "data: "); ok {
				var r event
				_ = json.Unmarshal([]byte(data), &r)
				rest = append(rest, r)
			}
			if len(rest) == len(live)-i-1 {
				break
			}
		}
		rcancel()
		rresp.Body.Close()
		if len(rest) != len(live)-i-1 {
			t.Fatalf("resume after %d: %d events, want %d", ev.SequenceNumber, len(rest), len(live)-i-1)
		}
		for j, r := range rest {
			if r.SequenceNumber != live[i+1+j].SequenceNumber || r.Type != live[i+1+j].Type || r.Delta != live[i+1+j].Delta {
				t.Fatalf("resume after %d: got %s %d %q, live had %s %d %q", ev.SequenceNumber, r.Type, r.SequenceNumber, r.Delta,
					live[i+1+j].Type, live[i+1+j].SequenceNumber, live[i+1+j].Delta)
			}
		}
	}
	if status, body := s.Do("POST", "/openai/v1/responses/"+id+"/cancel", ""); status != 200 || !strings.Contains(body, `"status":"cancelled"`) {
		t.Fatalf("cancel: %d %s", status, body)
	}
	// After the end, a resume inside the streamed text gets the rest once.
	for _, ev := range live {
		_, body := s.Do("GET", "/openai/v1/responses/"+id+"?stream=true&starting_after="+itoa(int(ev.SequenceNumber)), "")
		rest := events(t, body)
		var before []event
		for _, l := range live {
			if l.SequenceNumber <= ev.SequenceNumber {
				before = append(before, l)
			}
		}
		if text(before)+text(rest) != "one two three" {
			t.Fatalf("after the end, resume after %d: %q + %q", ev.SequenceNumber, text(before), text(rest))
		}
		if last := rest[len(rest)-1]; last.Type != "response.incomplete" || last.Response.Status != "cancelled" {
			t.Fatalf("ends with %s", last.Type)
		}
	}
}

func TestTenantsAndSessionKinds(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, openairesp.Protocol{})
	if status, body := s.Do("POST", "/v1/agents", `{"name":"bot","model":"scripted/echo"}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, body)
	}
	status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi"}`, "Authorization", "Bearer ka")
	if status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	var r struct {
		ID           string `json:"id"`
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	_ = json.Unmarshal([]byte(body), &r)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/openai/v1/responses/" + r.ID, ""},
		{"POST", "/openai/v1/responses/" + r.ID + "/cancel", ""},
		{"GET", "/openai/v1/responses/" + r.ID + "/input_items", ""},
		{"POST", "/openai/v1/responses", `{"input":"hi","previous_response_id":"` + r.ID + `"}`},
		{"POST", "/openai/v1/responses", `{"model":"bot","input":"hi","conversation":"` + r.Conversation.ID + `"}`},
		{"GET", "/openai/v1/models/bot", ""},
	} {
		status, body := s.Do(c.method, c.path, c.body, "Authorization", "Bearer kb")
		if status != 404 || !strings.Contains(body, `"type":"invalid_request_error"`) {
			t.Fatalf("another tenant's %s %s: %d %s", c.method, c.path, status, body)
		}
	}
	// Its own tenant may not cancel it either, now that it has ended; the
	// answer speaks the API's words.
	status, body = s.Do("POST", "/openai/v1/responses/"+r.ID+"/cancel", "", "Authorization", "Bearer ka")
	if status != 400 || !strings.Contains(body, "its status is completed") {
		t.Fatalf("cancel of a completed response: %d %s", status, body)
	}
	status, body = s.Do("GET", "/openai/v1/models", "")
	if status != 401 || !strings.Contains(body, `"code":"invalid_api_key"`) || !strings.Contains(body, `"type":"authentication_error"`) {
		t.Fatalf("no key: %d %s", status, body)
	}
	// A forum's monologue is not a conversation these clients may use.
	now := time.Now()
	mono := &forge.Session{ID: "ses_mono", Tenant: "acme", Kind: forge.KindMonologue, Agent: "bot", MainThreadID: "thr_mono",
		Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
	if err := s.Store.CreateSession(context.Background(), mono); err != nil {
		t.Fatal(err)
	}
	status, body = s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi","conversation":"ses_mono"}`, "Authorization", "Bearer ka")
	if status != 400 || !strings.Contains(body, `"param":"conversation"`) {
		t.Fatalf("monologue as conversation: %d %s", status, body)
	}
}

func TestHostileRequests(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	for _, c := range []struct {
		body  string
		param string
	}{
		{strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70), ""},
		{`{"model":"bot","input":"` + "\xff" + `"}`, ""},
		{`{"model":"bot","input":"   "}`, "input"},
		{`{"model":"bot","input":[]}`, "input"},
		{`{"model":"bot","input":42}`, "input"},
		{`{"model":"bot","input":[{"role":"user","content":"a"},{"type":"function_call_output","call_id":"call_x","output":"o"}]}`, "input"},
		{`{"model":"bot","input":[{"type":"item_reference","id":"x"}]}`, "input"},
		{`{"model":"bot","input":[{"type":"item_reference"},{"role":"user","content":"b"}]}`, "input[0].id"},
		{`{"model":"bot","input":[{"type":"function_call","call_id":"c"},{"role":"user","content":"b"}]}`, "input[0]"},
		{`{"model":"bot","input":[{"role":"system","content":"a"},{"role":"user","content":"b"}]}`, "input[0].role"},
		{`{"model":"bot","input":[{"type":"message","role":"assistant","content":42},{"role":"user","content":"b"}]}`, "input[0].content"},
		{`{"model":"bot","input":[{"type":"computer_call"},{"role":"user","content":"b"}]}`, "input[0].type"},
		{`{"model":"bot","input":[{"role":"user","content":"b","nope":1}]}`, "input[0]"},
		{`{"model":"bot","input":[{"role":"user","content":"a"},{"type":"function_call_output","call_id":"c","output":"o","nope":1}]}`, "input[1]"},
		{`{"model":"bot","input":[{"type":"mcp_approval_response","approval_request_id":"call_x"}]}`, "input[0].approve"},
		{`{"model":"bot","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type"},
		{`{"model":"bot","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"string"}}]}`, "tools"},
		{`{"model":"bot","input":"hi","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]}`, "tools"},
		{`{"model":"bot","input":"hi","tools":[{"type":"function"}]}`, "tools[0].name"},
		{`{"model":"bot","input":"hi","temperature":5}`, "temperature"},
		{`{"model":"bot","input":"hi","top_p":-1}`, "top_p"},
		{`{"model":"bot","input":"hi","max_output_tokens":0}`, "max_output_tokens"},
		{`{"model":"bot","input":"hi","instructions":42}`, "instructions"},
		{`{"model":"bot","input":"hi","instructions":"` + strings.Repeat("x", 300<<10) + `"}`, "instructions"},
		{`{"model":"bot","input":"hi","tool_choice":"required"}`, "tool_choice"},
		{`{"model":"bot","input":"hi","previous_response_id":"turn_x","conversation":"ses_x"}`, "previous_response_id"},
		{`{"model":"bot","input":"hi","metadata":{"k":` + `"` + strings.Repeat("v", 600) + `"}}`, "metadata"},
		{`{"input":"hi"}`, "model"},
	} {
		status, body := s.Do("POST", "/openai/v1/responses", c.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if status != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Fatalf("%.60q: %d %s", c.body, status, body)
		}
		if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
			t.Fatalf("%.60q: param %v, want %q", c.body, e.Error.Param, c.param)
		}
	}
	if ss, _, err := s.Store.ListSessions(context.Background(), forge.DefaultTenant, forge.SessionQuery{ListOptions: forge.ListOptions{Limit: 10}}); err != nil || len(ss) != 0 {
		t.Fatalf("refused requests left %d sessions (%v)", len(ss), err)
	}
	// Agent-owned settings at their defaults are accepted (SDKs send them).
	if status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi","tools":[],"tool_choice":"auto","instructions":null,"parallel_tool_calls":true,"text":{"format":{"type":"text"}},"store":false}`); status != 200 {
		t.Fatalf("defaults: %d %s", status, body)
	}
	if status, body := s.Do("GET", "/openai/v1/responses/turn_x?starting_after=-1", ""); status != 400 {
		t.Fatalf("negative starting_after: %d %s", status, body)
	}
	if status, body := s.Do("DELETE", "/openai/v1/responses/turn_x", ""); status != 404 || !strings.Contains(body, "invalid_request_error") {
		t.Fatalf("DELETE of no response: %d %s", status, body)
	}
	if status, body := s.Do("PUT", "/openai/v1/responses/turn_x", ""); status != 405 || !strings.Contains(body, "invalid_request_error") {
		t.Fatalf("PUT: %d %s", status, body)
	}
}

func TestMetadataAndInputItems(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	_, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi","metadata":{"user":"u1"},"background":true}`)
	var r struct {
		ID       string            `json:"id"`
		Metadata map[string]string `json:"metadata"`
	}
	_ = json.Unmarshal([]byte(body), &r)
	if r.Metadata["user"] != "u1" {
		t.Fatalf("create: %s", body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body = s.Do("GET", "/openai/v1/responses/"+r.ID, "")
		if strings.Contains(body, `"status":"completed"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(body, `"metadata":{"user":"u1"}`) || !strings.Contains(body, `"background":true`) || !strings.Contains(body, `"echo: hi"`) {
		t.Fatalf("get: %s", body)
	}
	status, body := s.Do("GET", "/openai/v1/responses/"+r.ID+"/input_items?order=asc&limit=1", "")
	if status != 200 || !strings.Contains(body, `"text":"hi"`) || !strings.Contains(body, `"has_more":false`) {
		t.Fatalf("input_items: %d %s", status, body)
	}
}

// TestStreamedEqualsStored: the response a stream ends with is the one
// GET builds from the stored rows, for turns of every shape.
func TestStreamedEqualsStored(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"helper","model":"scripted/x","model_params":{"script":[{"text":"helped"}]}}`)
	for _, agent := range []string{
		`{"name":"tools","model":"scripted/x","tools":["echo"],"model_params":{"script":[{"reasoning":"r","text":"let me","tool_calls":[{"name":"echo","arguments":{"text":"a"}},{"name":"echo","arguments":{"text":"b"}}]},{"text":"done"}]}}`,
		`{"name":"ask","model":"scripted/x","tools":["echo",{"name":"lookup","client":true}],"approval":{"echo":"ask"},"model_params":{"script":[{"tool_calls":[{"name":"echo","arguments":{"text":"a"}},{"name":"lookup"},{"name":"nope"}]}]}}`,
		`{"name":"sub","model":"scripted/x","subagents":["helper"],"model_params":{"script":[{"tool_calls":[{"name":"subagent_helper","arguments":{"task":"t"}}]},{"text":"ok"}]}}`,
		`{"name":"fails","model":"scripted/x","model_params":{"script":[{"text":"part","error":"boom"}]}}`,
		`{"name":"long","model":"scripted/x","model_params":{"script":[{"text":"cut","finish":"length"}]}}`,
	} {
		s.Agent(agent)
		var def struct{ Name string }
		_ = json.Unmarshal([]byte(agent), &def)
		_, body := s.Do("POST", "/openai/v1/responses", `{"model":"`+def.Name+`","input":"go","stream":true}`)
		var final json.RawMessage
		for _, line := range strings.Split(body, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var ev struct {
					Type     string          `json:"type"`
					Response json.RawMessage `json:"response"`
				}
				_ = json.Unmarshal([]byte(data), &ev)
				switch ev.Type {
				case "response.completed", "response.failed", "response.incomplete":
					final = ev.Response
				}
			}
		}
		var r struct{ ID string }
		if json.Unmarshal(final, &r) != nil || r.ID == "" {
			t.Fatalf("%s: no final response in %s", def.Name, body)
		}
		_, got := s.Do("GET", "/openai/v1/responses/"+r.ID, "")
		var a, b any
		_ = json.Unmarshal(final, &a)
		_ = json.Unmarshal([]byte(got), &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("%s: streamed\n%s\nstored\n%s", def.Name, ja, jb)
		}
	}
}

// TestInvalidArgumentsShownAsSent: a call whose arguments were not JSON
// fails, and its mcp_call shows the arguments as the model sent them
// (not as a JSON string of them).
func TestInvalidArgumentsShownAsSent(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bad","model":"scripted/b","tools":["echo"],"model_params":{"script":[{"tool_calls":[{"name":"echo","arguments":"{not json"}]},{"text":"ok"}]}}`)
	status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bad","input":"x"}`)
	var r struct {
		Output []struct {
			Type      string  `json:"type"`
			Arguments string  `json:"arguments"`
			Status    string  `json:"status"`
			Error     *string `json:"error"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || status != 200 || len(r.Output) == 0 {
		t.Fatalf("%d %s", status, body)
	}
	call := r.Output[0]
	if call.Type != "mcp_call" || call.Arguments != "{not json" || call.Status != "failed" || call.Error == nil {
		t.Fatalf("call %+v, want a failed mcp_call with arguments %q", call, "{not json")
	}
}
