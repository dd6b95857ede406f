package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forge-runtime/forge"
)

// owner is the lease owner id batches are fenced on, "" without leases.
func (e *Engine) owner() string {
	if e.cfg.Leases == nil {
		return ""
	}
	return e.replica
}

// lease is what a new turn's BeginTurn carries, nil without leases.
func (e *Engine) lease() *forge.Lease {
	if e.cfg.Leases == nil {
		return nil
	}
	return &forge.Lease{Owner: e.replica, TTL: e.cfg.LeaseTTL}
}

// keepLeases renews this process's leases and takes over the turns whose
// lease expired, every third of a lease period, until Close.
func (e *Engine) keepLeases() {
	defer close(e.keeperDone)
	period := e.cfg.LeaseTTL / 3
	t := time.NewTicker(period)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-e.stopKeeper:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), period)
		renewed = e.renewLeases(ctx, renewed)
		if err := e.takeOver(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("lease sweep failed", "err", err)
		}
		cancel()
	}
}

// renewLeases extends the leases of the turns this process runs and stops
// those whose lease another replica took. When renewals have failed for a
// whole lease period, every turn's lease may have been taken: they stop
// too (their writes would lose). It returns when leases were last known
// held.
func (e *Engine) renewLeases(ctx context.Context, renewed time.Time) time.Time {
	e.mu.Lock()
	runs := make([]*execution, 0, len(e.running))
	for _, x := range e.running {
		if x.leased.Load() {
			runs = append(runs, x)
		}
	}
	e.mu.Unlock()
	started := time.Now()
	if len(runs) == 0 {
		return started
	}
	refs := make([]forge.TurnRef, len(runs))
	for i, x := range runs {
		refs[i] = forge.TurnRef{Tenant: x.tenant, SessionID: x.session.ID, TurnID: x.turn.ID}
	}
	held, err := e.cfg.Leases.RenewLeases(ctx, e.replica, e.cfg.LeaseTTL, refs)
	if err != nil {
		e.log.Warn("lease renewal failed", "turns", len(refs), "err", err)
		if time.Since(renewed) >= e.cfg.LeaseTTL {
			for _, x := range runs {
				if !x.finishing.Load() {
					x.loseTurn("leases could not be renewed for a whole lease period")
				}
			}
		}
		return renewed
	}
	keep := make(map[string]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	for _, x := range runs {
		if !keep[x.turn.ID] && !x.finishing.Load() {
			// Not renewed: another replica took the lease. (A turn whose
			// terminal write began may have deleted it meanwhile: that
			// write's fence decides, and it ends the turn either way.)
			x.loseTurn("its lease was taken by another replica")
		}
	}
	return started
}

// takeOver ends the running turns whose lease expired, as Recover does
// after a restart: for each it takes the lease (one replica wins), then
// closes what the dead owner left open and ends the turn cancelled /
// abandoned, fenced on the new lease.
func (e *Engine) takeOver(ctx context.Context) error {
	turns, err := e.cfg.Leases.ExpiredTurns(ctx)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	var errs []error
	for _, t := range turns {
		if x := e.runningTurn(t.SessionID); x != nil && x.turn.ID == t.ID {
			continue // ours, alive: the next renewal extends it
		}
		taken, err := e.cfg.Leases.TakeLease(ctx, forge.TurnRef{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID}, e.replica, e.cfg.LeaseTTL)
		if err != nil {
			errs = append(errs, fmt.Errorf("take the lease of turn %s: %w", t.ID, err))
			continue
		}
		if !taken {
			continue
		}
		if err := e.abandon(ctx, t); err != nil && !errors.Is(err, forge.ErrTurnEnded) {
			errs = append(errs, fmt.Errorf("recover turn %s: %w", t.ID, err))
			continue
		}
		e.log.Warn("recovered abandoned turn", "session_id", t.SessionID, "turn_id", t.ID, "replica", e.replica)
	}
	// Queued turns with no turn running before them (a replica died, or
	// one ended its turn while a queued turn was being written) start.
	if err := e.startAllQueued(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
