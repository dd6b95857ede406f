package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

func newServer(t *testing.T) (*server, *openaitest.Server) {
	t.Helper()
	model := openaitest.New(t)
	model.SetAPIKey("sk-test")
	return start(t, t.TempDir()+"/forge.db", model), model
}

func TestTurnModes(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "instructions": "be brief"})
	sid := s.session("a")

	// wait
	model.Enqueue(openaitest.Text("Hel", "lo").Usage(12, 3))
	turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("hi"))
	if turn["status"] != "done" || turn["output"].(obj)["text"] != "Hello" {
		t.Fatalf("wait turn %v", turn)
	}
	if u := turn["usage"].(obj); u["input_tokens"] != 12.0 || u["output_tokens"] != 3.0 {
		t.Fatalf("usage %v", u)
	}
	req, _ := model.LastRequest()
	if req.Model != "gpt-test" || !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage {
		t.Fatalf("request %+v", req)
	}
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[0].Content != "be brief" || req.Messages[1].Content != "hi" {
		t.Fatalf("messages %+v", req.Messages)
	}

	// background
	model.Enqueue(openaitest.Text("back", "ground").DelayBetweenChunks(20 * time.Millisecond))
	bg := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "bg"}}, "background": true})
	if bg["status"] != "running" {
		t.Fatalf("background turn %v", bg)
	}
	done := s.waitStatus(sid, bg["id"].(string))
	if done["output"].(obj)["text"] != "background" {
		t.Fatalf("background result %v", done)
	}

	// stream
	model.Enqueue(openaitest.Text("str", "eam", "ed"))
	ch, cancel := s.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "s"}}, "stream": true})
	defer cancel()
	evs := collect(t, ch)
	assertIncreasing(t, evs)
	if evs[0].Type != "turn.created" || evs[len(evs)-1].Type != "turn.done" {
		t.Fatalf("stream from %s to %s", evs[0].Type, evs[len(evs)-1].Type)
	}
	if got := deltaText(evs); got != "streamed" {
		t.Fatalf("deltas %q", got)
	}
	final := evs[len(evs)-1].Data["data"].(obj)
	if final["output"].(obj)["text"] != "streamed" || final["last_seq"].(float64) != float64(evs[len(evs)-1].ID) {
		t.Fatalf("turn.done %v", final)
	}

	// replay: the stored log has no deltas, and the completed part row.
	tid := final["id"].(string)
	list := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid+"/events", nil)["data"].([]any)
	var text string
	for _, e := range list {
		ev := e.(obj)
		if ev["type"] == "model.message.delta" {
			t.Fatal("stored log holds a delta")
		}
		if ev["type"] == "model.message" && ev["data"].(obj)["state"] == "completed" {
			text = ev["data"].(obj)["text"].(string)
		}
	}
	if text != "streamed" {
		t.Fatalf("replayed text %q", text)
	}
	msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
	if len(msgs) != 6 {
		t.Fatalf("%d messages, want 6", len(msgs))
	}
}

func TestResumeWhileRunningAndAfterEnd(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	pieces := make([]string, 40)
	for i := range pieces {
		pieces[i] = fmt.Sprintf("w%d ", i)
	}
	model.Enqueue(openaitest.Text(pieces...).DelayBetweenChunks(15 * time.Millisecond))
	ch, cancel := s.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
	first := until(t, ch, func(seen []event) bool { return strings.Count(deltaText(seen), " ") == 10 })
	cancel() // the client drops; the turn goes on
	tid := first[0].Data["id"].(string)
	cursor := first[len(first)-1].ID

	// Resume with Last-Event-ID while the turn still runs.
	ch2, cancel2 := s.stream("GET", "/v1/sessions/"+sid+"/turns/"+tid+"/events", nil, "Last-Event-ID", fmt.Sprint(cursor))
	defer cancel2()
	rest := collect(t, ch2)
	all := append(first, rest...)
	assertIncreasing(t, all)
	if got, want := deltaText(all), strings.Join(pieces, ""); got != want {
		t.Fatalf("deltas after resume:\n got %q\nwant %q", got, want)
	}
	if all[len(all)-1].Type != "turn.done" {
		t.Fatal("resumed stream did not end with turn.done")
	}

	// Resume after the same cursor once the turn has ended: the stored log,
	// whose completed part carries the whole text.
	ch3, cancel3 := s.stream("GET", "/v1/sessions/"+sid+"/turns/"+tid+"/events?after="+fmt.Sprint(cursor), nil)
	defer cancel3()
	after := collect(t, ch3)
	assertIncreasing(t, after)
	if after[0].ID <= cursor || deltaText(after) != "" {
		t.Fatalf("replay after end starts at %d (cursor %d) with deltas %q", after[0].ID, cursor, deltaText(after))
	}
	var final string
	for _, ev := range after {
		if ev.Type == "model.message" {
			final = ev.Data["data"].(obj)["text"].(string)
		}
	}
	if final != strings.Join(pieces, "") {
		t.Fatalf("completed part %q", final)
	}
}

func TestClientToolAndValidation(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{
		obj{"name": "ask_user", "description": "ask", "input_schema": obj{"type": "object"}, "client": true},
	}})
	sid := s.session("a")
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "ask_user", Args: `{"q":"1"}`}, openaitest.Call{Name: "ask_user", Args: `{"q":"2"}`}))
	turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("go"))
	acts := turn["required_actions"].([]any)
	if turn["status"] != "done" || len(acts) != 2 || turn["output"] != nil {
		t.Fatalf("turn %v", turn)
	}
	a := acts[0].(obj)["call_id"].(string)
	b := acts[1].(obj)["call_id"].(string)
	res := func(id, out string) obj { return obj{"type": "tool_result", "call_id": id, "output": out} }
	bad := []struct {
		body   obj
		status int
		code   string
	}{
		{message("hello"), 409, "pending_actions"},
		{obj{"input": []obj{res("call_unknown", "x"), res(a, "x"), res(b, "y")}}, 400, "unknown_call"},
		{obj{"input": []obj{res(a, "x"), res(a, "x"), res(b, "y")}}, 400, "duplicate_call"},
		{obj{"input": []obj{res(a, "x")}}, 400, "incomplete_resolution"},
		{obj{"input": []obj{{"type": "tool_result", "call_id": a}}}, 400, "invalid_request"},
	}
	for _, tt := range bad {
		status, out := s.call("POST", "/v1/sessions/"+sid+"/turns", tt.body)
		if status != tt.status || out["error"].(obj)["code"] != tt.code {
			t.Errorf("%v: %d %v, want %d %s", tt.body, status, out, tt.status, tt.code)
		}
	}
	model.Enqueue(openaitest.Text("thanks"))
	next := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{res(b, "two"), res(a, "one")}})
	if next["output"].(obj)["text"] != "thanks" {
		t.Fatalf("next %v", next)
	}
	req, _ := model.LastRequest()
	// user, assistant(tool_calls), tool, tool
	m := req.Messages
	if len(m) != 4 || len(m[1].ToolCalls) != 2 || m[2].Role != "tool" || m[2].ToolCallID != a || m[2].Content != "one" || m[3].Content != "two" {
		t.Fatalf("model was sent %+v", m)
	}
}

func TestApprovalAllowAndDeny(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"echo"}, "approval": obj{"echo": "ask"}})
	for _, approved := range []bool{true, false} {
		sid := s.session("a")
		model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"secret"}`}), openaitest.Text("ok"))
		turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("go"))
		act := turn["required_actions"].([]any)[0].(obj)
		if act["type"] != "approval" || act["tool"] != "echo" {
			t.Fatalf("action %v", act)
		}
		s.must(200, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "approval", "call_id": act["call_id"], "approved": approved, "reason": "policy says no"}}})
		req, _ := model.LastRequest()
		got := req.Messages[len(req.Messages)-1]
		if approved && got.Content != "secret" {
			t.Fatalf("approved: tool result %q", got.Content)
		}
		if !approved && !strings.Contains(got.Content, "policy says no") {
			t.Fatalf("denied: tool result %q", got.Content)
		}
	}
}

func TestCancelAndSupersede(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("never", "ending").HangAfter(2))
	bg := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	waitFor(t, func() bool { return model.Pending() == 0 }) // the model is mid-reply
	status, out := s.call("POST", "/v1/sessions/"+sid+"/turns", message("again"))
	if status != 409 || out["error"].(obj)["code"] != "turn_in_progress" {
		t.Fatalf("second turn: %d %v", status, out)
	}
	c := s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{"reason": "changed my mind"}, "Idempotency-Key", "c1")
	if c["status"] != "cancelled" || c["cancel_reason"] != "client" || c["cancel_message"] != "changed my mind" || c["id"] != bg["id"] {
		t.Fatalf("cancel %v", c)
	}
	again := s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{"reason": "changed my mind"}, "Idempotency-Key", "c1")
	if again["id"] != c["id"] {
		t.Fatalf("idempotent cancel answered %v", again)
	}
	if status, out := s.call("POST", "/v1/sessions/"+sid+"/cancel", obj{}); status != 409 || out["error"].(obj)["code"] != "conflict" {
		t.Fatalf("cancel with nothing running: %d %v", status, out)
	}

	model.Enqueue(openaitest.Text("slow").HangAfter(1), openaitest.Text("fast"))
	asked := len(model.Requests())
	first := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "one"}}, "background": true})
	waitFor(t, func() bool { return len(model.Requests()) > asked }) // the slow reply is taken
	second := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "two"}}, "supersede": true})
	if second["output"].(obj)["text"] != "fast" {
		t.Fatalf("superseding turn %v", second)
	}
	old := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+first["id"].(string), nil)
	if old["status"] != "cancelled" || old["cancel_reason"] != "superseded" {
		t.Fatalf("superseded turn %v", old)
	}
}

func TestForkAndNewRoot(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("A"), openaitest.Text("B"), openaitest.Text("C"), openaitest.Text("D"))
	t1 := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("one"))
	s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("two"))
	fork := message("three")
	fork["previous_turn_id"] = t1["id"]
	t3 := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", fork)
	if t3["previous_turn_id"] != t1["id"] {
		t.Fatalf("fork %v", t3)
	}
	req, _ := model.LastRequest()
	var got []string
	for _, m := range req.Messages {
		got = append(got, m.Content)
	}
	if strings.Join(got, ",") != "one,A,three" {
		t.Fatalf("fork sent %v", got)
	}
	root := message("four")
	root["new_root"] = true
	s.must(200, "POST", "/v1/sessions/"+sid+"/turns", root)
	req, _ = model.LastRequest()
	if len(req.Messages) != 1 || req.Messages[0].Content != "four" {
		t.Fatalf("new root sent %+v", req.Messages)
	}
	sess := s.must(200, "GET", "/v1/sessions/"+sid, nil)
	msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
	if sess["tip_turn_id"] == t3["id"] || len(msgs) != 2 {
		t.Fatalf("after new root: tip %v, %d messages", sess["tip_turn_id"], len(msgs))
	}
}

func TestIterationLimit(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"echo"}, "iteration_limit": 2})
	sid := s.session("a")
	call := openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"x"}`})
	model.Enqueue(call, call, call)
	turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("loop"))
	if turn["status"] != "errored" || turn["error"].(obj)["code"] != "iteration_limit" || turn["iterations"] != 2.0 {
		t.Fatalf("turn %v", turn)
	}
	if n := len(model.Requests()); n != 2 {
		t.Fatalf("model called %d times", n)
	}
}

func TestConcurrentSessions(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	model.SetDefault(openaitest.Text("con", "current"))
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	const n = 25
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := s.session("a")
			for j := range 3 {
				status, out := s.call("POST", "/v1/sessions/"+sid+"/turns", message(fmt.Sprintf("s%d t%d", i, j)))
				if status != 200 || out["status"] != "done" || out["output"].(obj)["text"] != "concurrent" {
					errs <- fmt.Errorf("session %d turn %d: %d %v", i, j, status, out)
					return
				}
			}
			msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
			if len(msgs) != 6 {
				errs <- fmt.Errorf("session %d has %d messages", i, len(msgs))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBadInputNeverFails5xx(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	cases := []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/agents", `{"name":`, 400},
		{"POST", "/v1/agents", `{"name":"b","model":"openai/x","bogus":1}`, 400},
		{"POST", "/v1/agents", `{"name":"b","model":"openai/x","iteration_limit":0}`, 400},
		{"POST", "/v1/agents", `{"name":"b","model":"openai/x","iteration_limit":"ten"}`, 400},
		{"POST", "/v1/sessions", `{"agent":"nope"}`, 404},
		{"POST", "/v1/sessions/" + sid + "/turns", `{"input":[]}`, 400},
		{"POST", "/v1/sessions/" + sid + "/turns", `{"input":[{"type":"message","text":"x"}],"stream":"yes"}`, 400},
		{"POST", "/v1/sessions/ses_nope/turns", `{"input":[{"type":"message","text":"x"}]}`, 404},
		{"GET", "/v1/sessions/" + sid + "/turns/turn_nope", ``, 404},
		{"GET", "/v1/sessions/" + sid + "/events?after=abc", ``, 400},
		{"GET", "/v1/sessions/" + sid + "/messages?limit=0", ``, 400},
		{"POST", "/v1/sessions/" + sid + "/turns", strings.Repeat(" ", 5<<20), 413},
	}
	for _, c := range cases {
		status, raw := s.raw(c.method, c.path, c.body)
		if status != c.status || !strings.Contains(string(raw), `"error"`) {
			t.Errorf("%s %s %.40q: %d %s, want %d", c.method, c.path, c.body, status, raw, c.status)
		}
	}
	// Nothing was stored by any of them.
	if turns := s.must(200, "GET", "/v1/sessions/"+sid+"/turns", nil)["data"].([]any); len(turns) != 0 {
		t.Fatalf("bad requests created %d turns", len(turns))
	}
}
