package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/protocol/a2a"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
)

// event is one stream response: a JSON-RPC response whose result is a
// Task, a status-update or an artifact-update.
type event struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  struct {
		Kind      string `json:"kind"`
		ID        string `json:"id"`     // a Task's
		TaskID    string `json:"taskId"` // an update's
		ContextID string `json:"contextId"`
		Status    *struct {
			State     string `json:"state"`
			Timestamp string `json:"timestamp"`
			Message   *struct {
				Kind  string `json:"kind"`
				Parts []struct {
					Kind string          `json:"kind"`
					Text *string         `json:"text"`
					Data json.RawMessage `json:"data"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"status"`
		Final     *bool `json:"final"`
		Append    *bool `json:"append"`
		LastChunk *bool `json:"lastChunk"`
		Artifact  *struct {
			ArtifactID string `json:"artifactId"`
			Parts      []struct {
				Kind string  `json:"kind"`
				Text *string `json:"text"`
			} `json:"parts"`
		} `json:"artifact"`
		Artifacts []a2a.Artifact `json:"artifacts"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw string
}

// sseStream reads one stream response's events as they come.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// open posts a JSON-RPC request (id 7) and returns its stream; a non-SSE
// answer fails the test.
func open(t *testing.T, s *prototest.Stack, key, agent, method, params string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/a2a/"+agent,
		strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"`+method+`","params":`+params+`}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("%s: %d %s %s", method, resp.StatusCode, ct, b)
	}
	st := &sseStream{t: t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(st.close)
	return st
}

func (st *sseStream) close() {
	st.cancel()
	st.resp.Body.Close()
}

// next returns the next event, nil at the end of the stream.
func (st *sseStream) next() *event {
	st.t.Helper()
	for {
		line, err := st.r.ReadString('\n')
		if err == io.EOF && line == "" {
			return nil
		}
		if err != nil && err != io.EOF {
			st.t.Fatalf("reading the stream: %v", err)
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
		if !ok {
			continue // a blank line, a ping comment
		}
		ev := &event{raw: data}
		if err := json.Unmarshal([]byte(data), ev); err != nil || ev.JSONRPC != "2.0" || string(ev.ID) != "7" {
			st.t.Fatalf("event %s: %v", data, err)
		}
		return ev
	}
}

// all reads the rest of the stream.
func (st *sseStream) all() []*event {
	st.t.Helper()
	var out []*event
	for ev := st.next(); ev != nil; ev = st.next() {
		out = append(out, ev)
	}
	return out
}

func sendParts(contextID, taskID string, parts ...map[string]any) string {
	m := map[string]any{"kind": "message", "role": "user", "messageId": "m2", "parts": parts}
	if contextID != "" {
		m["contextId"] = contextID
	}
	if taskID != "" {
		m["taskId"] = taskID
	}
	b, _ := json.Marshal(map[string]any{"message": m})
	return string(b)
}

// checkTurnStream checks the shape every message/stream has: the Task
// (submitted), status-update working, artifact chunks of <task>-output
// (the first replacing, the others appending, a last one closing it) and
// the final status-update; it returns the task id and the text streamed.
func checkTurnStream(t *testing.T, evs []*event, wantFinal string) (taskID, text string) {
	t.Helper()
	dump := func() string {
		var b strings.Builder
		for _, ev := range evs {
			b.WriteString(ev.raw + "\n")
		}
		return b.String()
	}
	if len(evs) < 3 {
		t.Fatalf("too few events:\n%s", dump())
	}
	first := evs[0].Result
	if first.Kind != "task" || first.ID == "" || first.ContextID == "" || first.Status == nil || first.Status.State != "submitted" || first.Status.Timestamp == "" {
		t.Fatalf("the first event is not the submitted Task:\n%s", dump())
	}
	taskID = first.ID
	if w := evs[1].Result; w.Kind != "status-update" || w.TaskID != taskID || w.Status.State != "working" || w.Final == nil || *w.Final {
		t.Fatalf("the second event is not status-update working:\n%s", dump())
	}
	last := evs[len(evs)-1].Result
	if last.Kind != "status-update" || last.TaskID != taskID || last.ContextID != first.ContextID || last.Final == nil || !*last.Final ||
		last.Status.State != wantFinal || last.Status.Timestamp == "" {
		t.Fatalf("the last event is not the final status-update %s:\n%s", wantFinal, dump())
	}
	chunks := 0
	for i, ev := range evs[2 : len(evs)-1] {
		r := ev.Result
		if r.Kind != "artifact-update" || r.TaskID != taskID || r.ContextID != first.ContextID || r.Artifact == nil ||
			r.Artifact.ArtifactID != taskID+"-output" || len(r.Artifact.Parts) != 1 || r.Artifact.Parts[0].Kind != "text" ||
			r.Artifact.Parts[0].Text == nil || r.Append == nil || r.LastChunk == nil {
			t.Fatalf("event %d is not an artifact-update of %s-output:\n%s", i+2, taskID, dump())
		}
		isLast := i+2 == len(evs)-2
		if *r.LastChunk != isLast || (chunks == 0) == *r.Append || isLast && *r.Artifact.Parts[0].Text != "" {
			t.Fatalf("event %d: append %v lastChunk %v:\n%s", i+2, *r.Append, *r.LastChunk, dump())
		}
		text += *r.Artifact.Parts[0].Text
		chunks++
	}
	return taskID, text
}

// TestA2AMessageStream: message/stream's events in order and shape, the
// text as chunks of one artifact, the final status-update; the task then
// read with tasks/get and tasks/resubscribe (ended: its Task and final
// status-update).
func TestA2AMessageStream(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, a2a.Protocol{})
	if status, b := s.Do("POST", "/v1/agents", `{"name":"echo","model":"scripted/echo"}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	_, body := s.Do("GET", "/a2a/echo/.well-known/agent-card.json", "", "Authorization", "Bearer ka")
	var card struct{ Capabilities struct{ Streaming bool } }
	if json.Unmarshal([]byte(body), &card) != nil || !card.Capabilities.Streaming {
		t.Fatalf("the card does not say streaming: %s", body)
	}

	evs := open(t, s, "ka", "echo", "message/stream", send("hello streamed world", "")).all()
	taskID, text := checkTurnStream(t, evs, "completed")
	if text != "echo: hello streamed world" || len(evs) < 6 { // several chunks: a word per delta
		t.Fatalf("streamed text %q in %d events", text, len(evs))
	}
	contextID := evs[0].Result.ContextID

	a := call(t, s, "ka", "echo", "tasks/get", `{"id":"`+taskID+`"}`)
	if a.Error != nil || a.Result.Status.State != "completed" || len(a.Result.Artifacts) != 1 ||
		a.Result.Artifacts[0].ArtifactID != taskID+"-output" || a.Result.Artifacts[0].Parts[0].Text != text {
		t.Fatalf("tasks/get: %+v %+v", a.Result, a.Error)
	}

	// A second message in the same context streams a new task.
	evs = open(t, s, "ka", "echo", "message/stream", send("again", contextID)).all()
	second, text := checkTurnStream(t, evs, "completed")
	if second == taskID || evs[0].Result.ContextID != contextID || text != "echo: again" {
		t.Fatalf("second stream: task %s context %s text %q", second, evs[0].Result.ContextID, text)
	}

	// A turn that fails: its text so far, then failed with the error.
	if status, b := s.Do("POST", "/v1/agents", `{"name":"boom","model":"scripted/x","model_params":{"script":[{"text":"half an answer","error":"the model broke"}]}}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	evs = open(t, s, "ka", "boom", "message/stream", send("x", "")).all()
	if _, text := checkTurnStream(t, evs, "failed"); text != "half an answer" {
		t.Fatalf("failed stream text %q", text)
	}
	if m := evs[len(evs)-1].Result.Status.Message; m == nil || len(m.Parts) != 1 || !strings.Contains(*m.Parts[0].Text, "the model broke") {
		t.Fatalf("failed status message: %s", evs[len(evs)-1].raw)
	}

	// Resubscribing to an ended task: its Task, then its final update.
	evs = open(t, s, "ka", "echo", "tasks/resubscribe", `{"id":"`+taskID+`"}`).all()
	if len(evs) != 2 || evs[0].Result.Kind != "task" || evs[0].Result.ID != taskID || evs[0].Result.Status.State != "completed" ||
		len(evs[0].Result.Artifacts) != 1 || evs[1].Result.Kind != "status-update" || evs[1].Result.Final == nil || !*evs[1].Result.Final ||
		evs[1].Result.Status.State != "completed" || evs[1].Result.TaskID != taskID {
		t.Fatalf("resubscribe to an ended task: %d events %+v", len(evs), evs)
	}
}

// TestA2AResubscribeRunning: a client that hangs up on message/stream
// leaves its task running; tasks/resubscribe replays it (the Task working,
// the text so far) and follows it live to its final status-update
// (canceled, by tasks/cancel).
func TestA2AResubscribeRunning(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, a2a.Protocol{})
	if status, b := s.Do("POST", "/v1/agents", `{"name":"slow","model":"scripted/x","model_params":{"script":[{"text":"thinking hard","hang":true}]}}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	st := open(t, s, "ka", "slow", "message/stream", send("go", ""))
	first := st.next()
	if first == nil || first.Result.Kind != "task" || first.Result.Status.State != "submitted" {
		t.Fatalf("first event: %+v", first)
	}
	taskID := first.Result.ID
	var text string
	for text != "thinking hard" {
		ev := st.next()
		if ev == nil || ev.Result.Kind == "status-update" && *ev.Result.Final {
			t.Fatalf("the stream ended before the text: %+v (text %q)", ev, text)
		}
		if ev.Result.Kind == "artifact-update" {
			text += *ev.Result.Artifact.Parts[0].Text
		}
	}
	st.close() // hang up: the task runs on

	a := call(t, s, "ka", "slow", "tasks/get", `{"id":"`+taskID+`"}`)
	if a.Error != nil || a.Result.Status.State != "working" {
		t.Fatalf("tasks/get after hanging up: %+v %+v", a.Result, a.Error)
	}
	re := open(t, s, "ka", "slow", "tasks/resubscribe", `{"id":"`+taskID+`"}`)
	if ev := re.next(); ev == nil || ev.Result.Kind != "task" || ev.Result.ID != taskID || ev.Result.Status.State != "working" || len(ev.Result.Artifacts) != 0 {
		t.Fatalf("resubscribe's first event: %+v", ev)
	}
	if ev := re.next(); ev == nil || ev.Result.Kind != "status-update" || ev.Result.Status.State != "working" || *ev.Result.Final {
		t.Fatalf("resubscribe's second event: %+v", ev)
	}
	text = ""
	for text != "thinking hard" {
		ev := re.next()
		if ev == nil || ev.Result.Kind != "artifact-update" || ev.Result.Artifact.ArtifactID != taskID+"-output" {
			t.Fatalf("replayed text: %+v (so far %q)", ev, text)
		}
		text += *ev.Result.Artifact.Parts[0].Text
	}
	if a := call(t, s, "ka", "slow", "tasks/cancel", `{"id":"`+taskID+`"}`); a.Error != nil || a.Result.Status.State != "canceled" {
		t.Fatalf("tasks/cancel: %+v %+v", a.Result, a.Error)
	}
	rest := re.all()
	if n := len(rest); n < 2 || rest[n-2].Result.Kind != "artifact-update" || !*rest[n-2].Result.LastChunk ||
		rest[n-1].Result.Kind != "status-update" || !*rest[n-1].Result.Final || rest[n-1].Result.Status.State != "canceled" {
		t.Fatalf("the end of the resubscribed stream: %d events %+v", n, rest)
	}
}

// TestA2AInputRequired: a turn waiting for an approval is input-required
// in message/stream, tasks/get and message/send (its status message names
// the call in a data part); a message/send in the same context whose data
// part approves the call resumes it (a new task, completed).
func TestA2AInputRequired(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, a2a.Protocol{})
	agent := `{"name":"ask","model":"scripted/x","tools":["echo"],"approval":{"echo":"ask"},"model_params":{"script":[` +
		`{"text":"let me check","tool_calls":[{"name":"echo","arguments":{"text":"a"}}]},{"text":"approved and done"}]}}`
	if status, b := s.Do("POST", "/v1/agents", agent, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	evs := open(t, s, "ka", "ask", "message/stream", send("please", "")).all()
	taskID, text := checkTurnStream(t, evs, "input-required")
	contextID := evs[0].Result.ContextID
	msg := evs[len(evs)-1].Result.Status.Message
	if text != "let me check" || msg == nil || len(msg.Parts) != 2 || msg.Parts[1].Kind != "data" {
		t.Fatalf("input-required: text %q message %+v", text, msg)
	}
	var pending struct {
		RequiredActions []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Tool   string `json:"tool"`
		} `json:"required_actions"`
	}
	if err := json.Unmarshal(msg.Parts[1].Data, &pending); err != nil || len(pending.RequiredActions) != 1 ||
		pending.RequiredActions[0].Type != "approval" || pending.RequiredActions[0].Tool != "echo" {
		t.Fatalf("required actions %s: %v", msg.Parts[1].Data, err)
	}
	callID := pending.RequiredActions[0].CallID
	if a := call(t, s, "ka", "ask", "tasks/get", `{"id":"`+taskID+`"}`); a.Error != nil || a.Result.Status.State != "input-required" {
		t.Fatalf("tasks/get: %+v %+v", a.Result, a.Error)
	}
	// A message of text while the call waits: refused.
	if a := call(t, s, "ka", "ask", "message/send", send("hm?", contextID)); a.Error == nil {
		t.Fatalf("a message while a call waits: %+v", a.Result)
	}
	for _, c := range []struct{ params, why string }{
		{sendParts(contextID, taskID, map[string]any{"kind": "data", "data": map[string]any{"type": "message", "text": "x"}}), "a data part of type message"},
		{sendParts(contextID, taskID, map[string]any{"kind": "data", "data": map[string]any{"type": "approval", "call_id": callID, "approved": true, "extra": 1}}), "an unknown field"},
		{sendParts(contextID, taskID, map[string]any{"kind": "data", "data": "approve"}), "data that is not an object"},
		{sendParts(contextID, taskID, map[string]any{"kind": "text", "text": "yes"}, map[string]any{"kind": "data", "data": map[string]any{"type": "approval", "call_id": callID, "approved": true}}), "text and data"},
		{sendParts(contextID, taskID, map[string]any{"kind": "data", "data": map[string]any{"type": "approval", "call_id": "call_nope", "approved": true}}), "an unknown call"},
		{sendParts("sess_nope", taskID, map[string]any{"kind": "data", "data": map[string]any{"type": "approval", "call_id": callID, "approved": true}}), "another context than the task's"},
	} {
		if a := call(t, s, "ka", "ask", "message/send", c.params); a.Error == nil || a.Error.Code != -32602 {
			t.Errorf("%s: %+v %+v, want -32602", c.why, a.Result, a.Error)
		}
	}
	if a := call(t, s, "ka", "ask", "message/send", sendParts(contextID, "turn_nope", map[string]any{"kind": "data", "data": map[string]any{"type": "approval", "call_id": callID, "approved": true}})); a.Error == nil || a.Error.Code != -32001 {
		t.Errorf("an unknown taskId: %+v", a.Error)
	}
	a := call(t, s, "ka", "ask", "message/send", sendParts(contextID, taskID, map[string]any{"kind": "data", "data": map[string]any{"type": "approval", "call_id": callID, "approved": true}}))
	if a.Error != nil || a.Result.Status.State != "completed" || a.Result.ID == taskID || a.Result.ContextID != contextID ||
		len(a.Result.Artifacts) != 1 || a.Result.Artifacts[0].Parts[0].Text != "approved and done" {
		t.Fatalf("the approval: %+v %+v", a.Result, a.Error)
	}
	if a := call(t, s, "ka", "ask", "tasks/get", `{"id":"`+taskID+`"}`); a.Error != nil || a.Result.Status.State != "input-required" {
		t.Fatalf("the waiting task after its resolution (a turn's status stays): %+v %+v", a.Result, a.Error)
	}

	// A client tool: input-required in message/send too; its output is a
	// tool_result data part (taskId alone names the context).
	if status, b := s.Do("POST", "/v1/agents", `{"name":"cli","model":"scripted/x","tools":[{"name":"lookup","client":true}],"model_params":{"script":[`+
		`{"tool_calls":[{"name":"lookup","arguments":{"q":"42"}}]},{"text":"found it"}]}}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	a = call(t, s, "ka", "cli", "message/send", send("look it up", ""))
	if a.Error != nil || a.Result.Status.State != "input-required" || a.Result.Status.Message == nil || len(a.Result.Status.Message.Parts) != 2 {
		t.Fatalf("a client tool call: %+v %+v", a.Result, a.Error)
	}
	if err := json.Unmarshal(a.Result.Status.Message.Parts[1].Data, &pending); err != nil || len(pending.RequiredActions) != 1 ||
		pending.RequiredActions[0].Type != "client_tool" || pending.RequiredActions[0].Tool != "lookup" {
		t.Fatalf("required actions %s: %v", a.Result.Status.Message.Parts[1].Data, err)
	}
	evs = open(t, s, "ka", "cli", "message/stream", sendParts("", a.Result.ID,
		map[string]any{"kind": "data", "data": map[string]any{"type": "tool_result", "call_id": pending.RequiredActions[0].CallID, "output": "Paris"}})).all()
	if _, text := checkTurnStream(t, evs, "completed"); text != "found it" || evs[0].Result.ContextID != a.Result.ContextID {
		t.Fatalf("the client tool's output: text %q context %s", text, evs[0].Result.ContextID)
	}
}

// TestA2AStreamErrors: what bad or foreign requests to message/stream and
// tasks/resubscribe get (JSON-RPC errors as JSON, no stream), and that
// hostile bodies store nothing.
func TestA2AStreamErrors(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, a2a.Protocol{})
	for _, key := range []string{"ka", "kb"} {
		if status, b := s.Do("POST", "/v1/agents", `{"name":"echo","model":"scripted/echo"}`, "Authorization", "Bearer "+key); status != 201 {
			t.Fatalf("agent: %d %s", status, b)
		}
	}
	a := call(t, s, "ka", "echo", "message/send", send("mine", ""))
	if a.Error != nil {
		t.Fatal(a.Error)
	}
	mine := a.Result
	_, sessionsBefore := s.Do("GET", "/v1/sessions", "", "Authorization", "Bearer kb")

	for _, c := range []struct {
		key, method, params string
		code                int
	}{
		{"ka", "tasks/resubscribe", `{"id":"turn_nope"}`, -32001},
		{"kb", "tasks/resubscribe", `{"id":"` + mine.ID + `"}`, -32001}, // another tenant's task
		{"ka", "tasks/resubscribe", `{}`, -32602},
		{"ka", "tasks/resubscribe", `{"id":7}`, -32602},
		{"ka", "tasks/resubscribe", `[1]`, -32602},
		{"ka", "message/stream", `{"message":{"role":"agent","parts":[{"kind":"text","text":"x"}]}}`, -32602},
		{"ka", "message/stream", `{"message":{"role":"user","parts":[]}}`, -32602},
		{"ka", "message/stream", `"x"`, -32602},
		{"ka", "message/stream", `{"message":{"role":"user","parts":[{"kind":"file","file":{}}]}}`, -32602},
		{"ka", "message/stream", `{"message":{"role":"user","parts":[{"kind":"audio"}]}}`, -32004},
		{"kb", "message/stream", send("x", mine.ContextID), -32001},                                           // another tenant's context
		{"kb", "message/stream", sendParts("", mine.ID, map[string]any{"kind": "text", "text": "x"}), -32001}, // another tenant's task
		{"ka", "message/stream", sendParts("", "", map[string]any{"kind": "data", "data": map[string]any{"type": "approval"}}), -32602},
		{"ka", "message/stream", sendParts("", "", manyParts(1001)...), -32602},
	} {
		if a := call(t, s, c.key, "echo", c.method, c.params); a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s %s %s: %+v, want code %d", c.key, c.method, c.params, a.Error, c.code)
		}
	}
	// Hostile bodies: over the size limit, invalid UTF-8 in a part.
	huge := `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":` + send(strings.Repeat("a", 5<<20), "") + `}`
	if status, resp := s.Do("POST", "/a2a/echo", huge, "Authorization", "Bearer kb"); status != 413 || !strings.Contains(resp, `"error"`) {
		t.Errorf("a huge part: %d %.200s", status, resp)
	}
	bad := "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/stream\",\"params\":{\"message\":{\"role\":\"user\",\"parts\":[{\"kind\":\"text\",\"text\":\"a\xff\xfeb\"}]}}}"
	if status, resp := s.Do("POST", "/a2a/echo", bad, "Authorization", "Bearer kb"); status >= 500 || !strings.Contains(resp, `"error"`) || !strings.Contains(resp, fmt.Sprint(-32700)) {
		t.Errorf("an invalid UTF-8 part: %d %s", status, resp)
	}
	if _, after := s.Do("GET", "/v1/sessions", "", "Authorization", "Bearer kb"); after != sessionsBefore {
		t.Errorf("bad requests stored sessions: %s, was %s", after, sessionsBefore)
	}
}

func manyParts(n int) []map[string]any {
	parts := make([]map[string]any, n)
	for i := range parts {
		parts[i] = map[string]any{"kind": "text", "text": "x"}
	}
	return parts
}
