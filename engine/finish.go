package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// finish makes the turn's terminal write: closing events of anything left
// open, action.required, turn.done, the turn row and its snapshot, in one
// transaction. The store fences it: if the turn already ended, this loses.
// When it cannot be written (after the event log's retries), the turn ends
// errored with code store_error in a minimal write, retried until it lands
// or the engine gives up: a session is never left with a running turn
// while its store works.
func (x *execution) finish(out outcome) {
	th := x.main
	if x.lost.Load() {
		// The turn is another replica's to end (or has ended): stop what
		// runs here, write nothing; the replica that ends it reports it.
		x.endedElsewhere = true
		if th.tools != nil && th.tools.sandbox != nil {
			x.e.cfg.Sandboxes.Stop(x.session.ID)
		}
		x.e.unregister(x)
		return
	}
	if len(th.withheld) > 0 {
		// Before the rows that complete their parts: shown if the
		// terminal write stores them.
		th.foldWithheld()
	}
	// Anything still streaming, in any thread, was cut off.
	for thread, rows := range x.streams.takeOpen() {
		for _, row := range rows {
			th.w.part(row, x.e.clock.Now())
			th.w.event(eventlog.Draft{Type: forge.EventModelMessage, ID: row.ID, TurnID: x.turn.ID, ThreadID: thread, Data: row})
		}
	}
	if err := x.failedWrite(); err != nil && out.status != forge.TurnErrored {
		out = th.failure(err)
	}
	now := x.e.clock.Now()
	t := x.turn
	t.Status = out.status
	t.Error = out.err
	t.Output = out.output
	t.EndedAt = &now
	t.Iterations = th.iterations
	t.Usage = th.usage
	t.RequiredActions = out.actions
	if t.RequiredActions == nil {
		t.RequiredActions = []forge.RequiredAction{}
	}
	if out.status == forge.TurnCancelled {
		reason := out.cancelReason
		t.CancelReason = &reason
		x.mu.Lock()
		if text := x.reasonText; text != "" {
			t.CancelMessage = &text
		}
		x.mu.Unlock()
		if th.tools != nil && th.tools.sandbox != nil {
			// A cancelled turn leaves nothing running in its sandbox.
			x.e.cfg.Sandboxes.Stop(x.session.ID)
			th.event(forge.EventSandboxStopped, x.session.ID, forge.SandboxStoppedData{Reason: reason})
		}
	}
	if len(out.actions) > 0 {
		th.event(forge.EventActionRequired, t.ID, forge.ActionRequiredData{RequiredActions: out.actions})
	}
	snap := x.snapshot(out)
	th.w.event(x.turnDone())
	err := x.commit(&th.w, snap, func() {
		// The turn has ended in the store: a client that sees turn.done
		// (published right after this) may start the next turn at once.
		x.e.histories.put(x.session.ID, t, th.history, snap, th.memo)
		x.landed()
	})
	switch {
	case err == nil:
		return
	case errors.Is(err, forge.ErrTurnEnded):
		x.endedElsewhere = true
		x.e.log.Info("turn already ended elsewhere; terminal write dropped", "session_id", x.session.ID, "turn_id", t.ID)
		return
	}
	x.e.log.Error("terminal write failed; ending the turn store_error", "session_id", x.session.ID, "turn_id", t.ID, "err", err)
	x.endStoreError(err)
}

// landed runs once the turn's terminal write is committed, before its
// events are published: the next turn of the session may start, observers
// count the end, then waiters (WaitTurn) wake, so a client that has its
// turn back sees it counted.
func (x *execution) landed() {
	x.e.unregister(x)
	x.freeQuota()
	x.observeTurnEnd()
	x.markEnded()
}

// endStoreError ends the turn errored with code store_error in a write
// holding only the turn, its turn.done and its base snapshot (the rows
// that could not be written are not claimed), retrying with the configured
// backoff, its last delay repeated, until it lands or the engine gives up
// (then recovery ends the turn at the next start).
func (x *execution) endStoreError(cause error) {
	t := x.turn
	t.Status, t.Output, t.RequiredActions, t.CancelReason, t.CancelMessage = forge.TurnErrored, nil, []forge.RequiredAction{}, nil, nil
	var se *storeError
	if !errors.As(cause, &se) {
		se = &storeError{err: cause}
	}
	t.Error = &forge.TurnError{Code: forge.CodeStoreError, Message: se.Error()}
	snap := x.baseSnapshot()
	delays := x.e.cfg.StoreRetryDelays
	for attempt := 0; ; attempt++ {
		if x.lost.Load() {
			return
		}
		var w batch
		w.event(x.turnDone())
		err := x.commit(&w, snap, x.landed)
		if errors.Is(err, forge.ErrTurnEnded) {
			x.endedElsewhere = true
		}
		if err == nil || errors.Is(err, forge.ErrTurnEnded) {
			return
		}
		wait := time.Second
		if len(delays) > 0 {
			wait = delays[min(attempt, len(delays)-1)]
		}
		x.e.log.Error("terminal write failed again", "session_id", x.session.ID, "turn_id", t.ID, "attempt", attempt+1, "err", err)
		select {
		case <-x.e.gaveUp:
			return
		default:
		}
		if x.e.cfg.Sleep != nil {
			_ = x.e.cfg.Sleep(x.ctx, wait)
		} else {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-x.e.gaveUp:
				timer.Stop()
				return
			}
		}
	}
}

// turnDone is the turn's last event: the turn as it ends, naming its own
// seq as last_seq.
func (x *execution) turnDone() eventlog.Draft {
	t := x.turn
	final := *t
	return eventlog.Draft{Type: forge.EventTurnDone, ID: t.ID, TurnID: t.ID, Data: &final, OnSeq: func(seq int64) {
		final.LastSeq, t.LastSeq = seq, seq
	}}
}

// snapshot is the turn's durable state that is not a message: the main
// thread's state and those of the children it touched, the context size,
// the capability states and the MCP info (both carried from the base turn
// and updated), and the base turn's other extra state.
func (x *execution) snapshot(out outcome) *forge.Snapshot {
	th := x.main
	snap := &forge.Snapshot{TurnID: x.turn.ID, Threads: map[string]forge.ThreadState{}, Extra: maps.Clone(x.base.Extra)}
	state := forge.ThreadFinished
	var openCalls []string
	if len(out.actions) > 0 {
		state = forge.ThreadUserInputRequired
		for _, a := range out.actions {
			openCalls = append(openCalls, a.CallID)
		}
	}
	snap.Threads[th.id] = forge.ThreadState{ID: th.id, Agent: th.agent.Name, State: state, OpenCall: openCalls}
	for id, st := range th.children {
		snap.Threads[id] = st
	}
	snap.ContextTokens = th.contextTokens()
	snap.Capabilities = x.capabilityStates()
	raw, err := x.mcpSnapshot()
	switch {
	case err != nil:
		x.e.log.Warn("snapshot: MCP info dropped", "session_id", x.session.ID, "err", err)
	case raw != nil:
		if snap.Extra == nil {
			snap.Extra = map[string]json.RawMessage{}
		}
		snap.Extra["mcp"] = raw
	}
	if raw := x.sandboxSnapshot(); raw != nil {
		if snap.Extra == nil {
			snap.Extra = map[string]json.RawMessage{}
		}
		snap.Extra["sandbox"] = raw
	}
	return snap
}

// baseSnapshot is the snapshot of this turn ending with nothing it did
// saved (store_error).
func (x *execution) baseSnapshot() *forge.Snapshot {
	return carriedSnapshot(x.turn.ID, x.session.MainThreadID, x.base)
}

// contextTokens is the main thread's context size after the last step: the
// last model call's input plus its output; after a compaction with no call
// since, the local estimate of the compacted view.
func (th *thread) contextTokens() int64 {
	if used, at := th.memo.ReportedContext(th.history); at >= 0 {
		return used
	}
	if th.memo.LatestSummary(th.history) >= 0 {
		return th.contextEstimate()
	}
	return 0
}

// reportEnd logs the turn's end, at the level of the attention it
// deserves (done: debug; cancelled, abandoned and shutdown included: info;
// errored: warn, or error for Forge's own failures), and tells the
// observer. A lost terminal write is logged by finish: the writer that
// won logs the end.
func (x *execution) reportEnd() {
	x.observeTurnEnd() // done already when the terminal write landed
	t := x.turn
	if x.endedElsewhere {
		return
	}
	level, msg := slog.LevelDebug, "turn done"
	switch t.Status {
	case forge.TurnErrored:
		level, msg = slog.LevelWarn, "turn errored"
		if t.Error != nil && (t.Error.Code == forge.CodeInternal || t.Error.Code == forge.CodeStoreError) {
			level = slog.LevelError
		}
	case forge.TurnCancelled:
		level, msg = slog.LevelInfo, "turn cancelled"
	}
	ctx := context.Background()
	if !x.e.log.Enabled(ctx, level) {
		return
	}
	args := []any{"session_id", x.session.ID, "turn_id", t.ID, "agent", x.main.agent.Name,
		"iterations", t.Iterations, "duration", x.e.clock.Now().Sub(t.CreatedAt)}
	if t.CancelReason != nil {
		args = append(args, "reason", *t.CancelReason)
	}
	if t.Error != nil {
		args = append(args, "code", t.Error.Code, "error", t.Error.Message)
	}
	x.e.log.Log(ctx, level, msg, args...)
}
