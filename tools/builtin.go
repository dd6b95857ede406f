// Package tools holds Forge's built-in server-side tools.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/forge-runtime/forge"
)

// Builtins returns the built-in tools by name.
func Builtins() map[string]forge.Tool {
	m := map[string]forge.Tool{}
	for _, t := range []forge.Tool{Echo{}, Sleep{}} {
		m[t.Def().Name] = t
	}
	return m
}

// Echo returns its text argument. It is the smallest tool with a result,
// useful for checking an agent's wiring.
type Echo struct{}

// Def describes echo.
func (Echo) Def() forge.ToolDef {
	return forge.ToolDef{
		Name:        "echo",
		Description: "Returns the given text unchanged.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	}
}

// Call returns args.text.
func (Echo) Call(_ context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Text == nil {
		return forge.ToolResult{}, fmt.Errorf(`echo needs {"text": "..."}`)
	}
	return forge.ToolResult{Output: *in.Text}, nil
}

// Sleep waits for a number of milliseconds (at most a minute). It stands in
// for a slow side effect when exercising cancellation and timeouts.
type Sleep struct{}

// Def describes sleep.
func (Sleep) Def() forge.ToolDef {
	return forge.ToolDef{
		Name:        "sleep",
		Description: "Waits for the given number of milliseconds (at most 60000), then returns.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":60000}},"required":["ms"]}`),
	}
}

// Call sleeps, or returns early with an error when ctx ends.
func (Sleep) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		MS *int64 `json:"ms"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.MS == nil || *in.MS < 0 || *in.MS > 60000 {
		return forge.ToolResult{}, fmt.Errorf(`sleep needs {"ms": 0..60000}`)
	}
	t := time.NewTimer(time.Duration(*in.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return forge.ToolResult{Output: fmt.Sprintf("slept %d ms", *in.MS)}, nil
	case <-ctx.Done():
		return forge.ToolResult{}, fmt.Errorf("sleep interrupted: %w", ctx.Err())
	}
}
