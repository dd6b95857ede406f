package forge

import (
	"context"
	"encoding/json"
)

// Tool is a server-side tool.
type Tool interface {
	Def() ToolDef
	// Call runs the tool. A returned error is shown to the model as the
	// tool's error result; IsError does the same for a tool-level failure.
	Call(ctx context.Context, args json.RawMessage) (ToolResult, error)
}

// ToolDef is what the model is told about a tool.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ToolResult is a tool's answer.
type ToolResult struct {
	Output  string
	IsError bool
	// Files are files the result carries besides its text (an MCP tool's
	// images): the engine stores each in the FileStore and the model is
	// shown them with the output (the tool part's data.files).
	Files []ToolFile
}

// ToolFile is a file of a tool's result, with its content.
type ToolFile struct {
	Filename string // "" for one the engine names
	MimeType string // as the tool declares it; the stored file's is sniffed
	Data     []byte
}

// Capability is a bundle of tools that share a JSON state which persists
// across turns: the state is kept in each turn's snapshot and a turn starts
// from the state of the turn it chains from (so a fork sees its branch's).
type Capability interface {
	// Name is how agents enable it in their tools list.
	Name() string
	// Tools returns the capability's tools, bound to state.
	Tools(state CapabilityState) []Tool
}

// CapabilityState is a capability's state during one turn.
type CapabilityState interface {
	Load() json.RawMessage
	Store(json.RawMessage)
}
