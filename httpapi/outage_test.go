package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// TestEventStreamsWhileRedisIsDown: a replica of a distributed deployment
// (PostgreSQL and a Redis of the test's own) whose Redis stops. The
// stream of a turn that ended is served from the store, whole, with no
// error frame; a stream that needs the bus (a session's live tail) is
// refused before any SSE header: 503 store_error with Retry-After, so that
// clients wait instead of looping on 200-then-error (~7,300 failed
// streams per replica in 30 s before). Once Redis is back, it streams.
func TestEventStreamsWhileRedisIsDown(t *testing.T) {
	rs := redistest.Own(t)
	dbURL := pgtest.NewDatabase(t)
	t.Parallel()
	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := redis.Open(ctx, rs.URL(), redis.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	s := newStackOn(t, st, func(c *engine.Config) {
		c.Bus, c.Fence, c.Peers, c.Leases, c.ReplicaID = b, b, b, st, b.WriterID()
	})
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	s.call("POST", sp+"/turns", msgTurn("hello there"), 200, &turn)
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %s", turn.Status)
	}
	var stored eventPage
	s.call("GET", sp+"/turns/"+turn.ID+"/events", nil, 200, &stored)

	rs.Stop()
	sse := map[string]string{"Accept": "text/event-stream"}
	for _, after := range []string{"", "1"} {
		h := map[string]string{"Accept": "text/event-stream"}
		if after != "" {
			h["Last-Event-ID"] = after
		}
		resp := s.stream(req{method: "GET", path: sp + "/turns/" + turn.ID + "/events", header: h})
		if resp.StatusCode != 200 {
			t.Fatalf("replay of an ended turn with Redis down (after %q): %d", after, resp.StatusCode)
		}
		got := newSSEReader(resp.Body).events(t) // fails on an error frame
		want := stored.Data
		if after != "" {
			want = want[1:]
		}
		if len(got) != len(want) || got[len(got)-1].Type != forge.EventTurnDone {
			t.Fatalf("replay after %q with Redis down: %s, stored %s", after, eventTypes(got), eventTypes(want))
		}
		for i := range got {
			if got[i].Seq != want[i].Seq {
				t.Fatalf("replay after %q: seq %d at %d, stored %d", after, got[i].Seq, i, want[i].Seq)
			}
		}
	}

	resp := s.stream(req{method: "GET", path: sp + "/events", header: sse})
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Content-Type") == "text/event-stream" {
		t.Fatalf("session stream with Redis down: %d, Retry-After %q, Content-Type %q (want 503 with Retry-After, no SSE)",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
	}
	// The session's JSON log is the store's: served.
	s.call("GET", sp+"/events", nil, 200, nil)

	rs.Start()
	resp = s.stream(req{method: "GET", path: sp + "/events", header: sse})
	if resp.StatusCode != 200 {
		t.Fatalf("session stream after Redis is back: %d", resp.StatusCode)
	}
	r := newSSEReader(resp.Body)
	for range stored.Data {
		f, ok := r.next()
		if !ok || f.event == "error" {
			t.Fatalf("session stream after Redis is back: %+v", f)
		}
	}
}
