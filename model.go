package forge

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"
)

// Model streams one model call as normalized events.
type Model interface {
	Stream(ctx context.Context, req *ModelRequest) iter.Seq2[ModelEvent, error]
}

// Models resolves "provider/model" to a Model and the id sent to it.
type Models interface {
	Resolve(name string) (Model, string, error)
}

// ModelRequest is one model call.
type ModelRequest struct {
	Model    string // the model id without the provider prefix
	System   string
	Messages []ModelMessage
	Tools    []ToolDef
	Params   ModelParams
}

// ModelMessage is one message of the history sent to the model. Role is
// user, assistant or tool (tool messages carry tool_result parts).
type ModelMessage struct {
	Role  string      `json:"role"`
	Parts []ModelPart `json:"parts"`
}

// Model part types.
const (
	ModelPartText       = "text"
	ModelPartReasoning  = "reasoning"
	ModelPartToolCall   = "tool_call"
	ModelPartToolResult = "tool_result"
)

// ModelPart is a fragment of a ModelMessage.
type ModelPart struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Output    string          `json:"output,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Provider  json.RawMessage `json:"provider,omitempty"`
}

// ModelEventType tells what a ModelEvent carries.
type ModelEventType int

// Normalized stream events. Tool-input deltas are not forwarded: a tool call
// arrives once, complete.
const (
	TextStart ModelEventType = iota + 1
	TextDelta
	TextEnd
	ReasoningStart
	ReasoningDelta
	ReasoningEnd
	ToolCallEvent
	FinishEvent
)

// ModelEvent is one normalized stream event.
type ModelEvent struct {
	Type  ModelEventType
	Delta string
	// Provider is opaque state to keep on the part (on *End and tool calls).
	Provider json.RawMessage
	ToolCall *ToolCall
	Finish   *Finish
}

// ToolCall is a complete tool call from the model.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage
}

// Finish ends a model call.
type Finish struct {
	Reason string // one of the Finish* constants
	Usage  Usage
}

// ModelError is a failed model call.
type ModelError struct {
	Provider   string
	StatusCode int // HTTP status, 0 when none
	Message    string
	// Retryable marks errors worth retrying before any output.
	Retryable bool
	// RetryAfter is the provider's Retry-After hint, 0 when none.
	RetryAfter time.Duration
	// ContextOverflow marks a request the model refused as too long for
	// its context window (compaction reacts to it).
	ContextOverflow bool
}

func (e *ModelError) Error() string {
	if e.StatusCode > 0 {
		return fmt.Sprintf("%s: status %d: %s", e.Provider, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Provider, e.Message)
}
