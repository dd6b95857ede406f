package engine

import (
	"context"
	"time"

	"github.com/forge-runtime/forge"
)

// onCancelSignal acts on a cancel sent by any replica when the turn runs
// here.
func (e *Engine) onCancelSignal(sig forge.CancelSignal) {
	x := e.runningTurn(sig.SessionID)
	if x == nil || x.tenant != sig.Tenant || x.turn.ID != sig.TurnID {
		return
	}
	reason := sig.Reason
	if reason == "" {
		reason = forge.CancelClient
	}
	x.stop(reason, sig.Message)
}

// runningElsewhere returns the session's running turn when it runs on
// another replica (nil when none runs, or it runs here). A running turn
// is always its session's tip.
func (e *Engine) runningElsewhere(ctx context.Context, tenant, sessionID string) (*forge.Turn, error) {
	if e.cfg.Peers == nil && e.cfg.Leases == nil {
		return nil, nil
	}
	sess, err := e.store.GetSession(ctx, tenant, sessionID)
	if err != nil || sess.TipTurnID == nil {
		return nil, err
	}
	t, err := e.store.GetTurn(ctx, tenant, sessionID, *sess.TipTurnID)
	if err != nil || t.Ended() {
		return nil, err
	}
	if x := e.runningTurn(sessionID); x != nil && x.turn.ID == t.ID {
		return nil, nil
	}
	return t, nil
}

// cancelRemote asks the replica running t to cancel it and waits for its
// terminal write (whoever makes it: a dead owner's turn is ended
// abandoned by the replica that takes its lease). The signal is sent
// again every second, in case the owner missed it.
func (e *Engine) cancelRemote(ctx context.Context, t *forge.Turn, reason, message string) (*forge.Turn, error) {
	sig := forge.CancelSignal{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Reason: reason, Message: message}
	send := func() error {
		if e.cfg.Peers == nil {
			return nil // without peers, only the lease's expiry ends it
		}
		return e.cfg.Peers.SendCancel(ctx, sig)
	}
	if err := send(); err != nil {
		return nil, err
	}
	return e.waitEnded(ctx, t, send)
}

// waitEnded polls the store until t has ended, calling again (when set)
// every second.
func (e *Engine) waitEnded(ctx context.Context, t *forge.Turn, again func() error) (*forge.Turn, error) {
	poll := 5 * time.Millisecond
	sent := time.Now()
	for {
		timer := time.NewTimer(poll)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		cur, err := e.store.GetTurn(ctx, t.Tenant, t.SessionID, t.ID)
		if err != nil {
			return nil, err
		}
		if cur.Ended() {
			return cur, nil
		}
		poll = min(2*poll, 100*time.Millisecond)
		if again != nil && time.Since(sent) >= time.Second {
			if err := again(); err != nil {
				e.log.Warn("cancel signal failed", "session_id", t.SessionID, "turn_id", t.ID, "err", err)
			}
			sent = time.Now()
		}
	}
}
