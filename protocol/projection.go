// Package protocol projects a turn's Forge events into a protocol-neutral
// sequence of steps (text and reasoning parts with their deltas, tool calls
// and their results, calls waiting for the client, the turn's start and
// end), which the encoders of the protocols Forge speaks besides its own
// (protocol/openairesp: OpenAI Responses; protocol/aisdk: the AI SDK UI
// message stream) turn into their wire formats. Nothing here is specific
// to one protocol, and the engine knows nothing of either.
//
// A projection reads the same thing live and replayed: the stored log of
// a finished turn has no deltas, and a running turn's stream has them, but
// a part's text reaches the encoder as deltas whose byte offsets within the
// part are the same either way (a replay delivers the whole text as one
// delta when the part completes). Encoders that number their events derive
// the numbers from those offsets, so a live client and a replaying one see
// the same numbers (docs/decisions.md, "Sequence numbers of projected
// streams").
package protocol

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// Kind tells what a Step is.
type Kind int

// Step kinds, in the order a turn produces them.
const (
	// TurnStarted opens the turn (Turn holds only its id).
	TurnStarted Kind = iota + 1
	// StepStarted and StepFinished bound one model call of the main
	// thread (StepFinished has Usage and Finish).
	StepStarted
	StepFinished
	// PartStarted opens a text or reasoning part (Part, with no text).
	PartStarted
	// PartDelta appends Text to the part PartID at byte Offset.
	PartDelta
	// PartDone closes a part (Part with its whole text and final state).
	PartDone
	// ToolStarted is a call Forge runs (Part, a tool part).
	ToolStarted
	// ToolDone is its result (Part with state completed or error).
	ToolDone
	// ActionRequired is a call the turn left for the client to resolve
	// (Action, and Part as the call looks).
	ActionRequired
	// TurnDone ends the turn (Turn, terminal).
	TurnDone
)

// Step is one projected step of a turn.
type Step struct {
	Kind Kind
	// Seq is the Forge seq of the event the step comes from.
	Seq    int64
	Turn   *forge.Turn
	Part   *forge.Part
	PartID string
	// Text and Offset are a delta's text and the byte offset within its
	// part where it starts.
	Text   string
	Offset int
	Action *forge.RequiredAction
	Usage  forge.Usage
	Finish string
	// Resolution is, for a call of a turn that resolves calls an earlier
	// turn left open, the input that resolved it ("approval", "auth").
	Resolution string
}

// partState is what a projection knows of a text or reasoning part.
type partState struct {
	typ    string
	offset int // bytes of text delivered
	done   bool
}

// Projector projects the events of one turn, in seq order. Only the main
// thread's activity is projected: a subagent's thread shows as the call
// that delegated to it. Zero value is not usable: use NewProjector.
type Projector struct {
	mainThread string
	parts      map[string]*partState
	summaries  map[string]bool        // compaction summaries' message ids
	pending    map[string]*forge.Part // calls waiting, by call id
	started    map[string]bool        // calls announced with ToolStarted
	resolvedBy map[string]string      // call id -> the input type resolving it
	turnDone   bool
}

// NewProjector returns a projector for a turn of a session whose main
// thread is mainThread.
func NewProjector(mainThread string) *Projector {
	return &Projector{
		mainThread: mainThread,
		parts:      map[string]*partState{},
		summaries:  map[string]bool{},
		pending:    map[string]*forge.Part{},
		started:    map[string]bool{},
		resolvedBy: map[string]string{},
	}
}

// Done reports whether the turn's turn.done was projected.
func (p *Projector) Done() bool { return p.turnDone }

// Apply projects ev and calls emit with each resulting step. Events the
// projection does not show (another thread's, patches, MCP and sandbox
// notices, compaction summaries) produce nothing. An event whose data does
// not decode is an error.
func (p *Projector) Apply(ev forge.Event, emit func(Step)) error {
	if p.turnDone {
		return nil
	}
	if ev.ThreadID != nil && *ev.ThreadID != p.mainThread {
		return nil
	}
	switch ev.Type {
	case forge.EventTurnCreated:
		// Only what the projection needs: the encoders have the turn.
		var t struct {
			ID    string `json:"id"`
			Input []struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
			} `json:"input"`
		}
		if err := json.Unmarshal(ev.Data, &t); err != nil {
			return err
		}
		for _, in := range t.Input {
			if in.Type != forge.InputMessage {
				p.resolvedBy[in.CallID] = in.Type
			}
		}
		emit(Step{Kind: TurnStarted, Seq: ev.Seq, Turn: &forge.Turn{ID: t.ID}})
	case forge.EventMessageCreated:
		var m struct {
			ID      string `json:"id"`
			Summary bool   `json:"summary"`
		}
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			return err
		}
		if m.Summary {
			p.summaries[m.ID] = true
		}
	case forge.EventStepStarted, forge.EventStepFinished:
		var part forge.Part
		if err := json.Unmarshal(ev.Data, &part); err != nil {
			return err
		}
		if p.summaries[part.MessageID] {
			return nil
		}
		if ev.Type == forge.EventStepStarted {
			emit(Step{Kind: StepStarted, Seq: ev.Seq, Part: &part})
			return nil
		}
		var d struct {
			Finish string      `json:"finish"`
			Usage  forge.Usage `json:"usage"`
		}
		_ = json.Unmarshal(part.Data, &d)
		emit(Step{Kind: StepFinished, Seq: ev.Seq, Part: &part, Usage: d.Usage, Finish: d.Finish})
	case forge.EventModelMessage:
		var part forge.Part
		if err := json.Unmarshal(ev.Data, &part); err != nil {
			return err
		}
		p.partRow(ev.Seq, &part, emit)
	case forge.EventModelDelta:
		st := p.parts[ev.ID]
		if st == nil || st.done {
			return nil // a part this projection does not show
		}
		var d forge.DeltaData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return err
		}
		if d.Delta == "" {
			return nil
		}
		emit(Step{Kind: PartDelta, Seq: ev.Seq, PartID: ev.ID, Text: d.Delta, Offset: st.offset})
		st.offset += len(d.Delta)
	case forge.EventToolCall, forge.EventToolResponse:
		var part forge.Part
		if err := json.Unmarshal(ev.Data, &part); err != nil {
			return err
		}
		p.toolRow(ev, &part, emit)
	case forge.EventActionRequired:
		var d struct {
			Actions []forge.RequiredAction `json:"required_actions"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return err
		}
		for i := range d.Actions {
			a := d.Actions[i]
			part := p.pending[a.CallID]
			if part == nil { // a call of a subagent's thread
				part = &forge.Part{ID: a.CallID, Type: forge.PartTool, CallID: a.CallID, Tool: a.Tool,
					Arguments: a.Arguments, State: forge.StatePending}
			}
			emit(Step{Kind: ActionRequired, Seq: ev.Seq, Action: &a, Part: part})
		}
	case forge.EventTurnDone:
		var t forge.Turn
		if err := json.Unmarshal(ev.Data, &t); err != nil {
			return err
		}
		p.turnDone = true
		emit(Step{Kind: TurnDone, Seq: ev.Seq, Turn: &t})
	}
	return nil
}

// partRow projects a text or reasoning part's row: its start, then (when
// the row carries text the deltas have not delivered: a replay, or a
// resume older than the live backlog) the missing text as one delta, then
// its end when the row is final.
func (p *Projector) partRow(seq int64, part *forge.Part, emit func(Step)) {
	if part.Type != forge.PartText && part.Type != forge.PartReasoning {
		return
	}
	if p.summaries[part.MessageID] {
		return
	}
	st := p.parts[part.ID]
	if st == nil {
		st = &partState{typ: part.Type}
		p.parts[part.ID] = st
		start := part.Clone()
		start.Text, start.State = "", forge.StateStreaming
		emit(Step{Kind: PartStarted, Seq: seq, Part: start, PartID: part.ID})
	}
	if st.done {
		return
	}
	if len(part.Text) > st.offset {
		emit(Step{Kind: PartDelta, Seq: seq, PartID: part.ID, Text: part.Text[st.offset:], Offset: st.offset})
		st.offset = len(part.Text)
	}
	if part.State != forge.StateStreaming {
		st.done = true
		emit(Step{Kind: PartDone, Seq: seq, Part: part, PartID: part.ID})
	}
}

// toolRow projects a tool part's row. A call waiting (pending) is held
// back until the turn says why it waits (action.required) or it moves on;
// a call the client answered itself (a tool_result resolution) is not
// shown, as the client holds it already.
func (p *Projector) toolRow(ev forge.Event, part *forge.Part, emit func(Step)) {
	if part.Type != forge.PartTool {
		return
	}
	resolution := p.resolvedBy[part.CallID]
	if resolution == forge.InputToolResult {
		return
	}
	switch {
	case ev.Type == forge.EventToolCall && part.State == forge.StatePending:
		p.pending[part.CallID] = part
	case ev.Type == forge.EventToolCall:
		delete(p.pending, part.CallID)
		if !p.started[part.CallID] {
			p.started[part.CallID] = true
			emit(Step{Kind: ToolStarted, Seq: ev.Seq, Part: part, Resolution: resolution})
		}
	default:
		delete(p.pending, part.CallID)
		if !p.started[part.CallID] {
			p.started[part.CallID] = true
			start := part.Clone()
			start.State, start.Output, start.Error = forge.StateRunning, nil, nil
			emit(Step{Kind: ToolStarted, Seq: ev.Seq, Part: start, Resolution: resolution})
		}
		emit(Step{Kind: ToolDone, Seq: ev.Seq, Part: part, Resolution: resolution})
	}
}

// TrimDelta returns the part of a delta covering bytes [offset,
// offset+len(text)) of its part that lies at or after byte from (moved
// forward to a character boundary), for a client that holds the part's
// text up to from.
func TrimDelta(text string, offset, from int) string {
	cut := from - offset
	if cut <= 0 {
		return text
	}
	if cut >= len(text) {
		return ""
	}
	for cut < len(text) && !utf8.RuneStart(text[cut]) {
		cut++
	}
	return text[cut:]
}
