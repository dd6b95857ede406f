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
}
