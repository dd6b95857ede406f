package httpapi_test

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/scripted"
)

func keyed(key string) map[string]string { return map[string]string{"Idempotency-Key": key} }

func backgroundTurn(text string) map[string]any {
	b := msgTurn(text)
	b["background"] = true
	return b
}

// turnCount is how many turns the session holds.
func (s *stack) turnCount(sid string) int {
	s.t.Helper()
	var turns struct{ Data []forge.Turn }
	s.call("GET", "/v1/sessions/"+sid+"/turns", nil, 200, &turns)
	return len(turns.Data)
}

// TestIdempotencyKeyWithAnotherBodyIsRefused: a key is bound to the
// request it was first used with; another body (or another endpoint of
// the session's turns) under it is 422 idempotency_mismatch and acts on
// nothing. The same body written differently is the same request.
func TestIdempotencyKeyWithAnotherBodyIsRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var first forge.Turn
	a := s.do(req{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: keyed("k")})
	if a.status != 200 || json.Unmarshal(a.body, &first) != nil {
		t.Fatalf("first: %s", a)
	}
	before := s.state()
	for _, r := range []req{
		{method: "POST", path: sp + "/turns", body: msgTurn("bye")},
		{method: "POST", path: sp + "/turns", body: backgroundTurn("hi")},
		{method: "POST", path: sp + "/turns", body: map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "new_root": true}},
		{method: "POST", path: sp + "/compact"},
	} {
		r.header = keyed("k")
		if a := s.do(r); a.status != 422 || a.errCode() != "idempotency_mismatch" {
			t.Errorf("%s %s %v: %s", r.method, r.path, r.body, a)
		}
	}
	if after := s.state(); after != before {
		t.Fatalf("mismatched requests acted:\n%s\n%s", before, after)
	}
	// Whitespace, field order and an explicit null do not make another request.
	var again forge.Turn
	a = s.do(req{method: "POST", path: sp + "/turns", header: keyed("k"),
		body: ` { "stream": null, "input" : [ { "text" : "hi", "type" : "message" } ] } `})
	if a.status != 200 || json.Unmarshal(a.body, &again) != nil || again.ID != first.ID || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same request reformatted: %s", a)
	}
	// Keys are per session.
	other := s.createSession("a")
	s.call("POST", "/v1/sessions/"+other.ID+"/turns", msgTurn("bye"), 200, nil)

	// Cancel: the first answer (a conflict: nothing runs) binds the key.
	c1 := s.do(req{method: "POST", path: sp + "/cancel", body: map[string]any{"reason": "stop"}, header: keyed("c")})
	if c1.status != 409 {
		t.Fatalf("idle cancel: %s", c1)
	}
	for _, body := range []any{map[string]any{"reason": "other"}, nil} {
		if a := s.do(req{method: "POST", path: sp + "/cancel", body: body, header: keyed("c")}); a.status != 422 || a.errCode() != "idempotency_mismatch" {
			t.Errorf("cancel with body %v: %s", body, a)
		}
	}
	if a := s.do(req{method: "POST", path: sp + "/cancel", body: map[string]any{"reason": "stop"}, header: keyed("c")}); a.status != 409 || !bytes.Equal(a.body, c1.body) {
		t.Fatalf("cancel retry: %s (first %s)", a, c1)
	}
}

// TestConcurrentIdempotentRequestsGetOneAnswer: requests racing with one
// key and one body all get the first request's answer, byte for byte, and
// exactly one turn exists.
func TestConcurrentIdempotentRequestsGetOneAnswer(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// A first turn that takes a while, then one that runs until cancelled.
	s.createAgent("slow", scripted.Step{Text: "one two three four", DelayMS: 30}, scripted.Step{Text: "wait", Hang: true})
	for _, c := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"background", backgroundTurn("hi"), 202},
		{"wait", msgTurn("hi"), 200},
	} {
		ses := s.createSession("slow")
		sp := "/v1/sessions/" + ses.ID
		const n = 8
		answers := make([]answer, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				answers[i] = s.do(req{method: "POST", path: sp + "/turns", body: c.body, header: keyed("race")})
			})
		}
		close(start)
		wg.Wait()
		for i, a := range answers {
			if a.status != c.want || !bytes.Equal(a.body, answers[0].body) {
				t.Fatalf("%s: answer %d is %s, answer 0 is %s", c.name, i, a, answers[0])
			}
		}
		if got := s.turnCount(ses.ID); got != 1 {
			t.Fatalf("%s: %d turns, want 1", c.name, got)
		}
		var turn forge.Turn
		_ = json.Unmarshal(answers[0].body, &turn)
		s.waitTurn(ses.ID, turn.ID)

		// Cancels racing with one key: one cancels, all say so (200 with
		// the cancelled turn).
		s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "again"}}, "background": true}, 202, nil)
		start = make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				answers[i] = s.do(req{method: "POST", path: sp + "/cancel", header: keyed("stop")})
			})
		}
		close(start)
		wg.Wait()
		for i, a := range answers {
			if a.status != 200 || !bytes.Equal(a.body, answers[0].body) {
				t.Fatalf("%s: cancel answer %d is %s, answer 0 is %s", c.name, i, a, answers[0])
			}
		}
	}
}

// TestIdempotencyKeySurvivesRestart: the key's record is durable: a
// server started on the same database replays the first answer and still
// refuses another body.
func TestIdempotencyKeySurvivesRestart(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/forge.db"
	s1 := newStackAt(t, db)
	s1.createAgent("a")
	ses := s1.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	turn := s1.do(req{method: "POST", path: sp + "/turns", body: backgroundTurn("hi"), header: keyed("k")})
	if turn.status != 202 {
		t.Fatalf("turn: %s", turn)
	}
	var created forge.Turn
	_ = json.Unmarshal(turn.body, &created)
	s1.waitTurn(ses.ID, created.ID)
	cancel := s1.do(req{method: "POST", path: sp + "/cancel", body: map[string]any{"reason": "r"}, header: keyed("c")})
	s1.close()

	s2 := newStackAt(t, db)
	a := s2.do(req{method: "POST", path: sp + "/turns", body: backgroundTurn("hi"), header: keyed("k")})
	if a.status != 202 || !bytes.Equal(a.body, turn.body) || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("turn after restart: %s\nfirst: %s", a, turn)
	}
	if a := s2.do(req{method: "POST", path: sp + "/turns", body: backgroundTurn("bye"), header: keyed("k")}); a.status != 422 {
		t.Fatalf("another body after restart: %s", a)
	}
	if a := s2.do(req{method: "POST", path: sp + "/cancel", body: map[string]any{"reason": "r"}, header: keyed("c")}); a.status != cancel.status || !bytes.Equal(a.body, cancel.body) {
		t.Fatalf("cancel after restart: %s\nfirst: %s", a, cancel)
	}
	if a := s2.do(req{method: "POST", path: sp + "/cancel", header: keyed("c")}); a.status != 422 {
		t.Fatalf("another cancel body after restart: %s", a)
	}
	if got := s2.turnCount(ses.ID); got != 1 {
		t.Fatalf("%d turns, want 1", got)
	}
}
