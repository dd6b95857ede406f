package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// Busy sessions (API.md): if_busy enqueue, cancel of a queued turn, and
// queued turns surviving a kill -9.

func enqueued(text string) obj {
	return obj{"input": []obj{{"type": "message", "text": text}}, "if_busy": "enqueue", "background": true}
}

// waitEnded polls a turn until it has ended (neither queued nor running).
func (s *server) waitEnded(sid, tid string) obj {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		t := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil)
		if t["status"] != "running" && t["status"] != "queued" {
			return t
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("turn %s has not ended", tid)
	return nil
}

func (s *server) statuses(sid string) string {
	s.t.Helper()
	var out []string
	for _, t := range s.must(200, "GET", "/v1/sessions/"+sid+"/turns", nil)["data"].([]any) {
		out = append(out, t.(obj)["status"].(string))
	}
	return strings.Join(out, ",")
}

// holdTurn starts a background turn whose model reply hangs until the
// turn is cancelled, and returns it once the model has its request.
func holdTurn(t *testing.T, s *server, model *openaitest.Server, sid, text string) obj {
	t.Helper()
	asked := len(model.Requests())
	model.Enqueue(openaitest.Text("slow").HangAfter(1))
	// A turn that has just ended (as another replica or a GET saw it) may
	// still be leaving its replica: turn_in_progress is retried.
	var first obj
	waitFor(t, func() bool {
		st, body := s.call("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": text}}, "background": true})
		if st != 202 && st != 409 {
			t.Fatalf("holding turn: %d %v", st, body)
		}
		first = body
		return st == 202
	})
	waitFor(t, func() bool { return len(model.Requests()) > asked })
	return first
}

func TestEnqueuedTurnsRunInOrder(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	first := holdTurn(t, s, model, sid, "one")
	model.Enqueue(openaitest.Text("B"), openaitest.Text("C"))

	second := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("two"))
	if second["status"] != "queued" || second["previous_turn_id"] != nil || second["ended_at"] != nil {
		t.Fatalf("enqueued turn %v", second)
	}
	sid2 := second["id"].(string)
	if got := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+sid2, nil); got["status"] != "queued" {
		t.Fatalf("GET queued turn %v", got)
	}
	// Its stream, opened while it waits, shows it from its start.
	events, cancelEvents := s.stream("GET", "/v1/sessions/"+sid+"/turns/"+sid2+"/events", nil)
	defer cancelEvents()

	// The third waits for its answer (no background): it comes once it ran.
	thirdDone := make(chan obj, 1)
	go func() {
		status, body := s.call("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "three"}}, "if_busy": "enqueue"})
		if status != 200 {
			body = obj{"status_code": status, "body": body}
		}
		thirdDone <- body
	}()
	waitFor(t, func() bool { return s.statuses(sid) == "running,queued,queued" })
	// Without if_busy (the agent's default: reject), the session is busy.
	if st, body := s.call("POST", "/v1/sessions/"+sid+"/turns", message("four")); st != 409 || body["error"].(obj)["code"] != "turn_in_progress" {
		t.Fatalf("a turn without if_busy: %d %v", st, body)
	}

	// End the first: the second runs, then the third.
	s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{})
	got2 := s.waitEnded(sid, sid2)
	if got2["status"] != "done" || got2["output"].(obj)["text"] != "B" || got2["previous_turn_id"] != first["id"] {
		t.Fatalf("second turn %v", got2)
	}
	var got3 obj
	select {
	case got3 = <-thirdDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the third turn's answer did not come")
	}
	if got3["status"] != "done" || got3["output"] == nil || got3["output"].(obj)["text"] != "C" || got3["previous_turn_id"] != sid2 {
		t.Fatalf("third turn %v", got3)
	}
	if got := s.statuses(sid); got != "cancelled,done,done" {
		t.Fatalf("turns %s", got)
	}
	// The third saw the second's exchange in its history.
	req, _ := model.LastRequest()
	var sent []string
	for _, m := range req.Messages {
		sent = append(sent, m.Content)
	}
	if n := len(sent); n < 3 || strings.Join(sent[n-3:], ",") != "two,B,three" {
		t.Fatalf("third turn sent %v", sent)
	}
	evs := collect(t, events)
	if len(evs) < 2 || evs[0].Type != "turn.created" || evs[0].Data["data"].(obj)["status"] != "running" ||
		evs[len(evs)-1].Type != "turn.done" || deltaText(evs) != "B" {
		t.Fatalf("queued turn's stream %v", evs)
	}
}

func TestCancelQueuedTurn(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	holdTurn(t, s, model, sid, "one")

	queued := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("two"))
	qid := queued["id"].(string)
	events, cancelEvents := s.stream("GET", "/v1/sessions/"+sid+"/turns/"+qid+"/events", nil)
	defer cancelEvents()
	c := s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{"turn_id": qid, "reason": "never mind"})
	if c["status"] != "cancelled" || c["cancel_reason"] != "client" || c["cancel_message"] != "never mind" || c["ended_at"] == nil {
		t.Fatalf("cancelled queued turn %v", c)
	}
	if got := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+qid, nil); got["status"] != "cancelled" {
		t.Fatalf("GET cancelled queued turn %v", got)
	}
	evs := collect(t, events)
	if len(evs) != 2 || evs[0].Type != "turn.created" || evs[1].Type != "turn.done" || evs[1].Data["data"].(obj)["status"] != "cancelled" {
		t.Fatalf("cancelled queued turn's stream %v", evs)
	}
	if got := s.statuses(sid); got != "running,cancelled" {
		t.Fatalf("turns %s", got)
	}
	// Cancelling it again, an unknown turn, or an empty id.
	if st, body := s.call("POST", "/v1/sessions/"+sid+"/cancel", obj{"turn_id": qid}); st != 409 || body["error"].(obj)["code"] != "conflict" {
		t.Fatalf("cancel again: %d %v", st, body)
	}
	if st, body := s.call("POST", "/v1/sessions/"+sid+"/cancel", obj{"turn_id": "turn_nope"}); st != 404 {
		t.Fatalf("cancel an unknown turn: %d %v", st, body)
	}
	if st, body := s.call("POST", "/v1/sessions/"+sid+"/cancel", obj{"turn_id": ""}); st != 400 {
		t.Fatalf("cancel an empty turn id: %d %v", st, body)
	}

	// A streamed enqueue: the stream waits with the turn, and ends when it
	// is cancelled.
	ch, cancelStream := s.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "streamed"}}, "if_busy": "enqueue", "stream": true})
	defer cancelStream()
	var sqid string
	waitFor(t, func() bool {
		ts := s.must(200, "GET", "/v1/sessions/"+sid+"/turns", nil)["data"].([]any)
		last := ts[len(ts)-1].(obj)
		sqid, _ = last["id"].(string)
		return len(ts) == 3 && last["status"] == "queued"
	})
	s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{"turn_id": sqid})
	if evs := collect(t, ch); len(evs) != 2 || evs[0].Type != "turn.created" || evs[1].Type != "turn.done" || evs[1].Data["id"] != sqid {
		t.Fatalf("streamed enqueue, cancelled: %v", evs)
	}

	// The running turn ends; the cancelled ones never run.
	asked := len(model.Requests())
	s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{})
	model.Enqueue(openaitest.Text("D"))
	next := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("three"))
	if next["output"].(obj)["text"] != "D" {
		t.Fatalf("next turn %v", next)
	}
	if n := len(model.Requests()); n != asked+1 {
		t.Fatalf("model asked %d times after the cancel, want 1 (the cancelled queued turn must not run)", n-asked)
	}
	req, _ := model.LastRequest()
	for _, m := range req.Messages {
		if m.Content == "two" || m.Content == "streamed" {
			t.Fatalf("the cancelled queued turn's message reached the model: %v", req.Messages)
		}
	}
}

func TestIfBusyValidationAndAgentDefault(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	for _, bad := range []obj{
		{"name": "b1", "model": "openai/gpt-test", "if_busy": "sometimes"},
		{"name": "b3", "model": "openai/gpt-test", "if_busy": ""},
		{"name": "b4", "model": "openai/gpt-test", "if_busy": 1},
	} {
		if st, body := s.call("POST", "/v1/agents", bad); st != 400 || body["error"].(obj)["code"] != "invalid_request" {
			t.Fatalf("agent %v: %d %v", bad, st, body)
		}
	}
	s.agent(obj{"name": "q", "model": "openai/gpt-test", "if_busy": "enqueue"})
	if got := s.must(200, "GET", "/v1/agents/q", nil); got["if_busy"] != "enqueue" {
		t.Fatalf("agent %v", got)
	}
	sid := s.session("q")
	for _, c := range []struct {
		body obj
		want string
	}{
		{obj{"input": []obj{{"type": "message", "text": "x"}}, "if_busy": "sometimes"}, "if_busy must be"},
		{obj{"input": []obj{{"type": "message", "text": "x"}}, "if_busy": "STEER"}, "if_busy must be"},
		{obj{"input": []obj{{"type": "message", "text": "x"}}, "if_busy": ""}, "if_busy must be"},
		{obj{"input": []obj{{"type": "message", "text": "x"}}, "if_busy": "enqueue", "supersede": true}, "supersede"},
	} {
		st, body := s.call("POST", "/v1/sessions/"+sid+"/turns", c.body)
		if st != 400 || !strings.Contains(fmt.Sprint(body["error"].(obj)["message"]), c.want) {
			t.Fatalf("turn %v: %d %v", c.body, st, body)
		}
	}

	holdTurn(t, s, model, sid, "one")
	// The agent's default queues the turn; the request's own value wins.
	model.Enqueue(openaitest.Text("B"))
	queued := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "two"}}, "background": true})
	if queued["status"] != "queued" {
		t.Fatalf("agent default enqueue: %v", queued)
	}
	if st, body := s.call("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "x"}}, "if_busy": "reject"}); st != 409 {
		t.Fatalf("if_busy reject over the agent's enqueue: %d %v", st, body)
	}
	// An enqueued request repeated with its Idempotency-Key is the same turn.
	model.Enqueue(openaitest.Text("C"))
	k1 := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("three"), "Idempotency-Key", "k-three")
	k2 := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("three"), "Idempotency-Key", "k-three")
	if k1["id"] != k2["id"] || k1["status"] != "queued" {
		t.Fatalf("idempotent enqueue %v then %v", k1, k2)
	}
	s.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{})
	s.waitEnded(sid, queued["id"].(string))
	got := s.waitEnded(sid, k1["id"].(string))
	if got["status"] != "done" || got["previous_turn_id"] != queued["id"] {
		t.Fatalf("idempotent queued turn %v", got)
	}
}

func TestQueuedTurnStartsAfterKill9(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	first := holdTurn(t, s, model, sid, "one")
	queued := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("two"))
	if queued["status"] != "queued" {
		t.Fatalf("enqueued %v", queued)
	}
	s.kill9()

	// Recovery ends the abandoned turn and starts the queued one.
	model.Enqueue(openaitest.Text("after the crash"))
	s2 := start(t, db, model)
	got := s2.waitEnded(sid, queued["id"].(string))
	if got["status"] != "done" || got["output"].(obj)["text"] != "after the crash" || got["previous_turn_id"] != first["id"] {
		t.Fatalf("queued turn after restart %v", got)
	}
	if old := s2.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+first["id"].(string), nil); old["cancel_reason"] != "abandoned" {
		t.Fatalf("first turn %v", old)
	}
}

// TestQueuedTurnsAcrossReplicas: a turn enqueued on a replica that does
// not run the session's turn (the store refuses it: one runs elsewhere)
// starts once that turn ends on its replica; one enqueued behind a turn
// whose replica is killed starts when another replica takes the dead
// turn over.
func TestQueuedTurnsAcrossReplicas(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	_, rs := cluster(t, 3, model)
	rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := rs[0].session("a")

	first := holdTurn(t, rs[0], model, sid, "one")
	queued := rs[1].must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("two"))
	if queued["status"] != "queued" {
		t.Fatalf("enqueued on another replica %v", queued)
	}
	model.Enqueue(openaitest.Text("B"))
	rs[2].must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{})
	got := rs[2].waitEnded(sid, queued["id"].(string))
	if got["status"] != "done" || got["output"].(obj)["text"] != "B" || got["previous_turn_id"] != first["id"] {
		t.Fatalf("queued turn after the other replica's turn ended %v", got)
	}

	// The owner of the running turn dies: the queued turn starts on a
	// live replica once the lease sweep has ended the dead one's turn.
	held := holdTurn(t, rs[0], model, sid, "three")
	waitFor(t, func() bool { return rs[1].statuses(sid) == "cancelled,done,running" })
	behind := rs[2].must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("four"))
	model.Enqueue(openaitest.Text("D"))
	rs[0].kill9()
	got = rs[1].waitEnded(sid, behind["id"].(string))
	if got["status"] != "done" || got["output"].(obj)["text"] != "D" || got["previous_turn_id"] != held["id"] {
		t.Fatalf("queued turn after the owner died %v", got)
	}
}

// gatedModel answers the first chat request with first once release is
// closed, the second with second; nil second falls back to the queue.
func gatedModel(model *openaitest.Server, first, second openaitest.Response) chan struct{} {
	release := make(chan struct{})
	var n atomic.Int32
	model.SetResponder(func(*openaitest.Request) (openaitest.Response, bool) {
		switch n.Add(1) {
		case 1:
			<-release
			return first, true
		case 2:
			return second, true
		}
		return openaitest.Response{}, false
	})
	return release
}

func TestSteerJoinsTheRunningTurn(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"todo"}})
	sid := s.session("a")
	release := gatedModel(model,
		openaitest.ToolCalls(openaitest.Call{Name: "todo_write", Args: `{"items":[{"content":"x","status":"pending"}]}`}),
		openaitest.Text("steered"))
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	first := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "one"}}, "background": true})
	fid := first["id"].(string)
	waitFor(t, func() bool { return len(model.Requests()) >= 1 })
	answer := make(chan obj, 1)
	go func() {
		_, body := s.call("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "also this"}}, "if_busy": "steer", "background": true})
		answer <- body
	}()
	waitFor(t, func() bool { return strings.Contains(s.logs.String(), "steer message waiting") })
	close(release)
	var joined obj
	select {
	case joined = <-answer:
	case <-time.After(30 * time.Second):
		t.Fatal("the steer request was not answered")
	}
	if joined["id"] != fid || joined["status"] != "running" {
		t.Fatalf("steer answer %v", joined)
	}
	done := s.waitEnded(sid, fid)
	if done["status"] != "done" || done["output"].(obj)["text"] != "steered" {
		t.Fatalf("steered turn %v", done)
	}
	// The second model call was sent the message after the tool's result.
	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != "user" || last.Content != "also this" {
		t.Fatalf("second call ends with %+v", last)
	}
	// It is a message of that turn, announced by message.created.
	evs := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+fid+"/events", nil)["data"].([]any)
	found := false
	for _, e := range evs {
		e := e.(obj)
		if e["type"] == "message.created" && e["data"].(obj)["role"] == "user" && e["turn_id"] == fid {
			parts := e["data"].(obj)["parts"].([]any)
			if len(parts) == 1 && parts[0].(obj)["text"] == "also this" {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no message.created of the steered message in %v", evs)
	}
	if got := s.statuses(sid); got != "done" {
		t.Fatalf("turns %s (a joined steer makes no turn)", got)
	}
}

func TestSteerAfterTheLastCallRunsAsTheNextTurn(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	release := gatedModel(model, openaitest.Text("final"), openaitest.Text("next"))
	first := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "one"}}, "background": true})
	waitFor(t, func() bool { return len(model.Requests()) >= 1 })
	answer := make(chan obj, 1)
	go func() {
		_, body := s.call("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "late"}}, "if_busy": "steer", "background": true})
		answer <- body
	}()
	waitFor(t, func() bool { return strings.Contains(s.logs.String(), "steer message waiting") })
	close(release)
	var queued obj
	select {
	case queued = <-answer:
	case <-time.After(30 * time.Second):
		t.Fatal("the steer request was not answered")
	}
	if queued["id"] == first["id"] || queued["status"] != "queued" {
		t.Fatalf("steer after the last call: %v", queued)
	}
	got := s.waitEnded(sid, queued["id"].(string))
	if got["status"] != "done" || got["output"].(obj)["text"] != "next" || got["previous_turn_id"] != first["id"] {
		t.Fatalf("the late steer's turn %v", got)
	}
	if done := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+first["id"].(string), nil); done["output"].(obj)["text"] != "final" {
		t.Fatalf("first turn %v", done)
	}
}

// TestInterruptGoesAheadOfTheQueue: if_busy interrupt cancels the running
// turn (superseded) and runs next; the queued turns run after it.
func TestInterruptGoesAheadOfTheQueue(t *testing.T) {
	t.Parallel()
	s, model := newServer(t)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	first := holdTurn(t, s, model, sid, "one")
	queued := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", enqueued("two"))
	model.Enqueue(openaitest.Text("N"), openaitest.Text("Q"))
	now := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "now"}}, "if_busy": "interrupt"})
	if now["status"] != "done" || now["output"].(obj)["text"] != "N" || now["previous_turn_id"] != first["id"] {
		t.Fatalf("interrupting turn %v", now)
	}
	if old := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+first["id"].(string), nil); old["cancel_reason"] != "superseded" {
		t.Fatalf("interrupted turn %v", old)
	}
	got := s.waitEnded(sid, queued["id"].(string))
	if got["status"] != "done" || got["output"].(obj)["text"] != "Q" || got["previous_turn_id"] != now["id"] {
		t.Fatalf("queued turn after the interrupt %v", got)
	}
}
