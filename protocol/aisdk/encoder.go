package aisdk

import (
	"encoding/json"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

// chunk is one UI message stream chunk; fields a type lacks are left out.
type chunk struct {
	Type             string          `json:"type"`
	ID               string          `json:"id,omitempty"`
	MessageID        string          `json:"messageId,omitempty"`
	Delta            *string         `json:"delta,omitempty"`
	ToolCallID       string          `json:"toolCallId,omitempty"`
	ToolName         string          `json:"toolName,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           any             `json:"output,omitempty"`
	ErrorText        string          `json:"errorText,omitempty"`
	ProviderExecuted *bool           `json:"providerExecuted,omitempty"`
	ApprovalID       string          `json:"approvalId,omitempty"`
	FinishReason     string          `json:"finishReason,omitempty"`
	Reason           string          `json:"reason,omitempty"`
}

// deniedPrefix starts the error of a call whose approval was refused
// (engine: "the user denied this call").
const deniedPrefix = "the user denied this call"

// encoder turns the projected steps of an exchange's turns (a user
// message's turn and the turns resolving its calls) into one assistant UI
// message.
type encoder struct {
	messageID string
	started   bool
	// last is set while encoding the exchange's last turn: only its end
	// finishes the message.
	last       bool
	lastFinish string
	types      map[string]string // part id -> "text" or "reasoning"
	write      func(c chunk)
}

var yes = true

func (e *encoder) step(s protocol.Step) {
	switch s.Kind {
	case protocol.TurnStarted:
		if !e.started {
			e.started = true
			e.write(chunk{Type: "start", MessageID: e.messageID})
		}
	case protocol.StepStarted:
		e.write(chunk{Type: "start-step"})
	case protocol.StepFinished:
		e.lastFinish = s.Finish
		if s.Finish == forge.FinishError {
			// A cut step: the error chunk that follows closes it, as
			// the AI SDK's own streams do.
			return
		}
		e.write(chunk{Type: "finish-step"})
	case protocol.PartStarted:
		if e.types == nil {
			e.types = map[string]string{}
		}
		e.types[s.Part.ID] = partType(s.Part.Type)
		e.write(chunk{Type: partType(s.Part.Type) + "-start", ID: s.Part.ID})
	case protocol.PartDelta:
		text := s.Text
		e.write(chunk{Type: e.partTypeOf(s.PartID) + "-delta", ID: s.PartID, Delta: &text})
	case protocol.PartDone:
		e.write(chunk{Type: partType(s.Part.Type) + "-end", ID: s.Part.ID})
	case protocol.ToolStarted:
		if s.Resolution == "" {
			e.write(chunk{Type: "tool-input-available", ToolCallID: s.Part.CallID, ToolName: s.Part.Tool,
				Input: input(s.Part.Arguments), ProviderExecuted: &yes})
		}
	case protocol.ToolDone:
		p := s.Part
		switch {
		case p.State == forge.StateCompleted:
			out := ""
			if p.Output != nil {
				out = *p.Output
			}
			e.write(chunk{Type: "tool-output-available", ToolCallID: p.CallID, Output: out, ProviderExecuted: &yes})
		case s.Resolution == forge.InputApproval && p.Error != nil && strings.HasPrefix(*p.Error, deniedPrefix):
			e.write(chunk{Type: "tool-output-denied", ToolCallID: p.CallID})
		default:
			msg := "the call failed"
			if p.Error != nil {
				msg = *p.Error
			}
			e.write(chunk{Type: "tool-output-error", ToolCallID: p.CallID, ErrorText: msg, ProviderExecuted: &yes})
		}
	case protocol.ActionRequired:
		a := s.Action
		switch a.Type {
		case forge.ActionApproval:
			e.write(chunk{Type: "tool-input-available", ToolCallID: a.CallID, ToolName: a.Tool, Input: input(a.Arguments), ProviderExecuted: &yes})
			e.write(chunk{Type: "tool-approval-request", ApprovalID: a.CallID, ToolCallID: a.CallID})
		case forge.ActionClientTool:
			// Not provider-executed: useChat's onToolCall runs it, and
			// addToolOutput sends its output back.
			e.write(chunk{Type: "tool-input-available", ToolCallID: a.CallID, ToolName: a.Tool, Input: input(a.Arguments)})
		}
	case protocol.TurnDone:
		e.turnDone(s.Turn)
	}
}

// partTypeOf is the type of a part the encoder saw start.
func (e *encoder) partTypeOf(id string) string {
	if t, ok := e.types[id]; ok {
		return t
	}
	return "text"
}

func (e *encoder) turnDone(t *forge.Turn) {
	if !e.last {
		return
	}
	switch t.Status {
	case forge.TurnDone:
		reason := finishReason(e.lastFinish)
		if len(t.RequiredActions) > 0 {
			reason = "tool-calls"
		}
		e.write(chunk{Type: "finish", FinishReason: reason})
	case forge.TurnErrored:
		msg := "the turn failed"
		if t.Error != nil {
			msg = t.Error.Message
		}
		e.write(chunk{Type: "error", ErrorText: msg})
		e.write(chunk{Type: "finish", FinishReason: "error"})
	case forge.TurnCancelled:
		reason := ""
		if t.CancelReason != nil {
			reason = *t.CancelReason
		}
		e.write(chunk{Type: "abort", Reason: reason})
	}
}

func partType(t string) string {
	if t == forge.PartReasoning {
		return "reasoning"
	}
	return "text"
}

func finishReason(f string) string {
	switch f {
	case forge.FinishStop:
		return "stop"
	case forge.FinishToolCalls:
		return "tool-calls"
	case forge.FinishLength:
		return "length"
	case forge.FinishFilter:
		return "content-filter"
	case forge.FinishError:
		return "error"
	}
	return "other"
}

func input(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	return raw
}
