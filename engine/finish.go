package engine

import (
	"encoding/json"
	"errors"

	"github.com/forge-runtime/forge"
)

// finish makes the turn's terminal write: closing events of anything left
// open, action.required, turn.done, the turn row and its snapshot, in one
// transaction. The store fences it: if the turn already ended, this loses.
func (r *run) finish(out outcome) {
	// Anything still streaming or running was cut off.
	r.mu.Lock()
	left := make([]*streamingPart, 0, len(r.streaming))
	for _, sp := range r.streaming {
		left = append(left, sp)
	}
	r.mu.Unlock()
	for _, sp := range left {
		r.endStreaming(sp, forge.StateInterrupted)
		r.putPart(sp.part)
		r.event(forge.EventModelMessage, sp.part.ID, r.session.MainThreadID, sp.part.Clone())
	}

	now := r.e.clock.Now()
	t := r.turn
	t.Status = out.status
	t.Error = out.err
	t.Output = out.output
	t.EndedAt = &now
	t.RequiredActions = out.actions
	if t.RequiredActions == nil {
		t.RequiredActions = []forge.RequiredAction{}
	}
	if out.status == forge.TurnCancelled {
		reason := out.cancelReason
		t.CancelReason = &reason
		r.mu.Lock()
		if text := r.reasonText; text != "" {
			t.CancelMessage = &text
		}
		r.mu.Unlock()
		if r.sandbox != nil {
			// A cancelled turn leaves nothing running in its sandbox.
			r.e.cfg.Sandboxes.Stop(r.session.ID)
			r.event(forge.EventSandboxStopped, r.session.ID, r.session.MainThreadID, map[string]any{"reason": reason})
		}
	}
	state := forge.ThreadFinished
	var openCalls []string
	if len(out.actions) > 0 {
		state = forge.ThreadUserInputRequired
		r.event(forge.EventActionRequired, t.ID, r.session.MainThreadID, map[string]any{"required_actions": out.actions})
		for _, a := range out.actions {
			openCalls = append(openCalls, a.CallID)
		}
	}
	snap := &forge.Snapshot{
		TurnID: t.ID,
		Threads: map[string]forge.ThreadState{r.session.MainThreadID: {
			ID: r.session.MainThreadID, Agent: r.agent.Name, State: state, OpenCall: openCalls,
		}},
		ContextTokens: r.contextTokens(),
	}
	for id, st := range r.children {
		snap.Threads[id] = st
	}
	snap.Capabilities = r.capabilityStates()
	if len(r.mcpInfo) > 0 {
		snap.Extra = map[string]json.RawMessage{"mcp": mustJSON(r.mcpInfo)}
	}
	final := *t
	r.pend = append(r.pend, pendingEvent{typ: forge.EventTurnDone, id: t.ID, turnID: t.ID, data: func(seq int64) any {
		final.LastSeq = seq
		t.LastSeq = seq
		return &final
	}})
	if err := r.flush(snap); err != nil {
		if errors.Is(err, forge.ErrTurnEnded) {
			r.e.log.Info("turn already ended elsewhere; terminal write dropped", "turn", t.ID)
			return
		}
		r.e.log.Error("terminal write failed", "turn", t.ID, "err", err)
	}
}

// contextTokens is the main thread's context size after the last step: the
// last model call's input plus its output; after a compaction with no call
// since, the local estimate of the compacted view.
func (r *run) contextTokens() int64 {
	if used, at := reportedContext(r.history); at >= 0 {
		return used
	}
	if latestSummary(r.history) >= 0 {
		return r.contextEstimate()
	}
	return 0
}
