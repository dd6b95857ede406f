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

// ModelRequest is one model call. A Model reads it, and never changes it,
// only while its Stream runs: the engine reuses the arrays behind Messages
// for the next calls of the thread (so that a long history is not copied
// on every step). A Model that keeps a request for later keeps a copy
// (ModelRequest.Clone).
type ModelRequest struct {
	Model    string // the model id without the provider prefix
	System   string
	Messages []ModelMessage
	Tools    []ToolDef
	Params   ModelParams
	// OutputSchema, when set, asks the model for a final answer that is
	// JSON matching it, in the provider's own way.
	OutputSchema *OutputSchema
}

// Clone returns a copy of r whose messages and parts are its own.
func (r *ModelRequest) Clone() *ModelRequest {
	c := *r
	c.Messages = make([]ModelMessage, len(r.Messages))
	for i, m := range r.Messages {
		c.Messages[i] = ModelMessage{Role: m.Role, Parts: append([]ModelPart(nil), m.Parts...)}
	}
	c.Tools = append([]ToolDef(nil), r.Tools...)
	return &c
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
	// ModelPartFile is an image or a PDF (File) of a user message or of a
	// tool result's Content; text files reach the model as text parts.
	ModelPartFile = "file"
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
	// File is a file part's file.
	File *ModelFile `json:"file,omitempty"`
	// Content is a tool result's content blocks after its Output text:
	// text and file parts (an MCP tool's images).
	Content []ModelPart `json:"content,omitempty"`
}

// ModelFile is a file sent to the model: an image or a PDF, with its
// bytes (which the engine reads from the store for each call).
type ModelFile struct {
	FileID   string `json:"file_id"`
	Filename string `json:"filename"`
	MimeType string `json:"mime_type"`
	// Data is the file's content; nil in a model view (modelview), filled
	// by the engine before the call.
	Data []byte `json:"-"`
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

// StreamWaits connects the consumer of a model stream with a provider that
// tells when it is about to wait for its model. Publishing a delta needs a
// store write first (the rows before it must be committed); a consumer
// whose provider reports its waits holds the deltas of a burst of events
// the provider already has in memory back, and writes and publishes them
// all at once when the provider has been waiting a moment (the engine:
// Config.DeltaLinger), or with its next write after the stream. A provider
// that does not report its waits is never waited for: its consumer writes
// before each delta.
type StreamWaits struct {
	// Wait is called by the provider right before each wait for more of
	// the reply (a read from the network that may block, a timer), on the
	// goroutine that runs the stream's yield, between two yields. The wait
	// is over at the provider's next yield or the stream's end.
	Wait     func()
	reported bool
}

type streamWaitsKey struct{}

// WithStreamWaits returns ctx carrying w, for Model.Stream.
func WithStreamWaits(ctx context.Context, w *StreamWaits) context.Context {
	return context.WithValue(ctx, streamWaitsKey{}, w)
}

// Reported tells whether the stream's provider reports its waits (it
// called ReportWaits).
func (w *StreamWaits) Reported() bool { return w.reported }

// ReportWaits is called by a provider that reports its waits, at the start
// of Stream, before its first event: it returns the function to call right
// before each wait for its model (see StreamWaits), a no-op when ctx
// carries none.
func ReportWaits(ctx context.Context) func() {
	w, _ := ctx.Value(streamWaitsKey{}).(*StreamWaits)
	if w == nil || w.Wait == nil {
		return func() {}
	}
	w.reported = true
	return w.Wait
}
