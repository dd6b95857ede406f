package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// partText is what a subscriber's events say a part's text is: the
// deltas it got, in order, after the part's streaming row (a streaming
// row that carries text, the bus's "text so far", replaces what came
// before it).
func partText(evs []forge.Event, partID string) (text string, completed string, done bool) {
	for _, ev := range evs {
		if ev.ID != partID {
			continue
		}
		switch ev.Type {
		case forge.EventModelMessage:
			var p forge.Part
			_ = json.Unmarshal(ev.Data, &p)
			if p.State == forge.StateStreaming {
				text = p.Text
				continue
			}
			completed, done = p.Text, true
		case forge.EventModelDelta:
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			text += d.Delta
		}
	}
	return text, completed, done
}

// TestDeltasPublishedWhileRedisIsDownReachSubscribers: a part streams
// numbered deltas (QueueDelta, as the engine does) while Redis is stopped
// and started again (an append-only file keeps its keys, as a restart
// with AOF does). Deltas that could not be published are published once
// Redis is back, before anything above them is committed: a subscriber
// following live, and one resuming mid-stream from a cursor taken before
// the outage, get the stored text whole, each delta once, in order.
// (Before, the bus dropped them and the stream's links skipped them
// silently: 30 of 30 turns lost deltas across a restart.)
func TestDeltasPublishedWhileRedisIsDownReachSubscribers(t *testing.T) {
	rs := redistest.Own(t)
	dbURL := pgtest.NewDatabase(t)
	t.Parallel()
	ctx := t.Context()
	r := newReplicaAt(t, dbURL, rs.URL(), redistest.Prefix(t), redis.Options{WriterID: "replica-a"})
	ids := forge.NewULIDGen(nil)
	now := time.Now().UTC()
	sess := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect, Agent: "a",
		MainThreadID: ids.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
	if err := r.store.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	turn := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: sess.ID, AgentID: "ag",
		AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: now}
	if _, err := r.log.Begin(ctx, forge.DefaultTenant, &forge.BeginTurn{Turn: turn},
		eventlog.Draft{Type: forge.EventTurnCreated, ID: turn.ID, TurnID: turn.ID, Data: turn}); err != nil {
		t.Fatal(err)
	}
	p := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: ids.New(forge.PrefixMessage), Type: forge.PartText, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
	msg := &forge.Message{ID: p.MessageID, Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Role: forge.RoleAssistant, CreatedAt: now}
	if _, err := r.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Messages: []*forge.Message{msg}, Parts: []*forge.Part{p}},
		eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Data: p.Clone()}); err != nil {
		t.Fatal(err)
	}

	type seen struct {
		mu  sync.Mutex
		evs []forge.Event
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	follow := func(after int64) *seen {
		s := &seen{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev, err := range r.log.Events(subCtx, forge.DefaultTenant, sess.ID, eventlog.Query{After: after, TurnID: turn.ID}) {
				if err != nil {
					t.Errorf("subscriber after %d: %v", after, err)
					return
				}
				s.mu.Lock()
				s.evs = append(s.evs, ev)
				s.mu.Unlock()
			}
		}()
		return s
	}
	live := follow(0)

	const n, downAt, upAt = 120, 40, 80
	text := ""
	var cursor int64
	var resumed *seen
	for i := range n {
		switch i {
		case downAt:
			// Let what was queued so far reach Redis: the resuming
			// subscriber's cursor is the last seq it holds.
			deadline := time.Now().Add(10 * time.Second)
			for {
				live.mu.Lock()
				got := slices.Clone(live.evs)
				live.mu.Unlock()
				if sofar, _, _ := partText(got, p.ID); sofar == text {
					cursor = got[len(got)-1].Seq
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the deltas before the outage did not arrive")
				}
				time.Sleep(5 * time.Millisecond)
			}
			rs.Stop()
		case upAt:
			rs.Start()
			resumed = follow(cursor)
		}
		d := fmt.Sprintf("[%03d]", i)
		text += d
		if err := r.log.QueueDelta(ctx, forge.DefaultTenant, sess.ID, eventlog.Draft{Type: forge.EventModelDelta, ID: p.ID, TurnID: turn.ID,
			ThreadID: sess.MainThreadID, Data: forge.DeltaData{Delta: d}}); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
		if i >= downAt && i < upAt {
			time.Sleep(50 * time.Millisecond) // a 2 s outage: longer than the client's own retries
		} else {
			time.Sleep(2 * time.Millisecond)
		}
	}
	p.Text, p.State = text, forge.StateCompleted
	if _, err := r.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Parts: []*forge.Part{p}},
		eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Data: p.Clone()}); err != nil {
		t.Fatalf("completing the part after the restart: %v", err)
	}
	turn.Status = forge.TurnDone
	final := *turn
	if _, err := r.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Turn: turn},
		eventlog.Draft{Type: forge.EventTurnDone, ID: turn.ID, TurnID: turn.ID, Data: &final}); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*seen{"live": live, "resumed": resumed} {
		deadline := time.Now().Add(20 * time.Second)
		var got []forge.Event
		for {
			s.mu.Lock()
			got = slices.Clone(s.evs)
			s.mu.Unlock()
			if k := len(got); k > 0 && got[k-1].Type == forge.EventTurnDone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s subscriber: no turn.done after %d events", name, len(got))
			}
			time.Sleep(10 * time.Millisecond)
		}
		for k := 1; k < len(got); k++ {
			if got[k].Seq <= got[k-1].Seq {
				t.Fatalf("%s subscriber: seq %d after %d", name, got[k].Seq, got[k-1].Seq)
			}
		}
		sofar, completed, done := partText(got, p.ID)
		if name == "resumed" {
			sofar = text[:strings.Index(text, fmt.Sprintf("[%03d]", downAt))] + sofar
		}
		if !done || completed != text {
			t.Fatalf("%s subscriber: completed row %v %q", name, done, completed)
		}
		if sofar != text {
			t.Fatalf("%s subscriber: the deltas say\n%s\nthe stored text is\n%s", name, sofar, text)
		}
	}
}
