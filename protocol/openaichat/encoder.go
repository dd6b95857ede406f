package openaichat

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

// textSeparator joins the texts of a turn's steps (text before a tool
// call, text after it) into the one content a completion has.
const textSeparator = "\n\n"

// encoder turns the projected steps of one turn into a chat completion
// and, when write is set, into the chunks of its stream.
type encoder struct {
	turn    *forge.Turn
	model   string
	write   func(data []byte) // nil: only build the completion
	usage   bool              // stream_options.include_usage
	text    strings.Builder
	reason  strings.Builder
	parts   map[string]string // part id -> type, of parts shown
	hasText map[string]bool   // text parts that delivered text
	calls   []canonCal
	// lastFinish is the finish reason of the main thread's last step.
	lastFinish string
	finish     string // the completion's finish_reason, once the turn ended
	// failure is why the ended turn is no completion (it failed, was
	// cancelled, or waits for what Chat Completions cannot express).
	failure error
}

func newEncoder(t *forge.Turn, model string, write func([]byte), usage bool) *encoder {
	return &encoder{turn: t, model: model, write: write, usage: usage, parts: map[string]string{}, hasText: map[string]bool{}}
}

// Wire types, as OpenAI sends them.

type completionObject struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []choice     `json:"choices"`
	Usage             *usageObject `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint *string      `json:"system_fingerprint"`
}

type choice struct {
	Index        int             `json:"index"`
	Message      assistantObject `json:"message"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type assistantObject struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	Refusal          *string        `json:"refusal"`
	ToolCalls        []toolCallWire `json:"tool_calls,omitempty"`
	Annotations      []any          `json:"annotations"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
}

type toolCallWire struct {
	Index    *int          `json:"index,omitempty"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function *functionWire `json:"function,omitempty"`
}

type functionWire struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type usageObject struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

type chunkObject struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	ServiceTier       string        `json:"service_tier"`
	SystemFingerprint *string       `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usageObject  `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        deltaWire `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type deltaWire struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	Refusal          *string        `json:"refusal,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallWire `json:"tool_calls,omitempty"`
}

func strp(s string) *string { return &s }

// chunk sends one chunk whose only choice has delta (and finish).
func (e *encoder) chunk(d deltaWire, finish *string) {
	e.send(chunkObject{Choices: []chunkChoice{{Delta: d, FinishReason: finish}}})
}

func (e *encoder) send(c chunkObject) {
	if e.write == nil {
		return
	}
	c.ID, c.Object, c.Created, c.Model, c.ServiceTier = e.turn.ID, "chat.completion.chunk", e.turn.CreatedAt.Unix(), e.model, "default"
	data, err := json.Marshal(c)
	if err != nil {
		return // the types above always encode
	}
	if e.usage && c.Usage == nil {
		// With include_usage every chunk carries "usage": null but the last.
		data = append(data[:len(data)-1], `,"usage":null}`...)
	}
	e.write(data)
}

// step applies one projected step.
func (e *encoder) step(s protocol.Step) {
	switch s.Kind {
	case protocol.TurnStarted:
		e.chunk(deltaWire{Role: "assistant", Content: strp(""), Refusal: nil}, nil)
	case protocol.StepFinished:
		e.lastFinish = s.Finish
	case protocol.PartStarted:
		e.parts[s.PartID] = s.Part.Type
	case protocol.PartDelta:
		switch e.parts[s.PartID] {
		case forge.PartText:
			text := s.Text
			if !e.hasText[s.PartID] && e.text.Len() > 0 {
				text = textSeparator + text
			}
			e.hasText[s.PartID] = true
			e.text.WriteString(text)
			e.chunk(deltaWire{Content: &text}, nil)
		case forge.PartReasoning:
			e.reason.WriteString(s.Text)
			e.chunk(deltaWire{ReasoningContent: s.Text}, nil)
		}
	case protocol.ActionRequired:
		e.actionRequired(s.Action)
	case protocol.TurnDone:
		e.turnDone(s.Turn)
	}
}

func arguments(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func (e *encoder) actionRequired(a *forge.RequiredAction) {
	switch a.Type {
	case forge.ActionClientTool:
		i := len(e.calls)
		call := canonCal{ID: a.CallID, Name: a.Tool, Arguments: arguments(a.Arguments)}
		e.calls = append(e.calls, call)
		// As OpenAI streams a call: its id and name with empty
		// arguments, then the arguments.
		e.chunk(deltaWire{ToolCalls: []toolCallWire{{Index: &i, ID: call.ID, Type: "function", Function: &functionWire{Name: call.Name}}}}, nil)
		e.chunk(deltaWire{ToolCalls: []toolCallWire{{Index: &i, Function: &functionWire{Arguments: call.Arguments}}}}, nil)
	default:
		if e.failure == nil {
			e.failure = newError(http.StatusConflict, "", "action_required",
				"the turn waits for a %s of call %s (tool %s), which Chat Completions cannot express: resolve it through POST /v1/sessions/%s/turns",
				a.Type, a.CallID, a.Tool, e.turn.SessionID)
		}
	}
}

func (e *encoder) turnDone(t *forge.Turn) {
	e.turn.Usage, e.turn.Status, e.turn.Error = t.Usage, t.Status, t.Error
	if t.Output != nil && t.Output.JSON != nil && e.write == nil {
		// Structured output: the content is the valid answer alone, not
		// the answers a repair step replaced (a stream has sent those).
		e.text.Reset()
		e.text.WriteString(t.Output.Text)
	}
	switch {
	case t.Status == forge.TurnErrored && t.Error != nil && t.Error.Code == forge.CodeOutputLimit:
		e.finish = "length"
	case t.Status == forge.TurnErrored:
		code, msg := forge.CodeInternal, "the turn failed"
		if t.Error != nil {
			code, msg = t.Error.Code, t.Error.Message
		}
		e.failure = newError(http.StatusInternalServerError, "", code, "%s", msg)
		return
	case t.Status == forge.TurnCancelled:
		e.failure = newError(http.StatusConflict, "", "cancelled", "the turn was cancelled")
		return
	case e.failure != nil:
		return
	case len(e.calls) > 0:
		e.finish = "tool_calls"
	case e.lastFinish == forge.FinishLength:
		e.finish = "length"
	case e.lastFinish == forge.FinishFilter:
		e.finish = "content_filter"
	default:
		e.finish = "stop"
	}
	e.chunk(deltaWire{}, &e.finish)
	if e.usage {
		e.send(chunkObject{Choices: []chunkChoice{}, Usage: e.usageObject()})
	}
}

func (e *encoder) usageObject() *usageObject {
	u := e.turn.Usage
	o := &usageObject{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	o.PromptTokensDetails.CachedTokens = u.CacheReadTokens
	o.CompletionTokensDetails.ReasoningTokens = u.ReasoningTokens
	return o
}

// message is the answer as the client resends it in the conversation.
func (e *encoder) message() message {
	return message{Role: "assistant", Text: e.text.String(), ToolCalls: e.calls}
}

// completion is the chat.completion object of the ended turn.
func (e *encoder) completion() *completionObject {
	msg := assistantObject{Role: "assistant", Annotations: []any{}, ReasoningContent: e.reason.String()}
	if e.text.Len() > 0 || len(e.calls) == 0 {
		msg.Content = strp(e.text.String())
	}
	for _, c := range e.calls {
		msg.ToolCalls = append(msg.ToolCalls, toolCallWire{ID: c.ID, Type: "function", Function: &functionWire{Name: c.Name, Arguments: c.Arguments}})
	}
	return &completionObject{
		ID: e.turn.ID, Object: "chat.completion", Created: e.turn.CreatedAt.Unix(), Model: e.model,
		Choices: []choice{{Message: msg, FinishReason: e.finish}}, Usage: e.usageObject(), ServiceTier: "default",
	}
}
