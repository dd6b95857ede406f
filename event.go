package forge

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/forge-runtime/forge/internal/jsonenc"
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
	// Wire, when set, is the event's envelope as JSON (what json.Marshal
	// writes), encoded once by the event log for every reader of the
	// event: subscribers write these bytes instead of encoding the event
	// again each. Data is then a slice of it.
	Wire []byte `json:"-"`
	// Bus-only fields, never encoded: the event log sets them on what it
	// publishes, so that neither it nor a bus decodes Data again.
	//
	// Delta is a model.message.delta's text; Part a model.message's part
	// when it is still streaming (nil otherwise). TextSoFar are rows the
	// bus keeps in place of deltas it may trim (see Bus.Subscribe): per
	// part still streaming, its model.message with its text through its
	// last published delta, at that delta's seq.
	Delta     string  `json:"-"`
	Part      *Part   `json:"-"`
	TextSoFar []Event `json:"-"`
}

// WithoutBusFields returns e without its bus-only fields (what a bus keeps).
func (e Event) WithoutBusFields() Event {
	e.Delta, e.Part, e.TextSoFar = "", nil, nil
	return e
}

// Encode sets e.Wire to e's envelope as JSON and makes e.Data the slice of
// it that holds the data, so that the two share their bytes. It fails when
// e.Data is not valid JSON.
func (e *Event) Encode() error {
	b, at, ok := e.appendJSON(make([]byte, 0, len(e.Data)+192))
	if !ok {
		w, err := json.Marshal(e)
		if err != nil {
			return err
		}
		e.Wire = w
		return nil
	}
	e.Wire = b
	if e.Data != nil {
		// The data is the last member: `..."data":<data>}`.
		e.Data = b[at : len(b)-1 : len(b)-1]
	}
	return nil
}

// EncodeTrusted is Encode for data the caller encoded itself with
// json.Marshal or one of this package's AppendJSON methods (compact, valid
// and escaped as Marshal escapes): the data is copied, not compacted again.
func (e *Event) EncodeTrusted() error {
	b, _, ok := e.appendHead(make([]byte, 0, len(e.Data)+192))
	if !ok {
		return e.Encode()
	}
	b = append(b, `,"data":`...)
	at := len(b)
	if e.Data == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Data...)
	}
	b = append(b, '}')
	e.Wire = b
	if e.Data != nil {
		e.Data = b[at : len(b)-1 : len(b)-1]
	}
	return nil
}

// JSON returns the event's envelope as JSON: Wire when it is set.
func (e *Event) JSON() ([]byte, error) {
	if e.Wire != nil {
		return e.Wire, nil
	}
	if b, ok := e.AppendJSON(make([]byte, 0, len(e.Data)+192)); ok {
		return b, nil
	}
	return json.Marshal(e)
}

// AppendJSON appends e's envelope as json.Marshal writes it; false when a
// value is one this encoder is unsure of (the caller then uses
// json.Marshal).
func (e *Event) AppendJSON(b []byte) ([]byte, bool) {
	b, _, ok := e.appendJSON(b)
	return b, ok
}

// appendJSON is AppendJSON; at is where the data begins in b.
func (e *Event) appendJSON(b []byte) (_ []byte, at int, ok bool) {
	b, _, ok = e.appendHead(b)
	b = append(b, `,"data":`...)
	at = len(b)
	var rok bool
	if b, rok = jsonenc.AppendRaw(b, e.Data); !rok {
		ok = false
	}
	return append(b, '}'), at, ok
}

// appendHead appends the envelope up to its data member.
func (e *Event) appendHead(b []byte) (_ []byte, at int, ok bool) {
	ok = true
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"id":`...)
	b = jsonenc.AppendString(b, e.ID)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, e.Type)
	b = append(b, `,"session_id":`...)
	b = jsonenc.AppendString(b, e.SessionID)
	b = append(b, `,"turn_id":`...)
	b = appendStringPtr(b, e.TurnID)
	b = append(b, `,"thread_id":`...)
	b = appendStringPtr(b, e.ThreadID)
	b = append(b, `,"created_at":`...)
	var tok bool
	if b, tok = jsonenc.AppendTime(b, e.CreatedAt); !tok {
		ok = false
	}
	return b, len(b), ok
}

// Stored reports whether events of this type are persisted (deltas are
// bus-only).
func (e *Event) Stored() bool { return e.Type != EventModelDelta }

// DeltaData is the data of a model.message.delta event.
type DeltaData struct {
	Delta string `json:"delta"`
}

// AppendJSON appends d as json.Marshal writes it (without reflection: a
// delta is the most frequent event there is).
func (d DeltaData) AppendJSON(b []byte) []byte {
	b = append(b, `{"delta":`...)
	return append(jsonenc.AppendString(b, d.Delta), '}')
}

// Typed payloads of the events the engine emits (the data of the envelope,
// or the data of the part an event carries). Field names are the wire
// format (API.md); fields are in the order the JSON has always had.

// ActionRequiredData is the data of action.required.
type ActionRequiredData struct {
	RequiredActions []RequiredAction `json:"required_actions"`
}

// ThreadCreatedData is the data of thread.created: a child thread started
// for a subagent call of its parent thread.
type ThreadCreatedData struct {
	Agent          string `json:"agent"`
	CallID         string `json:"call_id"`
	ParentThreadID string `json:"parent_thread_id"`
	ThreadID       string `json:"thread_id"`
}

// ThreadDoneData is the data of thread.done: how a child thread ended, with
// its result (final text) or its error.
type ThreadDoneData struct {
	Error    *TurnError `json:"error,omitempty"`
	Result   *string    `json:"result,omitempty"`
	Status   string     `json:"status"`
	ThreadID string     `json:"thread_id"`
}

// SandboxCreatedData is the data of sandbox.created.
type SandboxCreatedData struct {
	Dir      string `json:"dir"`
	Isolated bool   `json:"isolated"`
}

// SandboxStoppedData is the data of sandbox.stopped.
type SandboxStoppedData struct {
	Reason string `json:"reason"`
}

// StepStartData is the data of a step-start part (step.started).
type StepStartData struct {
	Iteration int `json:"iteration"`
}

// StepFinishData is the data of a step-finish part (step.finished).
type StepFinishData struct {
	Finish    string `json:"finish"`
	Iteration int    `json:"iteration"`
	Usage     Usage  `json:"usage"`
	// Estimated: the usage is the local estimate, not the provider's
	// count (a step cut by a cancel, an error or a stream with no finish).
	Estimated bool `json:"estimated,omitempty"`
	// Snapshot is the workspace snapshot kept after the step's tool calls
	// changed sandbox files (API.md: the workspace can be restored to it);
	// empty when they changed none. SnapshotPartial: some files could not
	// be kept (WorkspaceSnapshot.Partial).
	Snapshot        string `json:"snapshot,omitempty"`
	SnapshotPartial bool   `json:"snapshot_partial,omitempty"`
}

// AgentData is the data of a direct session's agent part: an @mention
// of one of the agent's subagents in a user message, which asks the model
// to delegate to it. Start and End are the mention's offsets in the
// message text ("@" included), in UTF-16 code units, as JavaScript
// indexes a string.
type AgentData struct {
	Name  string `json:"name"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

// SubtaskData is the data of a subtask part: one delegation to a
// subagent's child thread, and how it ended.
type SubtaskData struct {
	Agent    string `json:"agent"`
	ThreadID string `json:"thread_id"`
	CallID   string `json:"call_id"`
	Prompt   string `json:"prompt"`
	Status   string `json:"status"`
}

// ToolOutputData is the data of a tool part: the whole output of one too
// long to show the model, and the files its result carries (an MCP tool's
// images, stored in the FileStore), which the model is shown with it.
type ToolOutputData struct {
	FullOutput  string `json:"full_output,omitempty"`
	OutputBytes int    `json:"output_bytes,omitempty"`
	// Files are the result's files, in the tool's order.
	Files []FileData `json:"files,omitempty"`
}
