package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
)

type eventPage struct {
	Data       []forge.Event
	NextCursor *string `json:"next_cursor"`
}

func TestEventsJSON(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var t1, t2 forge.Turn
	s.call("POST", sp+"/turns", msgTurn("one"), 200, &t1)
	s.call("POST", sp+"/turns", msgTurn("two"), 200, &t2)

	var all eventPage
	s.call("GET", sp+"/events", nil, 200, &all)
	if len(all.Data) < 4 || all.NextCursor != nil || all.Data[0].Type != forge.EventTurnCreated || all.Data[len(all.Data)-1].Seq != t2.LastSeq {
		t.Fatalf("events %s", eventTypes(all.Data))
	}
	for i, ev := range all.Data {
		if ev.Type == forge.EventModelDelta {
			t.Fatal("a delta in the stored log")
		}
		if i > 0 && ev.Seq <= all.Data[i-1].Seq {
			t.Fatal("seqs not increasing")
		}
	}

	// after, then paging with limit and cursor.
	mid := all.Data[2].Seq
	var after eventPage
	s.call("GET", fmt.Sprintf("%s/events?after=%d", sp, mid), nil, 200, &after)
	if len(after.Data) != len(all.Data)-3 || after.Data[0].Seq <= mid {
		t.Fatalf("after=%d: %d events", mid, len(after.Data))
	}
	var got []forge.Event
	path := sp + "/events?limit=3"
	for pages := 0; ; pages++ {
		if pages > len(all.Data) {
			t.Fatal("paging does not end")
		}
		var p eventPage
		s.call("GET", path, nil, 200, &p)
		got = append(got, p.Data...)
		if p.NextCursor == nil {
			break
		}
		path = sp + "/events?limit=3&cursor=" + *p.NextCursor
	}
	if eventTypes(got) != eventTypes(all.Data) {
		t.Fatalf("paged events %s\nwant %s", eventTypes(got), eventTypes(all.Data))
	}

	// Last-Event-ID wins over after.
	a := s.do(req{method: "GET", path: sp + "/events?after=0", header: map[string]string{"Last-Event-ID": fmt.Sprint(mid)}})
	var byHeader eventPage
	if a.status != 200 || json.Unmarshal(a.body, &byHeader) != nil || len(byHeader.Data) != len(after.Data) {
		t.Fatalf("Last-Event-ID: %s", a)
	}

	// A turn's events only.
	var turnEvs eventPage
	s.call("GET", sp+"/turns/"+t2.ID+"/events", nil, 200, &turnEvs)
	if len(turnEvs.Data) == 0 || turnEvs.Data[0].Type != forge.EventTurnCreated || turnEvs.Data[len(turnEvs.Data)-1].Type != forge.EventTurnDone {
		t.Fatalf("turn events %s", eventTypes(turnEvs.Data))
	}
	for _, ev := range turnEvs.Data {
		if ev.TurnID == nil || *ev.TurnID != t2.ID {
			t.Fatalf("event of another turn: %+v", ev)
		}
	}
}

func TestEventsSSEReplayAndResume(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	s.call("POST", sp+"/turns", msgTurn("hi"), 200, &turn)
	var stored eventPage
	s.call("GET", sp+"/turns/"+turn.ID+"/events", nil, 200, &stored)

	sse := map[string]string{"Accept": "text/event-stream"}
	resp := s.stream(req{method: "GET", path: sp + "/turns/" + turn.ID + "/events", header: sse})
	checkSSEHeaders(t, resp.Header)
	evs := newSSEReader(resp.Body).events(t)
	if eventTypes(evs) != eventTypes(stored.Data) {
		t.Fatalf("replay %s\nwant %s", eventTypes(evs), eventTypes(stored.Data))
	}

	// Resume after the third event, by ?after and by Last-Event-ID (which
	// wins over a stale ?after).
	cut := stored.Data[2].Seq
	for name, r := range map[string]req{
		"after":         {method: "GET", path: fmt.Sprintf("%s/turns/%s/events?after=%d", sp, turn.ID, cut), header: sse},
		"Last-Event-ID": {method: "GET", path: sp + "/turns/" + turn.ID + "/events?after=0", header: map[string]string{"Accept": "text/event-stream", "Last-Event-ID": fmt.Sprint(cut)}},
	} {
		evs := newSSEReader(s.stream(r).Body).events(t)
		if eventTypes(evs) != eventTypes(stored.Data[3:]) || evs[0].Seq <= cut {
			t.Fatalf("%s resume: %s\nwant %s", name, eventTypes(evs), eventTypes(stored.Data[3:]))
		}
	}
	// Resuming after turn.done: the stream ends at once, empty.
	evs = newSSEReader(s.stream(req{method: "GET", path: fmt.Sprintf("%s/turns/%s/events?after=%d", sp, turn.ID, turn.LastSeq), header: sse}).Body).events(t)
	if len(evs) != 0 {
		t.Fatalf("after the end: %s", eventTypes(evs))
	}
}

func TestSessionSSETailsLiveTurnsAndPings(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.KeepAlive = 30 * time.Millisecond })
	s.createAgent("a", scripted.Step{Text: "a b c", Hang: true})
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	resp := s.stream(req{method: "GET", path: sp + "/events", header: map[string]string{"Accept": "text/event-stream"}})
	checkSSEHeaders(t, resp.Header)
	r := newSSEReader(resp.Body)
	// Idle: pings.
	f, ok := r.next()
	if !ok || f.comment != "ping" {
		t.Fatalf("first frame %+v %v, want a ping", f, ok)
	}
	var turn forge.Turn
	s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "background": true}, 202, &turn)
	var types []string
	deltas := ""
	for {
		f, ok := r.next()
		if !ok {
			t.Fatalf("stream ended after %v", types)
		}
		if f.comment != "" {
			continue
		}
		var ev forge.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		if ev.Type == forge.EventModelDelta {
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			if deltas += d.Delta; deltas == "a b c" {
				// The deltas arrived live: the turn hangs until cancelled.
				s.call("POST", sp+"/cancel", nil, 200, nil)
			}
		}
		if ev.Type == forge.EventTurnDone {
			break
		}
	}
	if deltas != "a b c" || types[0] != forge.EventTurnCreated {
		t.Fatalf("live events %v (deltas %q)", types, deltas)
	}
}

func TestCancel(t *testing.T) {
	s := newStack(t)
	s.createAgent("a", scripted.Step{Text: "partial", Hang: true}, scripted.Step{Text: "done"})
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	if a := s.do(req{method: "POST", path: sp + "/cancel"}); a.status != 409 || a.errCode() != "conflict" {
		t.Fatalf("cancel while idle: %s", a)
	}
	var turn forge.Turn
	s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "background": true}, 202, &turn)
	// Cancel once the text has streamed: follow the turn live until its
	// delta, then keep reading to its turn.done.
	live := newSSEReader(s.stream(req{method: "GET", path: sp + "/turns/" + turn.ID + "/events", header: map[string]string{"Accept": "text/event-stream"}}).Body)
	for {
		f, ok := live.next()
		if !ok {
			t.Fatal("turn stream ended before its delta")
		}
		if f.event == forge.EventModelDelta {
			break
		}
	}
	liveDone := make(chan []forge.Event, 1)
	go func() { liveDone <- live.events(t) }()

	key := map[string]string{"Idempotency-Key": "cancel-1"}
	first := s.do(req{method: "POST", path: sp + "/cancel", body: map[string]any{"reason": "user pressed stop"}, header: key})
	var cancelled forge.Turn
	if first.status != 200 || json.Unmarshal(first.body, &cancelled) != nil {
		t.Fatalf("cancel: %s", first)
	}
	if cancelled.ID != turn.ID || cancelled.Status != forge.TurnCancelled || cancelled.CancelReason == nil || *cancelled.CancelReason != forge.CancelClient {
		t.Fatalf("cancelled turn %s", first.body)
	}
	rest := <-liveDone
	if len(rest) == 0 || rest[len(rest)-1].Type != forge.EventTurnDone {
		t.Fatalf("live turn stream after the delta: %s", eventTypes(rest))
	}
	// A retry with the key gets the first answer; without it, a conflict.
	retry := s.do(req{method: "POST", path: sp + "/cancel", body: map[string]any{"reason": "user pressed stop"}, header: key})
	if retry.status != 200 || strings.TrimSpace(string(retry.body)) != strings.TrimSpace(string(first.body)) || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("idempotent retry: %s\nfirst: %s", retry, first)
	}
	if a := s.do(req{method: "POST", path: sp + "/cancel"}); a.status != 409 {
		t.Fatalf("cancel after the end: %s", a)
	}
	// An idle cancel with a new key: its 409 is the remembered answer.
	key2 := map[string]string{"Idempotency-Key": "cancel-2"}
	for i := 0; i < 2; i++ {
		if a := s.do(req{method: "POST", path: sp + "/cancel", header: key2}); a.status != 409 || a.errCode() != "conflict" {
			t.Fatalf("idle cancel %d: %s", i, a)
		}
	}
	// The streamed text survives.
	var msgs struct{ Data []forge.Message }
	s.call("GET", sp+"/messages", nil, 200, &msgs)
	var part *forge.Part
	if len(msgs.Data) == 2 {
		for _, p := range msgs.Data[1].Parts {
			if p.Type == forge.PartText {
				part = p
			}
		}
	}
	if part == nil || part.Text != "partial" {
		b, _ := json.Marshal(msgs.Data)
		t.Fatalf("messages after cancel %s", b)
	}
	// The session goes on.
	var next forge.Turn
	s.call("POST", sp+"/turns", msgTurn("again"), 200, &next)
	if next.Status != forge.TurnDone {
		t.Fatalf("turn after cancel %+v", next)
	}
}

func TestDeleteSessionCancelsItsTurn(t *testing.T) {
	s := newStack(t)
	s.createAgent("a", scripted.Step{Text: "x", Hang: true})
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "background": true}, 202, nil)
	s.call("DELETE", sp, nil, 204, nil)
	if a := s.do(req{method: "GET", path: sp}); a.status != 404 {
		t.Fatalf("deleted session: %s", a)
	}
}

func TestAuthAndTenants(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"key-one": "t1", "key-two": "t2"} })
	for _, h := range []map[string]string{
		nil,
		{"Authorization": "Bearer wrong"},
		{"Authorization": "Basic a2V5LW9uZQ=="},
		{"Authorization": "Bearer"},
	} {
		a := s.do(req{method: "GET", path: "/v1/agents", header: h})
		if a.status != 401 || a.errCode() != "unauthorized" || a.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%v: %s", h, a)
		}
	}
	if a := s.do(req{method: "GET", path: "/healthz"}); a.status != 200 {
		t.Fatalf("healthz needs no key: %s", a)
	}
	s.key = "key-one"
	s.createAgent("a")
	ses := s.createSession("a")
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("hi"), 200, &turn)

	s.key = "key-two"
	sp := "/v1/sessions/" + ses.ID
	for _, r := range []req{
		{method: "GET", path: "/v1/agents/a"},
		{method: "PUT", path: "/v1/agents/a", body: map[string]any{"model": "scripted/echo"}},
		{method: "DELETE", path: "/v1/agents/a"},
		{method: "POST", path: "/v1/sessions", body: map[string]any{"agent": "a"}},
		{method: "GET", path: sp},
		{method: "GET", path: sp + "/messages"},
		{method: "GET", path: sp + "/messages?view=model"},
		{method: "POST", path: sp + "/turns", body: msgTurn("hi")},
		// With a key, twice: the second is not_found too, not a replay.
		{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: keyed("t2-key")},
		{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: keyed("t2-key")},
		{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: map[string]string{"Idempotency-Key": "t2-key", "Accept": "text/event-stream"}},
		{method: "GET", path: sp + "/turns"},
		{method: "GET", path: sp + "/turns/" + turn.ID},
		{method: "GET", path: sp + "/events"},
		{method: "GET", path: sp + "/turns/" + turn.ID + "/events", header: map[string]string{"Accept": "text/event-stream"}},
		{method: "POST", path: sp + "/cancel"},
		{method: "DELETE", path: sp},
	} {
		if a := s.do(r); a.status != 404 || a.errCode() != "not_found" {
			t.Fatalf("tenant t2 %s %s: %s", r.method, r.path, a)
		}
	}
	for _, p := range []string{"/v1/agents", "/v1/sessions"} {
		a := s.call("GET", p, nil, 200, nil)
		if strings.TrimSpace(string(a.body)) != `{"data":[],"next_cursor":null}` {
			t.Fatalf("tenant t2 lists %s: %s", p, a.body)
		}
	}
	// Tenant t2 may use the same names.
	s.createAgent("a")
	s.key = "key-one"
	s.call("GET", sp, nil, 200, nil)
}

// TestStreamsOfADeletedSessionEnd: a session's event stream, and a
// forum's, opened before the session is deleted, end with a not_found
// error frame (within a keep-alive interval) instead of pinging forever.
func TestStreamsOfADeletedSessionEnd(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.KeepAlive = 30 * time.Millisecond })
	s.createAgent("a")
	ses := s.createSession("a")
	var forum struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)
	for _, c := range []struct{ stream, del string }{
		{"/v1/sessions/" + ses.ID + "/events", "/v1/sessions/" + ses.ID},
		{"/v1/forums/" + forum.ID + "/events", "/v1/forums/" + forum.ID},
	} {
		resp := s.stream(req{method: "GET", path: c.stream, header: map[string]string{"Accept": "text/event-stream"}})
		r := newSSEReader(resp.Body)
		if f, ok := r.next(); !ok || f.comment != "ping" {
			t.Fatalf("%s: first frame %+v %v, want a ping", c.stream, f, ok)
		}
		s.call("DELETE", c.del, nil, 204, nil)
		stop := time.AfterFunc(10*time.Second, func() { resp.Body.Close() }) // a stream that never ends fails below
		var last sseFrame
		for {
			f, ok := r.next()
			if !ok {
				break
			}
			last = f
		}
		stop.Stop()
		resp.Body.Close()
		if last.event != "error" || !strings.Contains(last.data, `"not_found"`) {
			t.Fatalf("%s after the delete: the stream ended with %+v, want a not_found error frame", c.stream, last)
		}
	}
}
