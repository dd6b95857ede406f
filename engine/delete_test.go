package engine_test

import (
	"context"
	"errors"
	"iter"
	"sync"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// hangModel streams one delta, then waits until its call is cancelled:
// every turn runs until something stops it.
type hangModel struct{}

func (hangModel) Stream(ctx context.Context, _ *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		if !yield(forge.ModelEvent{Type: forge.TextDelta, Delta: "…"}, nil) {
			return
		}
		<-ctx.Done()
		yield(forge.ModelEvent{}, ctx.Err())
	}
}

// Deleting a session while superseding turns start in it leaves no turn
// running: a start either loses (not found) or is cancelled by the delete
// before the delete returns (API.md: DELETE cancels a running turn first;
// DESIGN.md: one running turn per session, a terminal state for every
// turn).
func TestDeleteSessionRacingSupersedeLeavesNoRunningTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		supersedes int
		rounds     int
	}{
		{name: "one supersede", supersedes: 1, rounds: 100},
		{name: "six supersedes", supersedes: 6, rounds: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *engine.Config) { c.Models = models{hangModel{}} })
			h.agent("hang", nil)
			for round := range tc.rounds {
				s := h.session("hang")
				if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("first")); err != nil {
					t.Fatal(err)
				}
				waitForEvent(t, h, s.ID, forge.EventModelDelta)

				// Every request waits at the barrier, then all race: the
				// supersedes and the delete all wait for the first turn's
				// end, and wake together.
				start := make(chan struct{})
				var wg sync.WaitGroup
				errs := make(chan error, tc.supersedes+1)
				for range tc.supersedes {
					wg.Go(func() {
						<-start
						req := msg("again")
						req.Supersede = true
						_, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, req)
						if errors.Is(err, forge.ErrNotFound) || errors.Is(err, forge.ErrConflict) {
							err = nil // lost to the delete, or to another supersede
						}
						errs <- err
					})
				}
				wg.Go(func() {
					<-start
					errs <- h.eng.DeleteSession(h.ctx, forge.DefaultTenant, s.ID)
				})
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				if n := h.eng.Running(); n != 0 {
					t.Fatalf("round %d: %d turn(s) still running after the session was deleted", round, n)
				}
				if _, err := h.store.GetSession(h.ctx, forge.DefaultTenant, s.ID); !errors.Is(err, forge.ErrNotFound) {
					t.Fatalf("round %d: session after delete: %v", round, err)
				}
			}
		})
	}
}
