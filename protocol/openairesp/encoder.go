package openairesp

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

// encoder turns the projected steps of one turn into Responses stream
// events and keeps the response object they describe.
//
// Sequence numbers (docs/decisions.md): the events of a step with Forge
// seq S are numbered from (S-S0)*seqScale on, S0 being the seq of the
// turn's turn.created, each after the previous one,
// except the text and reasoning deltas of a part, which are numbered
// base+end, where base is the number of the part's content_part.added
// and end the byte offset within the part where the delta ends. The
// part's closing events follow the larger of base+len(text) and their own
// step's S*seqScale. So every number is a function of the stored log alone
// (the deltas' chunking does not matter), a live stream and a replay of
// the finished turn agree, a resume after a delta's number knows how much
// of the part the client holds, and the events that recovery writes after
// a crash (above every seq a client saw) are numbered above every number
// a client saw, even when the recovered text is shorter than what was
// streamed live.
type encoder struct {
	resp Response
	seq  int64 // the last number assigned; -1 before the first
	// origin is the Forge seq of the turn's first step (turn.created):
	// numbers count seqs from it.
	origin int64
	// after is the client's starting_after: events numbered at or below it
	// are not written (a delta straddling it is cut); -1 for none.
	after int64
	items map[string]*outItem // by part id (text, reasoning) or call id
	// lastFinish is the finish reason of the main thread's last step.
	lastFinish string
	// write receives each event to send, encoded; nil to only build the
	// response object.
	write func(typ string, data []byte)
	err   error // the first encoding error
}

type outItem struct {
	index int
	base  int64
	typ   string
	item  any
}

func newEncoder(resp Response, after int64, write func(typ string, data []byte)) *encoder {
	if resp.Output == nil {
		resp.Output = []any{}
	}
	return &encoder{resp: resp, seq: -1, after: after, items: map[string]*outItem{}, write: write}
}

// seqScale spaces the numbers of consecutive Forge seqs: a part's deltas
// fit between its start's seq and the next, as long as no single delta
// exceeds seqScale bytes. Numbers stay exact in a JavaScript client (below
// 2^53) for turns of up to 2^33 seqs.
const seqScale = 1 << 20

func intp(i int) *int          { return &i }
func strp(s string) *string    { return &s }
func emptyLogprobs() *[]any    { l := []any{}; return &l }
func zero() *int               { return intp(0) }
func (e *encoder) next() int64 { e.seq++; return e.seq }

// emit numbers ev with the next number and sends it.
func (e *encoder) emit(ev streamEvent) { e.send(e.next(), ev) }

func (e *encoder) send(n int64, ev streamEvent) {
	if e.write == nil || n <= e.after {
		return
	}
	ev.SequenceNumber = n
	data, err := json.Marshal(ev)
	if err != nil {
		if e.err == nil {
			e.err = err
		}
		return
	}
	e.write(ev.Type, data)
}

// snapshot is the response as it is now, for an event to carry.
func (e *encoder) snapshot() *Response {
	r := e.resp
	return &r
}

// step applies one projected step.
func (e *encoder) step(s protocol.Step) {
	if s.Kind != protocol.PartDelta && s.Seq > 0 {
		// Seqs count from the turn's first (turn.created: the stream
		// starts at 0, as OpenAI's does). A delta's number depends on
		// its offset only: a replay has no deltas of its own to take a
		// seq from.
		if e.origin == 0 {
			e.origin = s.Seq
		}
		e.seq = max(e.seq, (s.Seq-e.origin)*seqScale-1)
	}
	switch s.Kind {
	case protocol.TurnStarted:
		e.resp.Status = "in_progress"
		e.emit(streamEvent{Type: "response.created", Response: e.snapshot()})
		e.emit(streamEvent{Type: "response.in_progress", Response: e.snapshot()})
	case protocol.StepFinished:
		e.lastFinish = s.Finish
	case protocol.PartStarted:
		e.partStarted(s.Part)
	case protocol.PartDelta:
		e.partDelta(s)
	case protocol.PartDone:
		e.partDone(s.Part)
	case protocol.ToolStarted:
		e.toolStarted(s)
	case protocol.ToolDone:
		e.toolDone(s.Part)
	case protocol.ActionRequired:
		e.actionRequired(s)
	case protocol.TurnDone:
		e.turnDone(s.Turn)
	}
}

func (e *encoder) add(key, typ string, item any) *outItem {
	it := &outItem{index: len(e.resp.Output), typ: typ, item: item}
	e.items[key] = it
	e.resp.Output = append(e.resp.Output, item)
	// The item as it is now: later changes must not show in this event.
	raw, err := json.Marshal(item)
	if err != nil && e.err == nil {
		e.err = err
	}
	e.emit(streamEvent{Type: "response.output_item.added", OutputIndex: intp(it.index), Item: json.RawMessage(raw)})
	return it
}

func (e *encoder) partStarted(p *forge.Part) {
	if p.Type == forge.PartReasoning {
		id := itemID("rs", e.resp.ID, p.ID)
		item := &reasoningItem{Type: itemReasoning, ID: id, Status: "in_progress", Summary: []*reasoningText{}, Content: []*reasoningText{}}
		it := e.add(p.ID, itemReasoning, item)
		content := &reasoningText{Type: "reasoning_text"}
		item.Content = append(item.Content, content)
		e.emit(streamEvent{Type: "response.content_part.added", ItemID: id, OutputIndex: intp(it.index), ContentIndex: zero(),
			Part: reasoningText{Type: "reasoning_text"}})
		it.base = e.seq
		return
	}
	id := itemID("msg", e.resp.ID, p.ID)
	item := &messageItem{Type: itemMessage, ID: id, Status: "in_progress", Role: "assistant", Content: []*outputText{}}
	it := e.add(p.ID, itemMessage, item)
	content := &outputText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}
	item.Content = append(item.Content, content)
	e.emit(streamEvent{Type: "response.content_part.added", ItemID: id, OutputIndex: intp(it.index), ContentIndex: zero(),
		Part: outputText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}})
	it.base = e.seq
}

func (e *encoder) partDelta(s protocol.Step) {
	it := e.items[s.PartID]
	if it == nil {
		return
	}
	end := it.base + int64(s.Offset+len(s.Text))
	e.seq = max(e.seq, end)
	text := s.Text
	if e.after >= it.base+int64(s.Offset) {
		text = protocol.TrimDelta(text, s.Offset, int(e.after-it.base))
	}
	switch item := it.item.(type) {
	case *messageItem:
		item.Content[0].Text += s.Text
		e.send(end, streamEvent{Type: "response.output_text.delta", ItemID: item.ID, OutputIndex: intp(it.index),
			ContentIndex: zero(), Delta: &text, Logprobs: emptyLogprobs()})
	case *reasoningItem:
		item.Content[0].Text += s.Text
		e.send(end, streamEvent{Type: "response.reasoning_text.delta", ItemID: item.ID, OutputIndex: intp(it.index),
			ContentIndex: zero(), Delta: &text})
	}
}

func partStatus(p *forge.Part) string {
	if p.State == forge.StateCompleted {
		return "completed"
	}
	return "incomplete"
}

func (e *encoder) partDone(p *forge.Part) {
	it := e.items[p.ID]
	if it == nil {
		return
	}
	e.seq = max(e.seq, it.base+int64(len(p.Text)))
	switch item := it.item.(type) {
	case *messageItem:
		c := item.Content[0]
		c.Text = p.Text
		e.emit(streamEvent{Type: "response.output_text.done", ItemID: item.ID, OutputIndex: intp(it.index), ContentIndex: zero(),
			Text: strp(p.Text), Logprobs: emptyLogprobs()})
		e.emit(streamEvent{Type: "response.content_part.done", ItemID: item.ID, OutputIndex: intp(it.index), ContentIndex: zero(), Part: c})
		item.Status = partStatus(p)
		e.emit(streamEvent{Type: "response.output_item.done", OutputIndex: intp(it.index), Item: item})
	case *reasoningItem:
		c := item.Content[0]
		c.Text = p.Text
		e.emit(streamEvent{Type: "response.reasoning_text.done", ItemID: item.ID, OutputIndex: intp(it.index), ContentIndex: zero(), Text: strp(p.Text)})
		e.emit(streamEvent{Type: "response.content_part.done", ItemID: item.ID, OutputIndex: intp(it.index), ContentIndex: zero(), Part: c})
		// The text again as the summary, for clients that show only
		// summaries (the AI SDK): in one delta when the part ends, so the
		// numbering of the part's live deltas stays as it is.
		if p.Text != "" {
			sum := &reasoningText{Type: "summary_text", Text: p.Text}
			e.emit(streamEvent{Type: "response.reasoning_summary_part.added", ItemID: item.ID, OutputIndex: intp(it.index), SummaryIndex: zero(),
				Part: reasoningText{Type: "summary_text"}})
			e.emit(streamEvent{Type: "response.reasoning_summary_text.delta", ItemID: item.ID, OutputIndex: intp(it.index), SummaryIndex: zero(), Delta: strp(p.Text)})
			e.emit(streamEvent{Type: "response.reasoning_summary_text.done", ItemID: item.ID, OutputIndex: intp(it.index), SummaryIndex: zero(), Text: strp(p.Text)})
			e.emit(streamEvent{Type: "response.reasoning_summary_part.done", ItemID: item.ID, OutputIndex: intp(it.index), SummaryIndex: zero(), Part: sum})
			item.Summary = []*reasoningText{sum}
		}
		item.Status = partStatus(p)
		e.emit(streamEvent{Type: "response.output_item.done", OutputIndex: intp(it.index), Item: item})
	}
}

func (e *encoder) toolStarted(s protocol.Step) {
	p := s.Part
	id := itemID("mcp", e.resp.ID, p.ID)
	item := &mcpCallItem{Type: itemMCPCall, ID: id, ServerLabel: serverLabel, Name: p.Tool, Status: "in_progress"}
	if s.Resolution == forge.InputApproval {
		item.ApprovalRequestID = strp(p.CallID)
	}
	it := e.add(p.CallID, itemMCPCall, item)
	args := arguments(p.Arguments)
	item.Arguments = args
	e.emit(streamEvent{Type: "response.mcp_call_arguments.delta", ItemID: id, OutputIndex: intp(it.index), Delta: strp(args)})
	e.emit(streamEvent{Type: "response.mcp_call_arguments.done", ItemID: id, OutputIndex: intp(it.index), Arguments: strp(args)})
	e.emit(streamEvent{Type: "response.mcp_call.in_progress", ItemID: id, OutputIndex: intp(it.index)})
}

func (e *encoder) toolDone(p *forge.Part) {
	it := e.items[p.CallID]
	if it == nil {
		return
	}
	item, ok := it.item.(*mcpCallItem)
	if !ok {
		return
	}
	if p.State == forge.StateCompleted {
		item.Status, item.Output = "completed", p.Output
		if item.Output == nil {
			item.Output = strp("")
		}
		e.emit(streamEvent{Type: "response.mcp_call.completed", ItemID: item.ID, OutputIndex: intp(it.index)})
	} else {
		item.Status, item.Error = "failed", p.Error
		if item.Error == nil {
			item.Error = strp("the call failed")
		}
		e.emit(streamEvent{Type: "response.mcp_call.failed", ItemID: item.ID, OutputIndex: intp(it.index)})
	}
	e.emit(streamEvent{Type: "response.output_item.done", OutputIndex: intp(it.index), Item: item})
}

func (e *encoder) actionRequired(s protocol.Step) {
	a := s.Action
	args := arguments(a.Arguments)
	switch a.Type {
	case forge.ActionApproval:
		item := &approvalRequestItem{Type: itemApprovalRequest, ID: a.CallID, ServerLabel: serverLabel, Name: a.Tool, Arguments: args}
		it := e.add(a.CallID, itemApprovalRequest, item)
		e.emit(streamEvent{Type: "response.output_item.done", OutputIndex: intp(it.index), Item: item})
	case forge.ActionClientTool:
		part := s.Part.ID
		if part == a.CallID || part == "" {
			part = a.CallID
		}
		id := itemID("fc", e.resp.ID, part)
		item := &functionCallItem{Type: itemFunctionCall, ID: id, CallID: a.CallID, Name: a.Tool, Status: "in_progress"}
		it := e.add(a.CallID, itemFunctionCall, item)
		item.Arguments = args
		e.emit(streamEvent{Type: "response.function_call_arguments.delta", ItemID: id, OutputIndex: intp(it.index), Delta: strp(args)})
		e.emit(streamEvent{Type: "response.function_call_arguments.done", ItemID: id, OutputIndex: intp(it.index), Arguments: strp(args), Name: a.Tool})
		item.Status = "completed"
		e.emit(streamEvent{Type: "response.output_item.done", OutputIndex: intp(it.index), Item: item})
	}
	// An auth action has no Responses equivalent: it is not shown.
}

// finish sets the response's terminal fields from the ended turn.
func (e *encoder) finish(t *forge.Turn) string {
	u := &Usage{InputTokens: t.Usage.InputTokens, OutputTokens: t.Usage.OutputTokens,
		TotalTokens: t.Usage.InputTokens + t.Usage.OutputTokens}
	u.InputTokensDetails.CachedTokens = t.Usage.CacheReadTokens
	u.OutputTokensDetails.ReasoningTokens = t.Usage.ReasoningTokens
	e.resp.Usage = u
	switch t.Status {
	case forge.TurnDone:
		switch e.lastFinish {
		case forge.FinishLength:
			e.resp.Status, e.resp.IncompleteDetails = "incomplete", &Incomplete{Reason: "max_output_tokens"}
			return "response.incomplete"
		case forge.FinishFilter:
			e.resp.Status, e.resp.IncompleteDetails = "incomplete", &Incomplete{Reason: "content_filter"}
			return "response.incomplete"
		}
		e.resp.Status = "completed"
		return "response.completed"
	case forge.TurnCancelled:
		e.resp.Status = "cancelled"
		return "response.incomplete"
	case forge.TurnErrored:
		e.resp.Status = "failed"
		e.resp.Error = &ResponseError{Code: "server_error", Message: "the turn failed"}
		if t.Error != nil {
			e.resp.Error = &ResponseError{Code: t.Error.Code, Message: t.Error.Message}
		}
		return "response.failed"
	}
	return ""
}

func (e *encoder) turnDone(t *forge.Turn) {
	if t.Output != nil && t.Output.JSON != nil {
		e.keepLastMessage()
	}
	if typ := e.finish(t); typ != "" {
		e.emit(streamEvent{Type: typ, Response: e.snapshot()})
	}
}

// keepLastMessage drops every message item but the last from the
// response: with structured output the last is the valid answer, and the
// others (answers a repair step replaced, text before tool calls) would
// make the output text, which clients parse as the JSON, not JSON. A
// stream has sent them as they came; the final response holds the answer
// alone, as Chat Completions' content does.
func (e *encoder) keepLastMessage() {
	last := -1
	for i, it := range e.resp.Output {
		if _, ok := it.(*messageItem); ok {
			last = i
		}
	}
	out := e.resp.Output[:0:0]
	for i, it := range e.resp.Output {
		if _, ok := it.(*messageItem); !ok || i == last {
			out = append(out, it)
		}
	}
	e.resp.Output = out
}

// running reports whether the response has not ended.
func (e *encoder) running() bool { return e.resp.Status == "in_progress" || e.resp.Status == "" }
