package forge

import (
	"encoding/json"
	"time"
)

// Event types (API.md).
const (
	EventTurnCreated      = "turn.created"
	EventTurnDone         = "turn.done"
	EventMessageCreated   = "message.created"
	EventMessageUpdated   = "message.updated"
	EventModelMessage     = "model.message"
	EventModelDelta       = "model.message.delta"
	EventToolCall         = "tool.call"
	EventToolResponse     = "tool.response"
	EventStepStarted      = "step.started"
	EventStepFinished     = "step.finished"
	EventPatch            = "patch"
	EventActionRequired   = "action.required"
	EventThreadCreated    = "thread.created"
	EventThreadDone       = "thread.done"
	EventMCPInitialized   = "mcp.initialized"
	EventSandboxCreated   = "sandbox.created"
	EventSandboxStopped   = "sandbox.stopped"
	EventSessionCompacted = "session.compacted"
)

// Event is a record of something the runtime did. Seq is per session,
// strictly increasing and never reused, but not dense.
type Event struct {
	Seq       int64           `json:"seq"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	TurnID    *string         `json:"turn_id"`
	ThreadID  *string         `json:"thread_id"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// Stored reports whether events of this type are persisted (deltas are
// bus-only).
func (e *Event) Stored() bool { return e.Type != EventModelDelta }

// DeltaData is the data of a model.message.delta event.
type DeltaData struct {
	Delta string `json:"delta"`
}
