package engine

import (
	"context"
	"errors"
	"time"

	"github.com/forge-runtime/forge"
)

func (e *Engine) runningTurn(sessionID string) *execution {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running[sessionID]
}

// Running is how many turns this process runs now.
func (e *Engine) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

// WaitTurn blocks until the turn has ended (or ctx is done) and returns it
// as stored, whichever replica runs it (a queued turn: once it has run): as its terminal write stored it
// when it ended here (no read), else read from the store. It returns once
// that write is committed, as its events are being published.
func (e *Engine) WaitTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error) {
	if x := e.runningTurn(sessionID); x != nil && x.turn.ID == turnID {
		select {
		case <-x.ended:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if t := e.histories.ended(tenant, sessionID, turnID); t != nil {
		return t, nil
	}
	t, err := e.store.GetTurn(ctx, tenant, sessionID, turnID)
	if err != nil || t.Ended() {
		return t, err
	}
	if x := e.runningTurn(sessionID); x != nil && x.turn.ID == turnID {
		// (A queued turn that has just started.)
		return e.WaitTurn(ctx, tenant, sessionID, turnID)
	}
	if e.cfg.Leases == nil && e.cfg.Peers == nil && t.Status != forge.TurnQueued {
		// Running in the store, not here: a queued turn that started and
		// ended since the read, or one a crash left (recovery ends it).
		return e.store.GetTurn(ctx, tenant, sessionID, turnID)
	}
	return e.waitEnded(ctx, t, nil)
}

// Cancel ends the session's running turn with reason client and returns it
// once its terminal write has landed. ErrConflict when nothing runs.
func (e *Engine) Cancel(ctx context.Context, tenant, sessionID, reason string) (*forge.Turn, error) {
	if _, err := e.store.GetSession(ctx, tenant, sessionID); err != nil {
		return nil, err
	}
	x := e.runningTurn(sessionID)
	if x == nil || x.tenant != tenant {
		t, err := e.runningElsewhere(ctx, tenant, sessionID)
		if err != nil {
			return nil, err
		}
		if t != nil {
			return e.cancelRemote(ctx, t, forge.CancelClient, reason)
		}
		return nil, forge.Errorf(forge.ErrConflict, "no turn is running in session %s", sessionID)
	}
	x.stop(forge.CancelClient, reason)
	select {
	case <-x.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.store.GetTurn(ctx, tenant, sessionID, x.turn.ID)
}

// deleteRounds bounds how often DeleteSession stops a turn that began
// (on another replica) while it was stopping the previous one.
const deleteRounds = 5

// DeleteSession cancels the session's running turn, then deletes it. Once
// it returns no turn of the session runs, and none can start: this
// process registers none meanwhile, and the store refuses to delete a
// session with a running turn (one that began elsewhere is stopped in the
// next round) and to begin a turn in a deleted session.
func (e *Engine) DeleteSession(ctx context.Context, tenant, sessionID string) error {
	if _, err := e.store.GetSession(ctx, tenant, sessionID); err != nil {
		return err
	}
	done, err := e.markDeleting(ctx, sessionID)
	if err != nil {
		return err
	}
	defer done()
	for range deleteRounds {
		if err := e.stopRunning(ctx, tenant, sessionID); err != nil {
			return err
		}
		err := e.store.DeleteSession(ctx, tenant, sessionID)
		if errors.Is(err, forge.ErrTurnInProgress) {
			continue // a turn began elsewhere since: stop it too
		}
		if err != nil {
			return err
		}
		e.forgetSession(sessionID)
		return nil
	}
	return forge.Errorf(forge.ErrTurnInProgress, "turns kept starting in session %s while it was being deleted; retry the request", sessionID)
}

// forgetSession drops what this process holds for a deleted session.
func (e *Engine) forgetSession(sessionID string) {
	e.histories.drop(sessionID)
	// The session's stdio MCP servers run in its sandbox: stop them
	// before removing it.
	if e.cfg.MCP != nil {
		e.cfg.MCP.CloseSession(sessionID)
	}
	if e.cfg.Sandboxes != nil {
		if err := e.cfg.Sandboxes.Remove(sessionID); err != nil {
			e.log.Warn("removing sandbox", "session_id", sessionID, "err", err)
		}
	}
	e.events.Forget(sessionID)
}

// ExpireSession deletes a session whose retention ran out (the retention
// sweeper), unless it is in use again: last updated at or after
// idleBefore, or with a turn running or queued. Then it fails with
// ErrConflict and the session stays whole; a turn starting here meanwhile
// either began first or finds the session gone. It never cancels a turn.
func (e *Engine) ExpireSession(ctx context.Context, tenant, sessionID string, idleBefore time.Time) error {
	r, ok := e.store.(forge.RetentionStore)
	if !ok {
		return forge.Errorf(forge.ErrInvalid, "this store keeps sessions forever (no retention)")
	}
	e.mu.Lock()
	busy := e.running[sessionID] != nil
	e.mu.Unlock()
	if busy {
		return forge.Errorf(forge.ErrConflict, "session %s has a running turn; it is not expired", sessionID)
	}
	done, err := e.markDeleting(ctx, sessionID)
	if err != nil {
		return err
	}
	defer done()
	if err := r.ExpireSession(ctx, tenant, sessionID, idleBefore); err != nil {
		return err
	}
	e.forgetSession(sessionID)
	return nil
}

// markDeleting marks the session as being deleted in this process (after
// any other DeleteSession of it here is done) until done is called.
func (e *Engine) markDeleting(ctx context.Context, sessionID string) (done func(), _ error) {
	for {
		e.mu.Lock()
		busy := e.deleting[sessionID]
		if busy == nil {
			ch := make(chan struct{})
			e.deleting[sessionID] = ch
			e.mu.Unlock()
			return func() {
				e.mu.Lock()
				delete(e.deleting, sessionID)
				e.mu.Unlock()
				close(ch)
			}, nil
		}
		e.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stopRunning cancels the session's running turn, here or on another
// replica, and waits for its terminal write; nil when none runs.
func (e *Engine) stopRunning(ctx context.Context, tenant, sessionID string) error {
	if x := e.runningTurn(sessionID); x != nil && x.tenant == tenant {
		x.stop(forge.CancelClient, "")
		select {
		case <-x.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t, err := e.runningElsewhere(ctx, tenant, sessionID)
	if err != nil || t == nil {
		return err
	}
	_, err = e.cancelRemote(ctx, t, forge.CancelClient, "")
	return err
}

// WorkspaceRestorer is a Sandboxes that can restore a session's workspace
// to a snapshot a step kept (*sandbox.Manager is one).
type WorkspaceRestorer interface {
	RestoreSnapshot(ctx context.Context, sessionID, snapshotID string) (forge.WorkspaceRestore, error)
}

// WorkspaceLister is a Sandboxes that lists a session's workspace
// snapshots (*sandbox.Manager is one).
type WorkspaceLister interface {
	ListSnapshots(ctx context.Context, sessionID string) ([]forge.WorkspaceSnapshotInfo, error)
}

// WorkspaceSnapshots lists the workspace snapshots a session's sandbox
// keeps, oldest first: the ids its step-finish parts name, less those
// pruned. A server without sandboxes lists none.
func (e *Engine) WorkspaceSnapshots(ctx context.Context, tenant, sessionID string) ([]forge.WorkspaceSnapshotInfo, error) {
	if _, err := e.store.GetSession(ctx, tenant, sessionID); err != nil {
		return nil, err
	}
	l, ok := e.cfg.Sandboxes.(WorkspaceLister)
	if !ok {
		return []forge.WorkspaceSnapshotInfo{}, nil
	}
	return l.ListSnapshots(ctx, sessionID)
}

// RestoreWorkspace restores the session's sandbox files to the workspace
// snapshot a step kept (its step-finish part names it). It is refused with
// ErrTurnInProgress while a turn of the session runs, and holds the
// session meanwhile as a delete does: a turn asked for during the restore
// starts after it. A snapshot the session does not have (another
// session's, a pruned one) is ErrSnapshotNotFound.
func (e *Engine) RestoreWorkspace(ctx context.Context, tenant, sessionID, snapshotID string) (forge.WorkspaceRestore, error) {
	res := forge.WorkspaceRestore{Snapshot: snapshotID}
	if _, err := e.store.GetSession(ctx, tenant, sessionID); err != nil {
		return res, err
	}
	r, ok := e.cfg.Sandboxes.(WorkspaceRestorer)
	if !ok {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this server keeps no workspace snapshots (no sandbox)")
	}
	done, err := e.markDeleting(ctx, sessionID)
	if err != nil {
		return res, err
	}
	defer done()
	if x := e.runningTurn(sessionID); x != nil {
		return res, forge.Errorf(forge.ErrTurnInProgress, "turn %s is running in this session; restore its workspace once it has ended (or cancel it)", x.turn.ID)
	}
	t, err := e.runningElsewhere(ctx, tenant, sessionID)
	if err != nil {
		return res, err
	}
	if t != nil {
		return res, forge.Errorf(forge.ErrTurnInProgress, "turn %s is running in this session; restore its workspace once it has ended (or cancel it)", t.ID)
	}
	// Once begun, a restore finishes (it is bounded by the snapshot
	// store's size): a client gone halfway must not leave the files half
	// restored.
	return r.RestoreSnapshot(context.WithoutCancel(ctx), sessionID, snapshotID)
}
