package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// queueingStore is the real SQLite store; once armed, the next terminal
// write in the session it names queues a turn there right after it
// commits (a request racing the turn's end), and it counts the engine's
// looks for queued turns.
type queueingStore struct {
	forge.Store
	eng   func() *engine.Engine
	looks atomic.Int64

	mu      sync.Mutex // guards the following
	session string     // armed: the session whose next terminal write queues a turn
	queued  *forge.Turn
	err     error
}

func (s *queueingStore) NextQueuedTurn(ctx context.Context, tenant, sessionID string) (*forge.QueuedTurn, error) {
	s.looks.Add(1)
	return s.Store.NextQueuedTurn(ctx, tenant, sessionID)
}

func (s *queueingStore) Commit(ctx context.Context, b *forge.Batch) error {
	if err := s.Store.Commit(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Turn != nil && b.Turn.Ended() && b.SessionID == s.session && s.queued == nil {
		req := msg("queued while the turn ended")
		req.IfBusy = forge.IfBusyEnqueue
		s.queued, s.err = s.eng().StartTurn(ctx, b.Tenant, b.SessionID, req)
		// The request's own look for queued turns runs in the background:
		// give it the time to find the turn still running here (it stays
		// registered until this write returns). Were it late, the test
		// would pass without testing the race, never fail.
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// TestQueuedTurnsAfterTheTerminalWrite: a turn's end looks for a queued
// turn only when its terminal write did not say there is none
// (forge.Batch.NoneQueued); a turn queued by a request of this process
// after that write, while the turn still counts as running here (so the
// request's own look found it running), is started when the turn ends.
func TestQueuedTurnsAfterTheTerminalWrite(t *testing.T) {
	t.Parallel()
	qs := &queueingStore{}
	wrap := func(c *engine.Config) {
		qs.Store = c.Store
		c.Store = qs
	}
	h := newHarness(t, wrap)
	qs.eng = func() *engine.Engine { return h.eng }
	h.agent("a", nil)
	s := h.session("a")

	h.model.push(reply{deltas: []string{"one"}})
	if got := h.run(s.ID, msg("first")); got.Status != forge.TurnDone {
		t.Fatalf("first turn %+v", got)
	}
	h.close() // the engine's background work has ended
	if n := qs.looks.Load(); n != 0 {
		t.Fatalf("%d looks for queued turns after a turn whose terminal write found none", n)
	}
	h.open(wrap)

	h.model.push(reply{deltas: []string{"two"}}, reply{deltas: []string{"three"}})
	qs.mu.Lock()
	qs.session = s.ID
	qs.mu.Unlock()
	second, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("second"))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.wait(s.ID, second.ID); got.Status != forge.TurnDone {
		t.Fatalf("second turn %+v", got)
	}
	qs.mu.Lock()
	queued, qerr := qs.queued, qs.err
	qs.mu.Unlock()
	if qerr != nil || queued == nil || queued.Status != forge.TurnQueued {
		t.Fatalf("the racing request: %+v, %v; want a queued turn", queued, qerr)
	}
	if got := h.wait(s.ID, queued.ID); got.Status != forge.TurnDone || got.Output == nil || got.Output.Text != "three" {
		t.Fatalf("the turn queued during the terminal write: %+v", got)
	}
}
