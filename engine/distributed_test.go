package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
	"github.com/forge-runtime/forge/tools"
)

// flakyLeases is a real LeaseStore whose renewals can be made to fail (a
// replica cut off from the database) or to pretend (a replica that
// believes it still holds its leases: its writes must lose anyway).
type flakyLeases struct {
	forge.LeaseStore
	mode atomic.Int32 // 0 normal, 1 failing, 2 pretending, 3 gated
	// gated: the next renewal of some turn says so on renewing, waits for
	// gate to close, renews, then says so on renewed (mode goes back to 0).
	renewing, gate, renewed chan struct{}
}

func (f *flakyLeases) RenewLeases(ctx context.Context, owner string, ttl time.Duration, turns []forge.TurnRef) ([]string, error) {
	if len(turns) > 0 && f.mode.CompareAndSwap(3, 0) {
		close(f.renewing)
		<-f.gate
		defer close(f.renewed)
		return f.LeaseStore.RenewLeases(ctx, owner, ttl, turns)
	}
	switch f.mode.Load() {
	case 1:
		return nil, errors.New("injected: database unreachable")
	case 2:
		ids := make([]string, len(turns))
		for i, r := range turns {
			ids[i] = r.TurnID
		}
		return ids, nil
	}
	return f.LeaseStore.RenewLeases(ctx, owner, ttl, turns)
}

// replica is one engine of a cluster sharing a database and a Redis.
type replica struct {
	store  *postgres.Store
	bus    *redis.Bus
	leases *flakyLeases
	eng    *engine.Engine
}

type cluster struct {
	t      *testing.T
	ctx    context.Context
	db     string
	prefix string
	model  *testModel
	ttl    time.Duration
	// logger, when set, is every replica's (else they log nothing).
	logger *slog.Logger
	// wrap, when set, is what the next replicas' engines get in place of
	// their store.
	wrap func(forge.Store) forge.Store
}

func newCluster(t *testing.T, ttl time.Duration) *cluster {
	t.Helper()
	redistest.URL(t)
	return &cluster{t: t, ctx: context.Background(), db: pgtest.NewDatabase(t), prefix: redistest.Prefix(t), model: &testModel{}, ttl: ttl}
}

func (c *cluster) replica() *replica {
	c.t.Helper()
	return c.replicaOn(c.db)
}

// replicaOn is replica with the database at db (c.db through a proxy).
func (c *cluster) replicaOn(db string) *replica {
	c.t.Helper()
	st, err := postgres.Open(c.ctx, db, postgres.Options{MaxConns: 4})
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := redis.Open(c.ctx, redistest.URL(c.t), redis.Options{Prefix: c.prefix})
	if err != nil {
		c.t.Fatal(err)
	}
	r := &replica{store: st, bus: b, leases: &flakyLeases{LeaseStore: st}}
	var store forge.Store = st
	if c.wrap != nil {
		store = c.wrap(st)
	}
	logger := c.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r.eng = engine.New(engine.Config{
		Store: store, Models: models{c.model}, Tools: tools.Builtins(), Bus: b, Fence: b, Peers: b,
		Leases: r.leases, LeaseTTL: c.ttl, ReplicaID: b.WriterID(),
		Logger: logger, ToolCancelWait: 200 * time.Millisecond, CheckpointInterval: 50 * time.Millisecond,
	})
	if err := r.eng.Recover(c.ctx); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.eng.Close(ctx)
		_ = b.Close()
		_ = st.Close(ctx)
	})
	return r
}

func (c *cluster) setup(r *replica) *forge.Session {
	c.t.Helper()
	a := &forge.Agent{Tenant: forge.DefaultTenant, Name: "a", Model: "test/m"}
	if err := a.Normalize(r.eng.IsBuiltin); err != nil {
		c.t.Fatal(err)
	}
	if err := r.store.CreateAgent(c.ctx, a); err != nil {
		c.t.Fatal(err)
	}
	s := &forge.Session{ID: idgen.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect,
		Agent: "a", MainThreadID: idgen.New(forge.PrefixThread), CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	if err := r.store.CreateSession(c.ctx, s); err != nil {
		c.t.Fatal(err)
	}
	return s
}

func (c *cluster) wait(r *replica, sid, tid string) *forge.Turn {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 20*time.Second)
	defer cancel()
	t, err := r.eng.WaitTurn(ctx, forge.DefaultTenant, sid, tid)
	if err != nil {
		c.t.Fatalf("WaitTurn: %v", err)
	}
	return t
}

// started starts a turn on r whose model streams a delta and then blocks
// until block closes or the turn's context ends; it returns once the delta
// is out.
func (c *cluster) started(r *replica, sid string, block chan struct{}) *forge.Turn {
	c.t.Helper()
	c.model.push(reply{deltas: []string{"partial "}, block: block})
	turn, evs, err := r.eng.StreamTurn(c.ctx, forge.DefaultTenant, sid, msg("go"))
	if err != nil {
		c.t.Fatal(err)
	}
	for ev, err := range evs {
		if err != nil {
			c.t.Fatal(err)
		}
		if ev.Type == forge.EventModelDelta {
			break
		}
	}
	return turn
}

// TestCancelFromAnotherReplica: a cancel sent to a replica that does not
// run the turn reaches the one that does, and answers with the turn as
// cancelled.
func TestCancelFromAnotherReplica(t *testing.T) {
	c := newCluster(t, 10*time.Second)
	t.Parallel()
	a, b := c.replica(), c.replica()
	sess := c.setup(a)
	if _, err := b.eng.Cancel(c.ctx, forge.DefaultTenant, sess.ID, ""); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("cancel with nothing running: %v", err)
	}
	turn := c.started(a, sess.ID, make(chan struct{}))
	got, err := b.eng.Cancel(c.ctx, forge.DefaultTenant, sess.ID, "stop it")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != turn.ID || got.Status != forge.TurnCancelled || *got.CancelReason != forge.CancelClient || got.CancelMessage == nil || *got.CancelMessage != "stop it" {
		t.Fatalf("cancelled turn %+v", got)
	}
	// The session goes on, on either replica; a turn superseded from the
	// other replica is cancelled there first.
	turn2 := c.started(b, sess.ID, make(chan struct{}))
	req := msg("instead")
	req.Supersede = true
	c.model.push(reply{deltas: []string{"new"}})
	next, err := a.eng.StartTurn(c.ctx, forge.DefaultTenant, sess.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	if old := c.wait(a, sess.ID, turn2.ID); old.Status != forge.TurnCancelled || *old.CancelReason != forge.CancelSuperseded {
		t.Fatalf("superseded turn %+v", old)
	}
	if done := c.wait(b, sess.ID, next.ID); done.Status != forge.TurnDone || done.Output.Text != "new" {
		t.Fatalf("superseding turn %+v", done)
	}
}

// TestStartingReplicaLeavesLiveTurns: a replica starting (Recover) ends
// only turns whose lease expired, never a live replica's.
func TestStartingReplicaLeavesLiveTurns(t *testing.T) {
	c := newCluster(t, 10*time.Second)
	t.Parallel()
	a := c.replica()
	sess := c.setup(a)
	block := make(chan struct{})
	turn := c.started(a, sess.ID, block)
	b := c.replica() // runs Recover
	if got, _ := b.store.GetTurn(c.ctx, forge.DefaultTenant, sess.ID, turn.ID); got.Status != forge.TurnRunning {
		t.Fatalf("a starting replica ended a live replica's turn: %+v", got)
	}
	close(block)
	if got := c.wait(b, sess.ID, turn.ID); got.Status != forge.TurnDone || got.Output.Text != "partial " {
		t.Fatalf("turn %+v", got)
	}
}

// TestCutOffOwnerIsTakenOver: a replica that can no longer renew its
// lease (cut off) loses its turn: another replica ends it abandoned, with
// the cleanup of a restart, within three lease periods; the old owner
// stops and writes nothing more; the session goes on.
func TestCutOffOwnerIsTakenOver(t *testing.T) {
	const ttl = 400 * time.Millisecond
	c := newCluster(t, ttl)
	t.Parallel()
	a, b := c.replica(), c.replica()
	sess := c.setup(a)
	turn := c.started(a, sess.ID, make(chan struct{}))
	sub := b.eng.Events(c.ctx, forge.DefaultTenant, sess.ID, engine.EventsQuery{TurnID: turn.ID})
	textOf := func() *forge.Part {
		msgs, err := b.store.TurnMessages(c.ctx, forge.DefaultTenant, turn.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Role != forge.RoleAssistant {
				continue
			}
			for _, p := range m.Parts {
				if p.Type == forge.PartText {
					return p
				}
			}
		}
		return nil
	}
	// Cut once the streamed text is checkpointed.
	waitUntil(t, func() bool { p := textOf(); return p != nil && p.Text == "partial " })
	cutAt := time.Now()
	a.leases.mode.Store(1)
	var seen []forge.Event
	for ev, err := range sub {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
	}
	took := time.Since(cutAt)
	end := c.wait(b, sess.ID, turn.ID)
	if end.Status != forge.TurnCancelled || *end.CancelReason != forge.CancelAbandoned {
		t.Fatalf("turn after its owner was cut off: %+v", end)
	}
	t.Logf("taken over %v after the cut (lease %v)", took, ttl)
	last := seen[len(seen)-1]
	if last.Type != forge.EventTurnDone || last.Seq != end.LastSeq {
		t.Fatalf("the stream ended with %s %d, want turn.done %d", last.Type, last.Seq, end.LastSeq)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Seq <= seen[i-1].Seq {
			t.Fatalf("seq %d after %d", seen[i].Seq, seen[i-1].Seq)
		}
	}
	// The checkpointed text was kept, and nothing of the turn follows its
	// turn.done.
	if p := textOf(); p.State != forge.StateInterrupted || p.Text != "partial " {
		t.Fatalf("the cut-off part: %+v", p)
	}
	waitUntil(t, func() bool { return a.eng.Running() == 0 })
	evs, _ := b.store.ListEvents(c.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: sess.ID, After: end.LastSeq})
	if len(evs) != 0 {
		t.Fatalf("events after turn.done: %v", types(evs))
	}
	// The session continues on the replica that took over.
	c.model.push(reply{deltas: []string{"back"}})
	next, err := b.eng.StartTurn(c.ctx, forge.DefaultTenant, sess.ID, msg("again"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.wait(b, sess.ID, next.ID); got.Status != forge.TurnDone || *got.PreviousTurnID != turn.ID {
		t.Fatalf("next turn %+v", got)
	}
}

// TestLateWriteOfOldOwnerLoses: a replica that wrongly believes it still
// holds its lease (a stale view, a long pause) has its turn taken over;
// when it writes again, its writes lose, and the turn stays as the
// replica that took it over ended it.
func TestLateWriteOfOldOwnerLoses(t *testing.T) {
	const ttl = 400 * time.Millisecond
	c := newCluster(t, ttl)
	t.Parallel()
	a, b := c.replica(), c.replica()
	sess := c.setup(a)
	block := make(chan struct{})
	turn := c.started(a, sess.ID, block)
	a.leases.mode.Store(2) // a stops renewing but believes it holds the lease
	var end *forge.Turn
	waitUntil(t, func() bool {
		end, _ = b.store.GetTurn(c.ctx, forge.DefaultTenant, sess.ID, turn.ID)
		return end.Ended()
	})
	if end.Status != forge.TurnCancelled || *end.CancelReason != forge.CancelAbandoned {
		t.Fatalf("taken-over turn %+v", end)
	}
	// Now a's model finishes: a writes the text's end and the turn's
	// terminal write, both of which must lose.
	close(block)
	waitUntil(t, func() bool { return a.eng.Running() == 0 })
	got, _ := b.store.GetTurn(c.ctx, forge.DefaultTenant, sess.ID, turn.ID)
	if got.Status != forge.TurnCancelled || got.LastSeq != end.LastSeq {
		t.Fatalf("after the old owner's late writes: %+v", got)
	}
	if evs, _ := b.store.ListEvents(c.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: sess.ID, After: end.LastSeq}); len(evs) != 0 {
		t.Fatalf("the old owner wrote after the takeover: %v", types(evs))
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockedBuffer is a log sink tests read while replicas write to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTurnEndingDuringARenewalIsNotLost: a lease renewal that was on its
// way when the turn ended (its terminal write deleted the lease, so the
// renewal finds none) is no sign that another replica took the lease: the
// turn ended done, and nothing says it was lost (64 such warnings in 15 s
// under load, before).
func TestTurnEndingDuringARenewalIsNotLost(t *testing.T) {
	c := newCluster(t, 600*time.Millisecond)
	t.Parallel()
	var logs lockedBuffer
	c.logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := c.replica()
	sess := c.setup(a)
	block := make(chan struct{})
	a.leases.renewing, a.leases.gate, a.leases.renewed = make(chan struct{}), make(chan struct{}), make(chan struct{})
	turn := c.started(a, sess.ID, block)
	a.leases.mode.Store(3)
	select {
	case <-a.leases.renewing: // the keeper renews the turn's lease now
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal")
	}
	close(block)
	if done := c.wait(a, sess.ID, turn.ID); done.Status != forge.TurnDone {
		t.Fatalf("turn %s", done.Status)
	}
	close(a.leases.gate)
	<-a.leases.renewed
	// The keeper looks at the renewal's answer once it is back; the next
	// period's renewal (of no turn) comes after.
	time.Sleep(400 * time.Millisecond)
	if out := logs.String(); strings.Contains(out, "turn lost") {
		t.Fatalf("a turn that ended done was reported lost:\n%s", out)
	}
}
