package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/eventlog"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// replica is one process's view: its own store pool, bus and event log.
type replica struct {
	store *postgres.Store
	bus   *redis.Bus
	log   *eventlog.Log
}

func newReplica(t *testing.T, dbURL, prefix string, busOpts redis.Options) *replica {
	t.Helper()
	return newReplicaAt(t, dbURL, redistest.URL(t), prefix, busOpts)
}

// newReplicaAt is newReplica on the Redis at redisURL.
func newReplicaAt(t *testing.T, dbURL, redisURL, prefix string, busOpts redis.Options) *replica {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	busOpts.Prefix = prefix
	b, err := redis.Open(ctx, redisURL, busOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &replica{store: st, bus: b, log: eventlog.New(eventlog.Config{Store: st, Bus: b, Fence: b, SeqBlock: 64})}
}

// twoReplicas makes two replicas over one PostgreSQL database and one
// Redis prefix (the test runs in parallel from here), a session stored
// through the first, and a running turn of it, not yet begun.
func twoReplicas(t *testing.T) (a, b *replica, sess *forge.Session, turn *forge.Turn) {
	t.Helper()
	redistest.URL(t)
	dbURL := pgtest.NewDatabase(t)
	t.Parallel()
	prefix := redistest.Prefix(t)
	a = newReplica(t, dbURL, prefix, redis.Options{WriterID: "replica-a"})
	b = newReplica(t, dbURL, prefix, redis.Options{WriterID: "replica-b"})
	ids := forge.NewULIDGen(nil)
	now := time.Now().UTC()
	sess = &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect, Agent: "a",
		MainThreadID: ids.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
	if err := a.store.CreateSession(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	turn = &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: sess.ID, AgentID: "ag",
		AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: now}
	return a, b, sess, turn
}

// TestTwoReplicasWriteOneSession: one replica runs a turn in a session
// (stored events and deltas) while another writes events outside the turn
// into the same session (as forum ingestion copies into a monologue whose
// turn runs elsewhere). Subscribers on both replicas, and late resumes at
// every cursor, see every event exactly once, in seq order: the writers'
// holds keep seq order, commit order and publish order the same across
// processes.
func TestTwoReplicasWriteOneSession(t *testing.T) {
	a, b, sess, turn := twoReplicas(t)
	ctx := t.Context()
	ids, now := forge.NewULIDGen(nil), turn.CreatedAt
	created, err := a.log.Begin(ctx, forge.DefaultTenant, &forge.BeginTurn{Turn: turn},
		eventlog.Draft{Type: forge.EventTurnCreated, ID: turn.ID, TurnID: turn.ID, Data: turn})
	if err != nil {
		t.Fatal(err)
	}

	// Subscribers on both replicas, from the start, reading until they
	// have seen both writers' last events.
	type seen struct {
		mu  sync.Mutex
		evs []forge.Event
	}
	const subsPer = 3
	subs := make([]*seen, 0, 2*subsPer)
	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	var wg sync.WaitGroup
	ready := make(chan struct{}, 2*subsPer)
	for _, r := range []*replica{a, b} {
		for range subsPer {
			s := &seen{}
			subs = append(subs, s)
			sub, err := r.log.Subscribe(subCtx, forge.DefaultTenant, sess.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			ready <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ev, err := range sub.Events(subCtx, "") {
					if err != nil {
						return
					}
					s.mu.Lock()
					s.evs = append(s.evs, ev)
					s.mu.Unlock()
				}
			}()
		}
	}
	for range 2 * subsPer {
		<-ready
	}

	var mu sync.Mutex
	published := created // every event the writers were given, deltas included
	note := func(evs ...forge.Event) {
		mu.Lock()
		defer mu.Unlock()
		published = append(published, evs...)
	}
	var writers sync.WaitGroup
	writers.Add(2)
	const rounds = 60
	go func() { // replica a: the turn's owner
		defer writers.Done()
		for i := range rounds {
			p := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: "msg_" + fmt.Sprint(i), Type: forge.PartText, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
			msg := &forge.Message{ID: p.MessageID, Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Role: forge.RoleAssistant, CreatedAt: now}
			evs, err := a.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Messages: []*forge.Message{msg}, Parts: []*forge.Part{p}},
				eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Data: p})
			if err != nil {
				t.Error(err)
				return
			}
			note(evs...)
			for j := range 5 {
				ev, err := a.log.PublishDelta(ctx, forge.DefaultTenant, sess.ID, eventlog.Draft{Type: forge.EventModelDelta, ID: p.ID, TurnID: turn.ID,
					ThreadID: sess.MainThreadID, Data: forge.DeltaData{Delta: fmt.Sprintf("%d.%d ", i, j)}})
				if err != nil {
					t.Error(err)
					return
				}
				note(ev)
			}
		}
	}()
	go func() { // replica b: writes outside the turn, into the same session
		defer writers.Done()
		for i := range rounds {
			evs, err := b.log.Write(ctx, forge.DefaultTenant, sess.ID,
				[]eventlog.Draft{{Type: forge.EventMessageCreated, ID: fmt.Sprintf("msg_copy_%d", i), Data: map[string]int{"copy": i}}},
				func(ctx context.Context, evs []forge.Event) error {
					return b.store.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Events: evs})
				})
			if err != nil {
				t.Error(err)
				return
			}
			note(evs...)
		}
	}()
	writers.Wait()
	if t.Failed() {
		return
	}
	turn.Status = forge.TurnDone
	final := *turn
	evs, err := a.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Turn: turn},
		eventlog.Draft{Type: forge.EventTurnDone, ID: turn.ID, TurnID: turn.ID, Data: &final})
	if err != nil {
		t.Fatal(err)
	}
	note(evs...)
	lastSeq := evs[0].Seq

	// Every writer's seqs are above the turn.created's and distinct.
	slices.SortFunc(published, func(x, y forge.Event) int { return int(x.Seq - y.Seq) })
	for i := 1; i < len(published); i++ {
		if published[i].Seq == published[i-1].Seq {
			t.Fatalf("seq %d handed out twice", published[i].Seq)
		}
	}
	if published[len(published)-1].Seq != lastSeq {
		t.Fatalf("turn.done (%d) is not the last seq (%d)", lastSeq, published[len(published)-1].Seq)
	}
	var wantSeqs []int64
	for _, ev := range published {
		wantSeqs = append(wantSeqs, ev.Seq)
	}
	stored, err := a.store.ListEvents(ctx, forge.DefaultTenant, forge.EventQuery{SessionID: sess.ID, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var wantStored []int64
	for _, ev := range published {
		if ev.Stored() {
			wantStored = append(wantStored, ev.Seq)
		}
	}
	if got := seqsOf(stored); !slices.Equal(got, wantStored) {
		t.Fatalf("stored %v, want %v", got, wantStored)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i, s := range subs {
		for {
			s.mu.Lock()
			n := len(s.evs)
			done := n > 0 && s.evs[n-1].Seq == lastSeq
			got := slices.Clone(s.evs)
			s.mu.Unlock()
			if done {
				var gotSeqs []int64
				for _, ev := range got {
					gotSeqs = append(gotSeqs, ev.Seq)
				}
				if !slices.Equal(gotSeqs, wantSeqs) {
					t.Fatalf("subscriber %d saw %d events, want %d:\n got %v\nwant %v", i, len(gotSeqs), len(wantSeqs), gotSeqs, wantSeqs)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("subscriber %d stalled after %d events", i, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stopSubs()
	wg.Wait()

	// A resume after any seq, on either replica, yields exactly what
	// followed: once the turn has ended, the stored log.
	storedSeqs := seqsOf(stored)
	for _, r := range []*replica{a, b} {
		for i, cursor := range storedSeqs {
			if i%17 != 0 {
				continue
			}
			var got []int64
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			for ev, err := range r.log.Events(rctx, forge.DefaultTenant, sess.ID, eventlog.Query{After: cursor, TurnID: ""}) {
				if err != nil {
					break
				}
				got = append(got, ev.Seq)
				if ev.Seq == lastSeq {
					break
				}
			}
			cancel()
			if !slices.Equal(got, storedSeqs[i+1:]) {
				t.Fatalf("resume after %d: %v", cursor, got)
			}
		}
	}
}

func seqsOf(evs []forge.Event) []int64 {
	out := make([]int64, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

// ownRedis starts a redis-server of the test's own on a free loopback
// port (one the test may stop) and returns its URL and a function that
// kills it.
func ownRedis(t *testing.T) (string, func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(redistest.EnvRequire) == "1" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return url, kill
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not start: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRedisDownWritesNothing: without its bus a replica cannot hold a
// session, so it writes nothing (not even to the store) and says the
// failure is the service's (ErrStore: 503, a turn ends store_error).
func TestRedisDownWritesNothing(t *testing.T) {
	t.Parallel()
	url, kill := ownRedis(t)
	f := newFixture(t, eventlog.Config{}, bus.Options{})
	b, err := redis.Open(f.ctx, url, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	f.log = f.newLog(eventlog.Config{Bus: b, Fence: b})
	turn := f.begin()
	write := func() error {
		_, err := f.log.Write(f.ctx, forge.DefaultTenant, f.sess.ID, []eventlog.Draft{{Type: forge.EventMessageCreated, ID: "msg_1", Data: map[string]int{}}},
			func(ctx context.Context, evs []forge.Event) error {
				return f.store.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: f.sess.ID, TurnID: turn.ID, Events: evs})
			})
		return err
	}
	if err := write(); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	before, _ := f.store.ListEvents(f.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: f.sess.ID})
	kill()
	err = write()
	if !errors.Is(err, forge.ErrStore) {
		t.Fatalf("with Redis down: %v, want ErrStore", err)
	}
	after, _ := f.store.ListEvents(f.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: f.sess.ID})
	if len(after) != len(before) {
		t.Fatalf("events before %d, after %d: the failed write committed", len(before), len(after))
	}
	// A reader cannot subscribe either: the service's failure too (a
	// streamed turn started while Redis is down answered 500, not 503).
	if _, sub, err := b.Subscribe(f.ctx, f.sess.ID, 0); !errors.Is(err, forge.ErrStore) {
		if sub != nil {
			_ = sub.Close()
		}
		t.Fatalf("subscribe with Redis down: %v, want ErrStore", err)
	}
}

// TestUpdateSaysWhetherAnotherReplicaWrote: a writer deciding under the
// hold learns whether its view of the session may be stale (another
// replica wrote since its last write), and nothing is written when it
// decides to write nothing.
func TestUpdateSaysWhetherAnotherReplicaWrote(t *testing.T) {
	a, b, sess, turn := twoReplicas(t)
	ctx := t.Context()
	if err := a.store.BeginTurn(ctx, &forge.BeginTurn{Turn: turn}); err != nil {
		t.Fatal(err)
	}
	update := func(r *replica, write bool) bool {
		t.Helper()
		var fresh bool
		_, err := r.log.Update(ctx, forge.DefaultTenant, sess.ID, func(ctx context.Context, f bool) ([]eventlog.Draft, func(context.Context, []forge.Event) error, error) {
			fresh = f
			if !write {
				return nil, nil, nil
			}
			return []eventlog.Draft{{Type: forge.EventMessageCreated, ID: "msg", Data: map[string]int{}}}, func(ctx context.Context, evs []forge.Event) error {
				return r.store.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Events: evs})
			}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return fresh
	}
	for i, step := range []struct {
		r     *replica
		write bool
		fresh bool
	}{
		{a, true, false},  // a never wrote the session
		{a, true, true},   // a wrote it last
		{a, false, true},  // deciding to write nothing changes nothing
		{b, true, false},  // b never wrote it
		{a, true, false},  // b wrote since a's last write
		{b, false, false}, // a wrote since (b's decide reloads, and writes nothing)
		{b, true, true},   // b held it last: its reloaded view is current
		{a, true, false},
	} {
		if got := update(step.r, step.write); got != step.fresh {
			t.Fatalf("step %d: fresh %v, want %v", i, got, step.fresh)
		}
	}
	evs, _ := a.store.ListEvents(ctx, forge.DefaultTenant, forge.EventQuery{SessionID: sess.ID})
	if len(evs) != 6 {
		t.Fatalf("%d events stored, want 6", len(evs))
	}
}

// TestQueuedDeltasAcrossReplicas: deltas queued (QueueDelta: the model
// stream never waits for Redis) reach subscribers on both replicas whole
// and in order, each after its part's first row and before the part's
// completed row written next, while another replica writes into the
// session meanwhile (its holds make the queued deltas take fresh seqs).
func TestQueuedDeltasAcrossReplicas(t *testing.T) {
	a, b, sess, turn := twoReplicas(t)
	ctx := t.Context()
	ids, now := forge.NewULIDGen(nil), turn.CreatedAt
	if _, err := a.log.Begin(ctx, forge.DefaultTenant, &forge.BeginTurn{Turn: turn},
		eventlog.Draft{Type: forge.EventTurnCreated, ID: turn.ID, TurnID: turn.ID, Data: turn}); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		mu  sync.Mutex
		evs []forge.Event
	}
	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	var wg sync.WaitGroup
	var subs []*seen
	for _, r := range []*replica{a, b} {
		for range 2 {
			s := &seen{}
			subs = append(subs, s)
			sub, err := r.log.Subscribe(subCtx, forge.DefaultTenant, sess.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ev, err := range sub.Events(subCtx, "") {
					if err != nil {
						return
					}
					s.mu.Lock()
					s.evs = append(s.evs, ev)
					s.mu.Unlock()
				}
			}()
		}
	}
	const rounds, perPart = 40, 6
	var writers sync.WaitGroup
	writers.Add(2)
	go func() { // replica a: the turn's owner streams parts
		defer writers.Done()
		for i := range rounds {
			p := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: "msg_" + fmt.Sprint(i), Type: forge.PartText, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
			msg := &forge.Message{ID: p.MessageID, Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Role: forge.RoleAssistant, CreatedAt: now}
			if _, err := a.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Messages: []*forge.Message{msg}, Parts: []*forge.Part{p}},
				eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Data: p.Clone()}); err != nil {
				t.Error(err)
				return
			}
			text := ""
			for j := range perPart {
				d := fmt.Sprintf("%d.%d ", i, j)
				text += d
				if err := a.log.QueueDelta(ctx, forge.DefaultTenant, sess.ID, eventlog.Draft{Type: forge.EventModelDelta, ID: p.ID, TurnID: turn.ID,
					ThreadID: sess.MainThreadID, Data: forge.DeltaData{Delta: d}}); err != nil {
					t.Error(err)
					return
				}
			}
			p.Text, p.State = text, forge.StateCompleted
			if _, err := a.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Parts: []*forge.Part{p}},
				eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: turn.ID, ThreadID: sess.MainThreadID, Data: p.Clone()}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // replica b: writes outside the turn into the same session
		defer writers.Done()
		for i := range rounds {
			if _, err := b.log.Write(ctx, forge.DefaultTenant, sess.ID,
				[]eventlog.Draft{{Type: forge.EventMessageCreated, ID: fmt.Sprintf("msg_copy_%d", i), Data: map[string]int{"copy": i}}},
				func(ctx context.Context, evs []forge.Event) error {
					return b.store.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Events: evs})
				}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	writers.Wait()
	if t.Failed() {
		return
	}
	turn.Status = forge.TurnDone
	final := *turn
	evs, err := a.log.Commit(ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: turn.ID, Turn: turn},
		eventlog.Draft{Type: forge.EventTurnDone, ID: turn.ID, TurnID: turn.ID, Data: &final})
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := evs[0].Seq
	deadline := time.Now().Add(20 * time.Second)
	for i, s := range subs {
		var got []forge.Event
		for {
			s.mu.Lock()
			got = slices.Clone(s.evs)
			s.mu.Unlock()
			if n := len(got); n > 0 && got[n-1].Seq == lastSeq {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("subscriber %d stalled after %d events", i, len(got))
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Per part: start, its deltas in order, then its completed row.
		state := map[string]string{} // part -> text seen so far, "" once started
		done := map[string]bool{}
		copies := 0
		for k, ev := range got {
			if k > 0 && ev.Seq <= got[k-1].Seq {
				t.Fatalf("subscriber %d: seq %d after %d", i, ev.Seq, got[k-1].Seq)
			}
			switch ev.Type {
			case forge.EventModelMessage:
				var p forge.Part
				_ = json.Unmarshal(ev.Data, &p)
				if p.State == forge.StateStreaming {
					state[p.ID] = ""
					continue
				}
				if state[p.ID] != p.Text {
					t.Fatalf("subscriber %d: part %s completed with %q after deltas %q", i, p.ID, p.Text, state[p.ID])
				}
				done[p.ID] = true
			case forge.EventModelDelta:
				if _, ok := state[ev.ID]; !ok || done[ev.ID] {
					t.Fatalf("subscriber %d: delta of %s outside its part's stream", i, ev.ID)
				}
				var d forge.DeltaData
				_ = json.Unmarshal(ev.Data, &d)
				state[ev.ID] += d.Delta
			case forge.EventMessageCreated:
				copies++
			}
		}
		if len(done) != rounds || copies != rounds {
			t.Fatalf("subscriber %d: %d parts completed, %d copies; want %d each", i, len(done), copies, rounds)
		}
	}
}
