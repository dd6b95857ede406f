package forge

import (
	"encoding/json"
	"time"
)

// Session kinds.
const (
	KindDirect    = "direct"
	KindForum     = "forum"
	KindMonologue = "monologue"
)

// Session is the durable conversation boundary. Its tip is the turn new
// turns chain from by default.
type Session struct {
	ID     string `json:"id"`
	Tenant string `json:"-"`
	Kind   string `json:"kind"`
	Agent  string `json:"agent"`
	Title  string `json:"title"`
	// MainThreadID is the root agent's thread, stable across turns.
	MainThreadID string          `json:"main_thread_id"`
	Metadata     json.RawMessage `json:"metadata"`
	TipTurnID    *string         `json:"tip_turn_id"`
	// Guards are a forum's guards (nil on other kinds).
	Guards *ForumGuards `json:"guards,omitempty"`
	// Usage is the running total of the usage of the session's ended
	// turns, added by each turn's terminal write.
	Usage     Usage     `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// SeqReserved is the highest seq reserved in the session (ReserveSeqs;
	// 0 before the first) when the row was read, where the store says
	// (nil: not known). Never sent to clients.
	SeqReserved *int64 `json:"-"`
}

// Turn statuses.
const (
	TurnRunning   = "running"
	TurnDone      = "done"
	TurnCancelled = "cancelled"
	TurnErrored   = "errored"
	// TurnQueued: the turn waits for the session's turns before it to end
	// (if_busy: enqueue); it has not run, and is not ended.
	TurnQueued = "queued"
)

// Cancel reasons.
const (
	CancelClient     = "client"
	CancelTimeout    = "timeout"
	CancelSuperseded = "superseded"
	CancelShutdown   = "shutdown"
	CancelAbandoned  = "abandoned"
)

// Error codes a turn can end with.
const (
	CodeIterationLimit  = "iteration_limit"
	CodeModelError      = "model_error"
	CodeToolError       = "tool_error"
	CodeContextOverflow = "context_overflow"
	CodeInternal        = "internal"
	// CodeOutputLimit: the turn's output reached a limit of the server
	// (bytes of text, reasoning and tool calls; output tokens). What was
	// streamed is kept, its part interrupted.
	CodeOutputLimit = "output_limit"
	// CodeOutputInvalid: the final answer did not match the output
	// schema, after every repair step allowed (output_retries).
	CodeOutputInvalid = "output_invalid"
)

// Turn is one request/response cycle in a session.
type Turn struct {
	ID              string           `json:"id"`
	Tenant          string           `json:"-"`
	SessionID       string           `json:"session_id"`
	PreviousTurnID  *string          `json:"previous_turn_id"`
	AgentID         string           `json:"agent_id"`
	AgentVersion    int              `json:"agent_version"`
	Status          string           `json:"status"`
	Input           []Input          `json:"input"`
	Output          *TurnOutput      `json:"output"`
	RequiredActions []RequiredAction `json:"required_actions"`
	Error           *TurnError       `json:"error"`
	CancelReason    *string          `json:"cancel_reason"`
	// CancelMessage is the free text a client gave when cancelling.
	CancelMessage  *string `json:"cancel_message,omitempty"`
	Usage          Usage   `json:"usage"`
	Iterations     int     `json:"iterations"`
	LastSeq        int64   `json:"last_seq"`
	IdempotencyKey string  `json:"-"`
	// Trigger is, on a monologue turn, the ingested copy it answers; on
	// a schedule's run, the schedule.
	Trigger *TurnTrigger `json:"trigger,omitempty"`
	// Overrides are the per-request settings the turn ran with (nil:
	// none, the agent's alone).
	Overrides *TurnOverrides `json:"overrides,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	EndedAt   *time.Time     `json:"ended_at"`
}

// Ended reports whether the turn has its terminal status (a queued turn
// has not: it is still to run).
func (t *Turn) Ended() bool { return t.Status != TurnRunning && t.Status != TurnQueued }

// TurnOutput is the final assistant message of a done turn.
type TurnOutput struct {
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	// JSON is the answer parsed, when the turn asked for structured
	// output (OutputSchema) and the answer matched.
	JSON json.RawMessage `json:"json,omitempty"`
}

// TurnError says why a turn ended errored.
type TurnError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Required action types.
const (
	ActionApproval   = "approval"
	ActionClientTool = "client_tool"
	ActionAuth       = "auth"
)

// RequiredAction is an open call the next turn must resolve.
type RequiredAction struct {
	Type      string          `json:"type"`
	CallID    string          `json:"call_id"`
	ThreadID  string          `json:"thread_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Server and AuthURL describe an auth action: the MCP server that
	// answered 401, and where a token can be obtained when it says.
	Server  string `json:"server,omitempty"`
	AuthURL string `json:"auth_url,omitempty"`
}

// Input item types.
const (
	InputMessage    = "message"
	InputApproval   = "approval"
	InputToolResult = "tool_result"
	InputAuth       = "auth"
)

// Input is one item of a turn's input.
type Input struct {
	Type     string  `json:"type"`
	Text     string  `json:"text,omitempty"`
	CallID   string  `json:"call_id,omitempty"`
	Approved *bool   `json:"approved,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	Output   *string `json:"output,omitempty"`
	IsError  bool    `json:"is_error,omitempty"`
	Token    string  `json:"token,omitempty"`
	// Files are a message's attachments (API.md, "Files and attachments").
	Files []InputFile `json:"files,omitempty"`
}

// Snapshot is per-turn durable state that is not a message, written at the
// turn's end.
type Snapshot struct {
	TurnID string `json:"turn_id"`
	// Threads maps thread id to its state at the turn's end.
	Threads map[string]ThreadState `json:"threads"`
	// ContextTokens is the main thread's context usage after the last step.
	ContextTokens int64 `json:"context_tokens"`
	// Capabilities holds each capability's state map, carried to the next turn.
	Capabilities map[string]json.RawMessage `json:"capabilities,omitempty"`
	// Extra holds state of later subsystems (MCP, sandbox) by key.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Thread states (DESIGN.md, the turn loop).
const (
	ThreadLLMCallRequired      = "llm-call-required"
	ThreadToolResponseRequired = "tool-response-required"
	ThreadUserInputRequired    = "user-input-required"
	ThreadFinished             = "finished"
)

// ThreadState is a thread's position in the turn loop.
type ThreadState struct {
	ID       string   `json:"id"`
	ParentID *string  `json:"parent_id"`
	Agent    string   `json:"agent"`
	State    string   `json:"state"`
	OpenCall []string `json:"open_calls,omitempty"`
	// CallID is, for a child thread, the parent's call that delegated to it.
	CallID string `json:"call_id,omitempty"`
}
