package forum

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/modelview"
)

// maybeSwap replaces the stint's monologue when it has reached its
// agent's compaction threshold: the engine summarizes the old monologue
// (a compaction turn there), then a new monologue is seeded with the
// compaction request, the summary and the verbatim tail, and the stint's
// monologue_id moves to it in one transaction with
// agent.monologue.compacted on the forum. The worker holds the stint
// throughout, so no copy lands in the old monologue after the summary and
// the pending trigger carries over.
func (w *worker) maybeSwap(ctx context.Context) error {
	old := w.monologue()
	history, over, err := w.overThreshold(ctx, old)
	if err != nil || !over {
		return err
	}
	t, err := w.s.eng.StartTurn(ctx, w.stint.Tenant, old, engine.TurnRequest{Compact: true, Owner: true})
	if err != nil {
		return nil // e.g. a paused turn: no swap now, the turn still runs
	}
	if t, err = w.s.eng.WaitTurn(ctx, w.stint.Tenant, old, t.ID); err != nil {
		return err
	}
	if t.Status != forge.TurnDone {
		w.s.logger.Warn("forum: monologue summary failed; the monologue is kept", "monologue_id", old, "status", t.Status)
		return nil
	}
	turnMsgs, err := w.s.store.TurnMessages(ctx, w.stint.Tenant, t.ID)
	if err != nil {
		return err
	}
	var request, summary *forge.Message
	for _, m := range turnMsgs {
		switch {
		case m.Role == forge.RoleUser && hasCompaction(m):
			request = m
		case m.Role == forge.RoleAssistant && m.Summary:
			summary = m
		}
	}
	if request == nil || summary == nil {
		return nil
	}
	var cd forge.CompactionData
	for _, p := range request.Parts {
		if p.Type == forge.PartCompaction && len(p.Data) > 0 {
			_ = json.Unmarshal(p.Data, &cd)
		}
	}
	tail := []*forge.Message{}
	if i := slices.IndexFunc(history, func(m *forge.Message) bool { return m.ID == cd.TailStartID }); i >= 0 {
		tail = history[i:]
	}
	nm := w.s.newMonologue(w.stint.Tenant, w.stint.ForumID, w.stint.ID, w.stint.Actor.Agent)
	through := w.lastCopy
	for _, m := range history {
		if src, ok := sourceOf(m); ok {
			through = max(through, src.SourceMessageID)
		}
	}
	nm.Metadata, _ = json.Marshal(map[string]string{"forum_id": w.stint.ForumID, "participant_id": w.stint.ID, "copied_through": through})
	seed := make([]*forge.Message, 0, len(tail)+2)
	newReq := w.reseed(request, nm)
	newSum := w.reseed(summary, nm)
	newSum.ParentID = &newReq.ID
	seed = append(seed, newReq, newSum)
	for _, m := range tail {
		seed = append(seed, w.reseed(m, nm))
	}
	swap := &forge.MonologueSwap{Tenant: w.stint.Tenant, ForumID: w.stint.ForumID, ParticipantID: w.stint.ID,
		OldID: old, New: nm, Seed: seed}
	if err := w.room.swapped(ctx, swap); err != nil {
		return err
	}
	stint := *w.stint
	stint.Metadata.MonologueID = nm.ID
	w.stint = &stint
	return nil
}

// reseed copies a message into the new monologue as a turnless message
// with new ids; a copy keeps its origin, so a retried delivery after the
// swap still copies nothing twice.
func (w *worker) reseed(m *forge.Message, into *forge.Session) *forge.Message {
	c := m.Clone()
	c.ID = w.s.ids.New(forge.PrefixMessage)
	c.SessionID, c.TurnID, c.ThreadID, c.ParentID = into.ID, "", into.MainThreadID, nil
	if len(c.Metadata) > 0 {
		var meta map[string]any
		if json.Unmarshal(c.Metadata, &meta) == nil && meta["source_message_id"] != nil {
			meta["seeded_from"] = m.SessionID
			if b, err := json.Marshal(meta); err == nil {
				c.Metadata = b
			}
		}
	}
	for _, p := range c.Parts {
		p.ID = w.s.ids.New(forge.PrefixPart)
		p.MessageID, p.SessionID, p.TurnID = c.ID, into.ID, ""
	}
	return c
}

func hasCompaction(m *forge.Message) bool {
	for _, p := range m.Parts {
		if p.Type == forge.PartCompaction {
			return true
		}
	}
	return false
}

// overThreshold reads the monologue's history in the model's order and
// reports whether it has reached the agent's compaction threshold.
func (w *worker) overThreshold(ctx context.Context, mono string) ([]*forge.Message, bool, error) {
	agent, err := w.s.store.GetAgent(ctx, w.stint.Tenant, w.stint.Actor.Agent)
	if err != nil {
		return nil, false, nil // a deleted agent's monologue is kept as it is
	}
	if agent.Compaction.Enabled != nil && !*agent.Compaction.Enabled {
		return nil, false, nil
	}
	var window int64
	if cw := agent.Compaction.ContextWindow; cw != nil && *cw > 0 {
		window = *cw
	} else if m, ok := w.s.models.(engine.ContextWindows); ok {
		window, _ = m.ContextWindow(agent.Model)
	}
	if window <= 0 {
		return nil, false, nil
	}
	threshold := forge.DefaultThreshold
	if t := agent.Compaction.Threshold; t != nil {
		threshold = *t
	}
	sess, err := w.s.session(ctx, w.stint.Tenant, mono)
	if err != nil {
		return nil, false, err
	}
	q := forge.MessageQuery{SessionID: mono, ThreadID: sess.MainThreadID, ListOptions: forge.ListOptions{Limit: 1000}}
	if sess.TipTurnID != nil {
		q.TipTurnID = *sess.TipTurnID
	}
	var history []*forge.Message
	for {
		page, next, err := w.s.store.ListMessages(ctx, w.stint.Tenant, q)
		if err != nil {
			return nil, false, err
		}
		history = append(history, page...)
		if next == "" {
			break
		}
		q.Cursor = next
	}
	// The engine's order and estimate of what the next monologue turn
	// sends (without tool definitions, which the forum does not see).
	history = modelview.MonologueOrder(history)
	est := modelview.PromptTokens(agent.Instructions, nil) + modelview.EstimateTokens(history...)
	return history, float64(est) >= threshold*float64(window), nil
}
