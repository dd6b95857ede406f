package forge

import (
	"encoding/json"
	"time"
)

// Message roles. "tool" messages hold the resolutions a resuming turn
// applied to calls left open by an earlier turn (see docs/decisions.md).
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Finish reasons.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
	FinishLength    = "length"
	FinishError     = "error"
	FinishFilter    = "content_filter"
)

// Message is an envelope of parts.
type Message struct {
	ID        string  `json:"id"`
	Tenant    string  `json:"-"`
	SessionID string  `json:"session_id"`
	TurnID    string  `json:"turn_id"`
	ThreadID  string  `json:"thread_id"`
	Role      string  `json:"role"`
	ParentID  *string `json:"parent_id"`
	Author    string  `json:"author,omitempty"`
	Model     string  `json:"model,omitempty"`
	Finish    string  `json:"finish,omitempty"`
	Usage     *Usage  `json:"usage,omitempty"`
	Summary   bool    `json:"summary,omitempty"`
	// Metadata is the message's metadata: a forum message's as its author
	// gave it, a copy's source (SourceMeta), a published reply's type.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Origin makes a message that belongs to no turn unique in its session
	// ("copy:<source message>", "reply:<monologue turn>"): a retried
	// delivery writes nothing twice.
	Origin string `json:"-"`
	// Forum holds a forum message's forum fields (forum sessions only).
	Forum     *ForumInfo `json:"-"`
	CreatedAt time.Time  `json:"created_at"`
	Parts     []*Part    `json:"parts"`
}

// Part types.
const (
	PartText       = "text"
	PartReasoning  = "reasoning"
	PartTool       = "tool"
	PartFile       = "file"
	PartAgent      = "agent"
	PartCompaction = "compaction"
	PartSubtask    = "subtask"
	PartStepStart  = "step-start"
	PartStepFinish = "step-finish"
	PartPatch      = "patch"
)

// Part states.
const (
	StateStreaming   = "streaming"
	StateCompleted   = "completed"
	StateInterrupted = "interrupted"
	StatePending     = "pending"
	StateRunning     = "running"
	StateError       = "error"
)

// Part is a fragment of a message.
type Part struct {
	ID        string          `json:"id"`
	MessageID string          `json:"message_id"`
	SessionID string          `json:"-"`
	TurnID    string          `json:"-"`
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	State     string          `json:"state,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Output    *string         `json:"output,omitempty"`
	Error     *string         `json:"error,omitempty"`
	// Data holds type-specific content (usage of a step-finish, files of a
	// patch, the boundary of a compaction).
	Data json.RawMessage `json:"data,omitempty"`
	// Provider is opaque provider state that must round-trip (thinking
	// signatures, reasoning ids). Never shown to clients.
	Provider  json.RawMessage `json:"-"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Clone returns a copy of p that shares no mutable pointers.
func (p *Part) Clone() *Part {
	c := *p
	if p.Output != nil {
		o := *p.Output
		c.Output = &o
	}
	if p.Error != nil {
		e := *p.Error
		c.Error = &e
	}
	return &c
}

// Clone returns a copy of m with cloned parts.
func (m *Message) Clone() *Message {
	c := *m
	if m.Forum != nil {
		f := *m.Forum
		f.Mentions = append([]string(nil), m.Forum.Mentions...)
		c.Forum = &f
	}
	if m.Usage != nil {
		u := *m.Usage
		c.Usage = &u
	}
	c.Parts = make([]*Part, len(m.Parts))
	for i, p := range m.Parts {
		c.Parts[i] = p.Clone()
	}
	return &c
}
