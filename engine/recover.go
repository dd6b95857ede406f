package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// Recover ends every turn a dead process left running: unfinished text and
// reasoning parts are closed with their checkpointed text (interrupted),
// pending and running tool parts become errors, and the turn ends cancelled
// with reason abandoned. Its snapshot carries the base turn's capability
// states, thread states and MCP info, so the next turn starts where the
// base left. The event log reserves a fresh seq range first, so the
// closing events have seqs above any a client could have seen. Call it
// before serving.
//
// With leases (distributed mode) it ends only the turns whose lease has
// expired, as the lease keeper does every third of a lease period: the
// running turns of live replicas are theirs.
func (e *Engine) Recover(ctx context.Context) error {
	if e.cfg.Leases != nil {
		return e.takeOver(ctx)
	}
	turns, err := e.store.RunningTurns(ctx)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	// One turn that cannot be ended must not keep the server (every
	// tenant, every session) from starting: it is logged, stays running,
	// and the next start tries again.
	for _, t := range turns {
		if err := e.abandon(ctx, t); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("recover: %w", ctx.Err())
			}
			e.log.Error("recovery could not end an abandoned turn; it stays running until the next start",
				"session_id", t.SessionID, "turn_id", t.ID, "err", err)
		}
	}
	// Queued turns whose turn before them ended (abandoned just now, or
	// before the process stopped) start, in the background.
	if err := e.startAllQueued(ctx); err != nil {
		e.log.Error("recovery could not list queued turns; they start at the next start", "err", err)
	}
	return nil
}

func (e *Engine) abandon(ctx context.Context, t *forge.Turn) error {
	msgs, err := e.store.TurnMessages(ctx, t.Tenant, t.ID)
	if err != nil {
		return err
	}
	// A deleted session's turn is ended all the same (its rows stay; the
	// store's writes do not need the session to be live), with no main
	// thread to mark finished.
	mainThread := ""
	switch sess, err := e.store.GetSession(ctx, t.Tenant, t.SessionID); {
	case err == nil:
		mainThread = sess.MainThreadID
	case !errors.Is(err, forge.ErrNotFound):
		return err
	}
	base := &forge.Snapshot{}
	if t.PreviousTurnID != nil {
		switch snap, err := e.store.GetSnapshot(ctx, t.Tenant, *t.PreviousTurnID); {
		case err == nil:
			base = snap
		case !errors.Is(err, forge.ErrNotFound):
			return err
		}
	}
	b := &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Owner: e.owner()}
	var drafts []eventlog.Draft
	now := e.clock.Now()
	for _, m := range msgs {
		subtasks := false
		for _, p := range m.Parts {
			switch {
			case p.Type == forge.PartSubtask && p.State == forge.StateRunning:
				// The child thread died with the turn.
				var d forge.SubtaskData
				_ = json.Unmarshal(p.Data, &d)
				d.Status = forge.TurnCancelled
				p.State, p.Data = forge.StateCompleted, mustJSON(d)
				subtasks = true
			case (p.Type == forge.PartText || p.Type == forge.PartReasoning) && p.State == forge.StateStreaming:
				p.State = forge.StateInterrupted
				drafts = append(drafts, eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: t.ID, ThreadID: m.ThreadID, Data: p.Clone()})
			case p.Type == forge.PartTool && (p.State == forge.StatePending || p.State == forge.StateRunning):
				msg := "abandoned: the server stopped before this call finished"
				if p.State == forge.StateRunning {
					msg = "in_doubt: the server stopped while this call ran; it may have had its effect"
				}
				p.State = forge.StateError
				p.Error = &msg
				drafts = append(drafts, eventlog.Draft{Type: forge.EventToolResponse, ID: p.ID, TurnID: t.ID, ThreadID: m.ThreadID, Data: p.Clone()})
			default:
				continue
			}
			p.UpdatedAt = now
			b.Parts = append(b.Parts, p)
		}
		if m.Role == forge.RoleAssistant && m.Finish == "" {
			m.Finish = forge.FinishError
			env := *m
			env.Parts = nil
			b.Messages = append(b.Messages, &env)
		}
		if subtasks {
			drafts = append(drafts, eventlog.Draft{Type: forge.EventMessageUpdated, ID: m.ID, TurnID: t.ID, ThreadID: m.ThreadID, Data: m.Clone()})
		}
	}
	reason := forge.CancelAbandoned
	t.Status = forge.TurnCancelled
	t.CancelReason = &reason
	t.EndedAt = &now
	t.RequiredActions = []forge.RequiredAction{}
	final := *t
	drafts = append(drafts, eventlog.Draft{Type: forge.EventTurnDone, ID: t.ID, TurnID: t.ID, Data: &final, OnSeq: func(seq int64) {
		final.LastSeq, t.LastSeq = seq, seq
	}})
	b.Turn = t
	b.Snapshot = carriedSnapshot(t.ID, mainThread, base)
	if _, err = e.events.Commit(ctx, b, drafts...); err != nil {
		return err
	}
	e.log.Warn("turn abandoned: its executor stopped; ended cancelled", "session_id", t.SessionID, "turn_id", t.ID,
		"reason", reason)
	e.observeRecovered(t)
	return nil
}

// carriedSnapshot is the snapshot of turn turnID that ended without
// writing its own state (abandoned): the base turn's, with the main thread
// finished and waiting for nothing (the turn has no required actions).
// Capability states, child thread states and extra state (MCP info) carry
// over, so the next turn starts where the base left.
func carriedSnapshot(turnID, mainThread string, base *forge.Snapshot) *forge.Snapshot {
	snap := &forge.Snapshot{TurnID: turnID, Threads: maps.Clone(base.Threads), ContextTokens: base.ContextTokens,
		Capabilities: maps.Clone(base.Capabilities), Extra: maps.Clone(base.Extra)}
	if snap.Threads == nil {
		snap.Threads = map[string]forge.ThreadState{}
	}
	if st, ok := snap.Threads[mainThread]; ok {
		st.State, st.OpenCall = forge.ThreadFinished, nil
		snap.Threads[mainThread] = st
	}
	return snap
}
