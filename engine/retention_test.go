package engine_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/retention"
)

// TestSweepRacingATurnLeavesOneOrTheOther: a retention sweep that expires
// a session while a turn starts in it either loses (the turn runs, the
// session and its turn stay whole) or wins (the session is gone and the
// turn never existed) — never a session deleted under a turn, nor a turn
// half written.
func TestSweepRacingATurnLeavesOneOrTheOther(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) { a.Retention = &forge.Retention{SessionTTL: forge.TTL(time.Hour)} })
	// The sweep runs two hours ahead: every session is idle past its TTL
	// until a turn moves it.
	ahead := aheadClock(2 * time.Hour)
	sw := retention.New(retention.Config{Store: h.store, Expirer: h.eng, Clock: ahead, PurgeAfter: -1})
	won, lost := 0, 0
	for range 40 {
		s := h.session("a")
		// The turn's model call holds until the sweep is over: a turn that
		// started is running while the sweep looks.
		hold := make(chan struct{})
		h.model.push(reply{deltas: []string{"ok"}, block: hold})
		var wg sync.WaitGroup
		var turn *forge.Turn
		var startErr, sweepErr error
		wg.Go(func() { turn, startErr = h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("hi")) })
		wg.Go(func() { _, sweepErr = sw.Sweep(h.ctx, 0) })
		wg.Wait()
		close(hold)
		if sweepErr != nil {
			t.Fatalf("Sweep: %v", sweepErr)
		}
		_, getErr := h.store.GetSession(h.ctx, forge.DefaultTenant, s.ID)
		switch {
		case startErr == nil:
			// The turn won: it runs to its end in a live session.
			lost++
			if getErr != nil {
				t.Fatalf("turn %s started but its session is %v", turn.ID, getErr)
			}
			if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnDone {
				t.Fatalf("turn ended %s", got.Status)
			}
		case errors.Is(startErr, forge.ErrNotFound):
			won++
			if !errors.Is(getErr, forge.ErrNotFound) {
				t.Fatalf("StartTurn found no session, GetSession: %v", getErr)
			}
			h.model.mu.Lock()
			h.model.replies = nil // the reply of the turn that never was
			h.model.mu.Unlock()
		default:
			t.Fatalf("StartTurn: %v", startErr)
		}
	}
	// Whatever the sweep expired, it purged: nothing of those sessions is
	// left, not even a turn row.
	refs, err := h.store.DeletedSessions(h.ctx, time.Now().Add(3*time.Hour), 100)
	if err != nil || len(refs) != 0 {
		t.Fatalf("deleted sessions left after the sweeps: %v, %v", refs, err)
	}
	t.Logf("sweep won %d, turn won %d", won, lost)
}

// aheadClock is the wall clock moved by a fixed offset.
type aheadClock time.Duration

func (c aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c)).UTC() }
