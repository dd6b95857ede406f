package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forge-runtime/forge"
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

// charsPerToken is the local estimate of text not yet counted by a model.
const charsPerToken = 4

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

// estimateTokens is a cheap local estimate of what msgs cost the model:
// about one token per 4 characters of text, arguments and results.
func estimateTokens(msgs ...*forge.Message) int64 {
	var chars int64
	for _, m := range msgs {
		chars += 16 // role and framing
		for _, p := range m.Parts {
			switch p.Type {
			case forge.PartText, forge.PartReasoning:
				chars += int64(len(p.Text))
			case forge.PartTool:
				chars += int64(len(p.Tool) + len(p.Arguments) + 32)
				if p.Output != nil {
					chars += int64(len(*p.Output))
				}
				if p.Error != nil {
					chars += int64(len(*p.Error))
				}
			}
		}
	}
	return (chars + charsPerToken - 1) / charsPerToken
}

// estimateRequestTokens is the same estimate for a whole model request:
// system prompt, tool definitions and messages.
func estimateRequestTokens(req *forge.ModelRequest) int64 {
	chars := int64(len(req.System))
	for _, d := range req.Tools {
		chars += int64(len(d.Name) + len(d.Description) + len(d.InputSchema))
	}
	for _, m := range req.Messages {
		chars += 16 // role and framing
		for _, p := range m.Parts {
			chars += int64(len(p.Text) + len(p.Name) + len(p.Arguments) + len(p.Output))
			if p.Type == forge.ModelPartToolCall || p.Type == forge.ModelPartToolResult {
				chars += 32
			}
		}
	}
	return (chars + charsPerToken - 1) / charsPerToken
}

// latestSummary is the index of the newest summary in history, -1 if none.
func latestSummary(history []*forge.Message) int {
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Summary {
			return i
		}
	}
	return -1
}

// reportedContext is the context size the model last reported (input plus
// output of the newest main-thread call after the latest summary) and the
// index of that message; -1 when no usable report exists. Messages of a
// verbatim tail predate the summary (smaller ids): their usage describes
// the context before compaction and is not used.
func reportedContext(history []*forge.Message) (int64, int) {
	s := latestSummary(history)
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		if m.Role != forge.RoleAssistant || m.Summary || m.Usage == nil || m.Finish == forge.FinishError {
			continue
		}
		if s >= 0 && m.ID < history[s].ID {
			continue
		}
		if u := m.Usage.InputTokens + m.Usage.OutputTokens; u > 0 {
			return u, i
		}
	}
	return 0, -1
}

// contextEstimate is what the next model call is expected to take: the last
// reported usage plus an estimate of what was added since, or, without a
// report, an estimate of the whole request.
func (th *thread) contextEstimate() int64 {
	used, at := reportedContext(th.history)
	if at >= 0 {
		return used + estimateTokens(th.history[at+1:]...)
	}
	est := int64(len(th.agent.Instructions)+charsPerToken-1) / charsPerToken
	for _, d := range th.toolDefs() {
		est += int64(len(d.Name)+len(d.Description)+len(d.InputSchema)) / charsPerToken
	}
	return est + estimateTokens(th.history...)
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
	if th.x.session.Kind == forge.KindMonologue {
		return false // never in place: the forum layer swaps monologues
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

// tailStart picks the first message of the verbatim tail: the newest user
// message (always kept, with everything after it), extended back to
// earlier user messages while the tail stays within a quarter of the
// window, unless minimal (a compaction asked for through POST /compact
// keeps only the newest exchange). -1 when there is no user message to
// start from.
func (th *thread) tailStart(minimal bool) int {
	h := th.history
	isStart := func(m *forge.Message) bool {
		if m.Role != forge.RoleUser {
			return false
		}
		for _, p := range m.Parts {
			if p.Type == forge.PartCompaction {
				return false
			}
		}
		return true
	}
	start := -1
	for i := len(h) - 1; i >= 0; i-- {
		if isStart(h[i]) {
			start = i
			break
		}
	}
	if start < 0 {
		return -1
	}
	window, ok := th.contextWindow()
	if !ok || minimal {
		return start
	}
	budget := window / 4
	used := estimateTokens(h[start:]...)
	for i := start - 1; i >= 0; i-- {
		used += estimateTokens(h[i])
		if used > budget {
			break
		}
		if isStart(h[i]) {
			start = i
		}
	}
	return start
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
	msgs := append(toModelMessages(before), forge.ModelMessage{Role: forge.RoleUser,
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

// filterCompacted is the model view of a thread's branch, oldest first
// (DESIGN.md): scanning newest to oldest, at the first successful summary
// whose parent user message carries a compaction part, keep the verbatim
// tail that part points to and stop; the result is [compaction request,
// summary, tail, everything after]. Without a boundary it is msgs.
func filterCompacted(msgs []*forge.Message) []*forge.Message {
	byID := make(map[string]int, len(msgs))
	for i, m := range msgs {
		byID[m.ID] = i
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		s := msgs[i]
		if !s.Summary || s.Role != forge.RoleAssistant || s.Finish == "" || s.Finish == forge.FinishError || s.ParentID == nil {
			continue
		}
		ri, ok := byID[*s.ParentID]
		if !ok || msgs[ri].Role != forge.RoleUser {
			continue
		}
		cd, ok := compactionData(msgs[ri])
		if !ok {
			continue
		}
		ti, ok := byID[cd.TailStartID]
		if !ok || cd.TailStartID == "" {
			ti = ri
		}
		return arrangeView(msgs[ti:], msgs[ri], s)
	}
	return msgs
}

// arrangeView puts request and summary first, then the rest of from in
// order.
func arrangeView(from []*forge.Message, request, summary *forge.Message) []*forge.Message {
	out := make([]*forge.Message, 0, len(from)+2)
	out = append(out, request, summary)
	for _, m := range from {
		if m.ID != request.ID && m.ID != summary.ID {
			out = append(out, m)
		}
	}
	return out
}

func compactionData(m *forge.Message) (forge.CompactionData, bool) {
	for _, p := range m.Parts {
		if p.Type == forge.PartCompaction {
			var cd forge.CompactionData
			if len(p.Data) > 0 {
				if err := json.Unmarshal(p.Data, &cd); err != nil {
					return cd, false
				}
			}
			return cd, true
		}
	}
	return forge.CompactionData{}, false
}

// modelView reads the main thread's model view along the branch ending at
// tip from the store: the newest boundary, then the messages from its
// tail's start. Its cost is what lies after the boundary.
func (e *Engine) modelView(ctx context.Context, tenant string, sess *forge.Session, tip string) ([]*forge.Message, error) {
	q := forge.MessageQuery{SessionID: sess.ID, TipTurnID: tip, ThreadID: sess.MainThreadID}
	b, err := e.store.LatestCompaction(ctx, tenant, q)
	if err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	return e.viewFrom(ctx, tenant, q, b)
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
	q.Limit = 1000
	var out []*forge.Message
	for {
		page, next, err := e.store.ListMessages(ctx, tenant, q)
		if err != nil {
			return nil, fmt.Errorf("load history: %w", err)
		}
		out = append(out, page...)
		if next == "" {
			break
		}
		q.Cursor = next
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
	return arrangeView(out, req, sum), nil
}

// strayRequest reports whether history[i] is a compaction request not
// answered by a successful summary (its compaction failed or was cut off):
// the model is not sent it.
func strayRequest(history []*forge.Message, i int) bool {
	if _, ok := compactionData(history[i]); !ok {
		return false
	}
	if i+1 < len(history) {
		s := history[i+1]
		if s.Summary && s.Finish != "" && s.Finish != forge.FinishError && s.ParentID != nil && *s.ParentID == history[i].ID {
			return false
		}
	}
	return true
}
