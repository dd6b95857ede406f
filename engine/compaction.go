package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/modelview"
)

// Compaction (DESIGN.md "filterCompacted"). Before a model step, when the
// estimated context crosses the agent's threshold, or when the model
// refuses a request as too long (then the step is retried once), the turn
// inserts a user message carrying a compaction part that points at the
// first message of a verbatim tail, asks the same model (no tools) for a
// summary of everything before the tail, stores it as an assistant message
// with Summary set, emits session.compacted, and goes on with the model view
// [compaction request, summary, tail, ...].

// ContextWindows is the optional interface of forge.Models that tells a
// model's context window (provider.Registry implements it).
type ContextWindows interface {
	ContextWindow(model string) (int64, bool)
}

// Compaction reasons, recorded in the compaction part's data.
const (
	compactThreshold = "threshold"
	compactOverflow  = "overflow"
	compactManual    = "manual"
)

const compactionRequest = `Context compaction: summarize the conversation above this message so that the work can continue from the summary alone. The most recent messages follow the summary verbatim, so concentrate on what came before them.`

const summarySystem = `You write the summary that replaces the earlier part of a conversation between a user and an AI agent once it no longer fits the context window. The agent will continue from your summary and the most recent messages, which it keeps verbatim. Write these sections, in this order:

## Objective
What the user wants overall, in their terms.

## Important details
Constraints, decisions, preferences, answers already given, and facts learned (including from tool results) that the rest of the work needs.

## Work state
What has been done, what worked, what failed and why.

## Next step
What the agent was about to do.

## Files and identifiers
Every file path, URL, id, name, command and number that matters, copied exactly.

Be complete and precise, not chatty. Do not call tools.`

// contextEstimate is what the next model call is expected to take: the last
// reported usage plus an estimate of what was added since, or, without a
// report, an estimate of the whole request. The memo keeps both from
// costing the length of the history.
func (th *thread) contextEstimate() int64 {
	used, at := th.memo.ReportedContext(th.history)
	if at >= 0 {
		return used + th.memo.TokensAfter(th.history, at)
	}
	return modelview.PromptTokens(th.agent.Instructions, th.toolDefs()) + th.memo.TokensAfter(th.history, -1)
}

// contextWindow is the agent's compaction.context_window, else the model's.
func (th *thread) contextWindow() (int64, bool) {
	if w := th.agent.Compaction.ContextWindow; w != nil && *w > 0 {
		return *w, true
	}
	if cw, ok := th.x.e.models.(ContextWindows); ok {
		return cw.ContextWindow(th.agent.Model)
	}
	return 0, false
}

func (th *thread) compactionEnabled() bool {
	if th.x.e.kind(th.x.session).readsWhole() {
		return false // never in place: the kind's owner replaces it (the forum swaps monologues)
	}
	return th.agent.Compaction.Enabled == nil || *th.agent.Compaction.Enabled
}

// overThreshold reports whether the next step's context crosses
// threshold × window.
func (th *thread) overThreshold() bool {
	window, ok := th.contextWindow()
	if !ok {
		return false
	}
	threshold := forge.DefaultThreshold
	if t := th.agent.Compaction.Threshold; t != nil {
		threshold = *t
	}
	return float64(th.contextEstimate()) >= threshold*float64(window)
}

func isOverflow(err error) bool {
	var me *forge.ModelError
	return errors.As(err, &me) && me.ContextOverflow
}

// tailStart picks the first message of the verbatim tail
// (modelview.TailStart), within a quarter of the context window; -1 when
// there is no user message to start from.
func (th *thread) tailStart(minimal bool) int {
	window, ok := th.contextWindow()
	if !ok {
		window = 0
	}
	return modelview.TailStart(th.history, window, minimal)
}

// errSummaryOverflow marks a summary call the model refused as too long.
var errSummaryOverflow = errors.New("the conversation does not fit the model's context window, even to summarize it")

// compact runs one compaction. It reports false when there is nothing to
// summarize (no history before the tail). On success th.history is the new
// model view. A summary call refused as too long returns an error wrapping
// errSummaryOverflow.
func (th *thread) compact(reason string) (*forge.Message, error) {
	tail := th.tailStart(reason == compactManual)
	if tail <= 0 {
		return nil, nil
	}
	before := th.history[:tail:tail]
	kept := th.history[tail:]

	model, modelID, err := th.x.e.models.Resolve(th.agent.Model)
	if err != nil {
		return nil, &forge.ModelError{Provider: th.agent.Model, Message: err.Error()}
	}

	req := th.newMessage(forge.RoleUser)
	cp := th.newPart(req, forge.PartCompaction)
	cp.State = forge.StateCompleted
	cp.Data = mustJSON(forge.CompactionData{TailStartID: kept[0].ID, Auto: reason != compactManual, Reason: reason})
	tp := th.newPart(req, forge.PartText)
	tp.Text, tp.State = compactionRequest, forge.StateCompleted
	req.Parts = []*forge.Part{cp, tp}
	th.putPart(cp)
	th.putPart(tp)
	th.messageEvent(forge.EventMessageCreated, req)
	th.history = append(th.history, req)

	sum := th.newMessage(forge.RoleAssistant)
	sum.Model = th.agent.Model
	sum.Summary = true
	th.openStep(sum, th.iterations)
	th.history = append(th.history, sum)
	msgs := append(modelview.Convert(before), forge.ModelMessage{Role: forge.RoleUser,
		Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: compactionRequest}}})
	mreq := &forge.ModelRequest{
		Model:    modelID,
		System:   summarySystem,
		Messages: msgs,
		Params:   th.agent.ModelParams,
	}
	if err := th.stream(sum, model, mreq, th.iterations, nil); err != nil {
		if isOverflow(err) {
			return nil, fmt.Errorf("%w: %w", errSummaryOverflow, err)
		}
		return nil, err
	}
	view := make([]*forge.Message, 0, len(kept)+2)
	view = append(view, req, sum)
	th.history = append(view, kept...)
	th.event(forge.EventSessionCompacted, sum.ID, forge.CompactionBoundary{
		RequestID: req.ID, SummaryID: sum.ID, TailStartID: kept[0].ID,
	})
	return sum, nil
}

// compactFailure is the outcome of a compaction that failed.
func (th *thread) compactFailure(err error) outcome {
	if th.x.cancelled() {
		return th.cancelledOutcome()
	}
	if errors.Is(err, errSummaryOverflow) {
		return outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: forge.CodeContextOverflow, Message: err.Error()}}
	}
	return th.failure(err)
}

// modelView reads the main thread's model view along the branch ending at
// tip from the store: the newest boundary, then the messages from its
// tail's start. Its cost is what lies after the boundary.
func (e *Engine) modelView(ctx context.Context, tenant string, sess *forge.Session, tip string) ([]*forge.Message, error) {
	q := forge.MessageQuery{SessionID: sess.ID, TipTurnID: tip, ThreadID: sess.MainThreadID}
	var b *forge.CompactionBoundary
	if tip != "" || sess.TipTurnID != nil {
		// (A session that has never had a turn has no compaction: one
		// is a turn. Its view is the messages imported into it.)
		var err error
		if b, err = e.store.LatestCompaction(ctx, tenant, q); err != nil {
			return nil, fmt.Errorf("load history: %w", err)
		}
	}
	return e.viewFrom(ctx, tenant, q, b)
}

// turnHistoryPage is the first page of a history read for a turn
// (historyForTurn): all of a short session's, while a compacted session,
// whose view is then read from its boundary, wastes at most this many
// messages.
const turnHistoryPage = 200

// ancestorHops is how many steps back along the base turn's chain a turn
// looks for a history cached here: with three replicas taking turns, the
// last one this replica ran or read is two steps back.
const ancestorHops = 2

// historyForTurn returns what loadHistory does for base and base's
// snapshot (nil: none), for a turn beginning from a history not cached
// here for base (another replica wrote the session last, or the cache let
// it go). When a turn of base's chain at most ancestorHops back has its
// history cached here (it ended here, or a turn here read it), that is the
// view's start and only the messages after it are read (unless a
// compaction came after it); otherwise the whole view is. Either way the compaction boundary, a page and the
// snapshot come in one store round trip (forge.MessageStore.TurnHistory).
func (e *Engine) historyForTurn(ctx context.Context, tenant string, sess *forge.Session, base *forge.Turn) ([]*forge.Message, *forge.Snapshot, error) {
	q := forge.MessageQuery{SessionID: sess.ID, TipTurnID: base.ID, ThreadID: sess.MainThreadID}
	if prefix := e.cachedAncestor(ctx, tenant, sess, base); len(prefix) > 0 && newestLast(prefix) {
		last := prefix[len(prefix)-1].ID
		after := q
		after.Cursor, after.Limit = last, turnHistoryPage
		h, err := e.store.TurnHistory(ctx, tenant, after)
		if err != nil {
			return nil, nil, fmt.Errorf("load history: %w", err)
		}
		if h.Boundary == nil || h.Boundary.SummaryID <= last {
			// No compaction since: the view goes on in id order.
			out, err := e.restOfBranch(ctx, tenant, q, append(prefix, h.Messages...), h.Next)
			return out, h.Snapshot, err
		}
	}
	first := q
	first.Limit = turnHistoryPage
	h, err := e.store.TurnHistory(ctx, tenant, first)
	if err != nil {
		return nil, nil, fmt.Errorf("load history: %w", err)
	}
	if h.Boundary != nil {
		view, err := e.viewFrom(ctx, tenant, q, h.Boundary)
		return view, h.Snapshot, err
	}
	out, err := e.restOfBranch(ctx, tenant, q, h.Messages, h.Next)
	return out, h.Snapshot, err
}

// newestLast reports whether the last of ms has the highest id, so that
// what came after ms is the branch after that id. A compacted view that
// ends with its tail (nothing after the summary yet) does not.
func newestLast(ms []*forge.Message) bool {
	last := ms[len(ms)-1].ID
	for _, m := range ms {
		if m.ID > last {
			return false
		}
	}
	return true
}

// restOfBranch appends to out the pages of q's branch after cursor ("":
// none are left).
func (e *Engine) restOfBranch(ctx context.Context, tenant string, q forge.MessageQuery, out []*forge.Message, cursor string) ([]*forge.Message, error) {
	if cursor == "" {
		return out, nil
	}
	q.Cursor = cursor
	return e.branchPages(ctx, tenant, q, out)
}

// branchPages appends to out every page of q's branch from q's cursor on,
// 1000 messages a page.
func (e *Engine) branchPages(ctx context.Context, tenant string, q forge.MessageQuery, out []*forge.Message) ([]*forge.Message, error) {
	q.Limit = 1000
	for {
		page, next, err := e.store.ListMessages(ctx, tenant, q)
		if err != nil {
			return nil, fmt.Errorf("load history: %w", err)
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		q.Cursor = next
	}
}

// cachedAncestor returns the history cached here for the nearest turn of
// base's chain at most ancestorHops back (the caller may append to it),
// or nil. Each step back past the first costs a read of a turn, so it
// looks only when the session has histories cached here.
func (e *Engine) cachedAncestor(ctx context.Context, tenant string, sess *forge.Session, base *forge.Turn) []*forge.Message {
	if e.histories.session(sess.ID) == nil {
		return nil
	}
	prev := base.PreviousTurnID
	for hop := 0; prev != nil && hop < ancestorHops; hop++ {
		if msgs, _, _, ok := e.histories.get(sess.ID, *prev); ok {
			return msgs
		}
		if hop+1 == ancestorHops {
			break
		}
		t, err := e.store.GetTurn(ctx, tenant, sess.ID, *prev)
		if err != nil {
			return nil // the whole view is read, and reports what is wrong
		}
		prev = t.PreviousTurnID
	}
	return nil
}

// viewFrom reads the view of q's branch given its newest boundary b (nil:
// none).
func (e *Engine) viewFrom(ctx context.Context, tenant string, q forge.MessageQuery, b *forge.CompactionBoundary) ([]*forge.Message, error) {
	if b != nil {
		q.From = b.TailStartID
		if b.RequestID < q.From {
			q.From = b.RequestID
		}
	}
	out, err := e.branchPages(ctx, tenant, q, nil)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return out, nil
	}
	var req, sum *forge.Message
	for _, m := range out {
		switch m.ID {
		case b.RequestID:
			req = m
		case b.SummaryID:
			sum = m
		}
	}
	if req == nil || sum == nil {
		return nil, fmt.Errorf("load history: compaction boundary %s/%s not on the branch", b.RequestID, b.SummaryID)
	}
	return modelview.Arrange(out, req, sum), nil
}
