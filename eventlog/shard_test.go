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

// follower is a subscriber's events, as they arrive.
type follower struct {
	mu  sync.Mutex
	evs []forge.Event
}

func (f *follower) get() []forge.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.evs)
}

// TestShardedRedisServerStoppedMidStream: two replicas on one PostgreSQL
// database and a Redis sharded over three servers; six sessions, two per
// server, each streaming numbered deltas (QueueDelta, as the engine does)
// from one replica, followed live on both. One server is stopped mid-stream
// for about 1.5 s, then started again (its append-only file keeps its
// keys). While it is down, the sessions of the other two servers keep
// streaming: their subscribers get every delta queued during the outage
// before the server is back (no pause, no gap). The sessions of the
// stopped server resume once it is back: every subscriber, live or resumed
// from a cursor taken before the outage, gets each delta once, in order.
// The other replica then writes into every session outside its turn (the
// writer hold, on the session's server, orders it among the deltas).
func TestShardedRedisServerStoppedMidStream(t *testing.T) {
	servers, urls := redistest.Shards(t, 3)
	dbURL := pgtest.NewDatabase(t)
	t.Parallel()
	ctx := t.Context()
	prefix := "shard"
	a := newReplicaAt(t, dbURL, urls, prefix, redis.Options{WriterID: "replica-a"})
	// The other replica lists the servers in another order: the hash does
	// not depend on it.
	parts := strings.Split(urls, ",")
	b := newReplicaAt(t, dbURL, parts[2]+","+parts[0]+","+parts[1], prefix, redis.Options{WriterID: "replica-b"})
	ids := forge.NewULIDGen(nil)
	now := time.Now().UTC()

	type session struct {
		sess         *forge.Session
		turn         *forge.Turn
		part         *forge.Part
		node         int
		writer, peer *replica
		text         string
		live         []*follower // on the writer and on the peer
		resumed      *follower
		cursor       int64
		copySeq      int64
	}
	perNode := map[int]int{}
	var sessions []*session
	for len(sessions) < 6 {
		sid := ids.New(forge.PrefixSession)
		node := a.bus.NodeOf(sid)
		if perNode[node] == 2 {
			continue
		}
		perNode[node]++
		s := &session{node: node, writer: a, peer: b}
		if len(sessions)%2 == 1 {
			s.writer, s.peer = b, a
		}
		s.sess = &forge.Session{ID: sid, Tenant: forge.DefaultTenant, Kind: forge.KindDirect, Agent: "a",
			MainThreadID: ids.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
		if err := a.store.CreateSession(ctx, s.sess); err != nil {
			t.Fatal(err)
		}
		s.turn = &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: sid, AgentID: "ag",
			AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: now}
		if _, err := s.writer.log.Begin(ctx, forge.DefaultTenant, &forge.BeginTurn{Turn: s.turn},
			eventlog.Draft{Type: forge.EventTurnCreated, ID: s.turn.ID, TurnID: s.turn.ID, Data: s.turn}); err != nil {
			t.Fatal(err)
		}
		s.part = &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: ids.New(forge.PrefixMessage), Type: forge.PartText, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
		msg := &forge.Message{ID: s.part.MessageID, Tenant: forge.DefaultTenant, SessionID: sid, TurnID: s.turn.ID, ThreadID: s.sess.MainThreadID, Role: forge.RoleAssistant, CreatedAt: now}
		if _, err := s.writer.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sid, TurnID: s.turn.ID, Messages: []*forge.Message{msg}, Parts: []*forge.Part{s.part}},
			eventlog.Draft{Type: forge.EventModelMessage, ID: s.part.ID, TurnID: s.turn.ID, ThreadID: s.sess.MainThreadID, Data: s.part.Clone()}); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	// Each session's keys are on its server, and on no other.
	for _, s := range sessions {
		for j, srv := range servers {
			n, err := srv.Client().Exists(ctx, prefix+":{"+s.sess.ID+"}:s").Result()
			if err != nil {
				t.Fatal(err)
			}
			if (j == s.node) != (n == 1) {
				t.Fatalf("session %s (server %d): its stream on server %d: %d", s.sess.ID, s.node, j, n)
			}
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	follow := func(r *replica, s *session, after int64) *follower {
		f := &follower{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev, err := range r.log.Events(subCtx, forge.DefaultTenant, s.sess.ID, eventlog.Query{After: after}) {
				if err != nil {
					if subCtx.Err() == nil {
						t.Errorf("subscriber of %s after %d: %v", s.sess.ID, after, err)
					}
					return
				}
				f.mu.Lock()
				f.evs = append(f.evs, ev)
				f.mu.Unlock()
			}
		}()
		return f
	}
	for _, s := range sessions {
		s.live = []*follower{follow(s.writer, s, 0), follow(s.peer, s, 0)}
	}
	// caughtUp waits until every live subscriber of s has the text sent
	// so far.
	caughtUp := func(s *session, why string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for _, f := range s.live {
			for {
				sofar, _, _ := partText(f.get(), s.part.ID)
				if sofar == s.text {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("session %s (server %d) %s: a subscriber has %q, sent %q", s.sess.ID, s.node, why, sofar, s.text)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}

	const n, downAt, upAt, copyAt = 100, 30, 60, 75
	const down = 1
	for i := range n {
		switch i {
		case downAt:
			for _, s := range sessions {
				caughtUp(s, "before the outage")
				evs := s.live[1].get()
				s.cursor = evs[len(evs)-1].Seq
			}
			servers[down].Stop()
		case upAt:
			// Still down: the other servers' sessions have every delta
			// queued during the outage.
			for _, s := range sessions {
				if s.node != down {
					caughtUp(s, "while another server is down")
				}
			}
			servers[down].Start()
			for _, s := range sessions {
				s.resumed = follow(s.peer, s, s.cursor)
			}
		case copyAt:
			// The peer writes into the session outside its turn, while
			// the writer streams: the hold orders the two writers.
			for _, s := range sessions {
				evs, err := s.peer.log.Write(ctx, forge.DefaultTenant, s.sess.ID,
					[]eventlog.Draft{{Type: forge.EventMessageCreated, ID: "msg_copy_" + s.sess.ID, Data: map[string]string{"copy": s.sess.ID}}},
					func(ctx context.Context, evs []forge.Event) error {
						return s.peer.store.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: s.sess.ID, TurnID: s.turn.ID, Events: evs})
					})
				if err != nil {
					t.Fatalf("write outside the turn of %s from the other replica: %v", s.sess.ID, err)
				}
				s.copySeq = evs[0].Seq
			}
		}
		for _, s := range sessions {
			d := fmt.Sprintf("[%03d]", i)
			s.text += d
			if err := s.writer.log.QueueDelta(ctx, forge.DefaultTenant, s.sess.ID, eventlog.Draft{Type: forge.EventModelDelta, ID: s.part.ID, TurnID: s.turn.ID,
				ThreadID: s.sess.MainThreadID, Data: forge.DeltaData{Delta: d}}); err != nil {
				t.Fatalf("session %s delta %d: %v", s.sess.ID, i, err)
			}
		}
		if i >= downAt && i < upAt {
			time.Sleep(50 * time.Millisecond) // a 1.5 s outage: longer than the client's own retries
		} else {
			time.Sleep(2 * time.Millisecond)
		}
	}
	var lastSeqs []int64
	for _, s := range sessions {
		s.part.Text, s.part.State = s.text, forge.StateCompleted
		if _, err := s.writer.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: s.sess.ID, TurnID: s.turn.ID, Parts: []*forge.Part{s.part}},
			eventlog.Draft{Type: forge.EventModelMessage, ID: s.part.ID, TurnID: s.turn.ID, ThreadID: s.sess.MainThreadID, Data: s.part.Clone()}); err != nil {
			t.Fatalf("completing the part of %s: %v", s.sess.ID, err)
		}
		s.turn.Status = forge.TurnDone
		final := *s.turn
		evs, err := s.writer.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: s.sess.ID, TurnID: s.turn.ID, Turn: s.turn},
			eventlog.Draft{Type: forge.EventTurnDone, ID: s.turn.ID, TurnID: s.turn.ID, Data: &final})
		if err != nil {
			t.Fatal(err)
		}
		lastSeqs = append(lastSeqs, evs[0].Seq)
	}
	for k, s := range sessions {
		stored, err := a.store.ListEvents(ctx, forge.DefaultTenant, forge.EventQuery{SessionID: s.sess.ID, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for name, f := range map[string]*follower{"live on the writer": s.live[0], "live on the other replica": s.live[1], "resumed": s.resumed} {
			deadline := time.Now().Add(20 * time.Second)
			var got []forge.Event
			for {
				got = f.get()
				if m := len(got); m > 0 && got[m-1].Seq == lastSeqs[k] {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("session %s (server %d), %s: no turn.done after %d events", s.sess.ID, s.node, name, len(got))
				}
				time.Sleep(10 * time.Millisecond)
			}
			seen := map[int64]bool{}
			for j, ev := range got {
				if j > 0 && ev.Seq <= got[j-1].Seq {
					t.Fatalf("session %s (server %d), %s: seq %d after %d", s.sess.ID, s.node, name, ev.Seq, got[j-1].Seq)
				}
				seen[ev.Seq] = true
			}
			sofar, completed, done := partText(got, s.part.ID)
			if name == "resumed" {
				sofar = s.text[:strings.Index(s.text, fmt.Sprintf("[%03d]", downAt))] + sofar
			}
			if !done || completed != s.text || sofar != s.text {
				t.Fatalf("session %s (server %d), %s: the deltas say\n%s\nthe stored text is\n%s", s.sess.ID, s.node, name, sofar, completed)
			}
			for _, ev := range stored {
				if ev.Seq > got[0].Seq && !seen[ev.Seq] {
					t.Fatalf("session %s (server %d), %s: stored event %d (%s) missing", s.sess.ID, s.node, name, ev.Seq, ev.Type)
				}
			}
			if !seen[s.copySeq] {
				t.Fatalf("session %s, %s: the other replica's write (%d) missing", s.sess.ID, name, s.copySeq)
			}
		}
	}
}
