package forge

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestTurnOverridesCheck(t *testing.T) {
	agent := &Agent{Name: "bot", Tools: []ToolSpec{{Name: "web_fetch", BuiltIn: true}, {Name: "lookup", Client: true}}, Subagents: []string{"helper"},
		MCPServers: []MCPServer{{Name: "github", URL: "http://127.0.0.1:1/mcp"}}}
	f := func(v float64) *float64 { return &v }
	n := func(v int) *int { return &v }
	tools := func(k int) []TurnTool {
		out := make([]TurnTool, k)
		for i := range out {
			out[i] = TurnTool{Name: "t" + strings.Repeat("x", i%50) + string(rune('a'+i/50))}
		}
		return out
	}
	for _, c := range []struct {
		name     string
		o        TurnOverrides
		contains string // "" accepts
	}{
		{"everything in bounds", TurnOverrides{Instructions: "be brief", Temperature: f(0), TopP: f(1), MaxOutputTokens: n(1),
			Tools: []TurnTool{{Name: "ticket", InputSchema: json.RawMessage(`{"type":"object"}`)}}}, ""},
		{"128 tools", TurnOverrides{Tools: tools(128)}, ""},
		{"temperature", TurnOverrides{Temperature: f(2.01)}, "temperature"},
		{"top_p", TurnOverrides{TopP: f(-0.01)}, "top_p"},
		{"max tokens", TurnOverrides{MaxOutputTokens: n(MaxOverrideOutputTokens + 1)}, "max_output_tokens"},
		{"long instructions", TurnOverrides{Instructions: strings.Repeat("x", MaxOverrideInstructions+1)}, "instructions"},
		{"invalid UTF-8", TurnOverrides{Instructions: "a\xffb"}, "UTF-8"},
		{"129 tools", TurnOverrides{Tools: tools(129)}, "at most 128"},
		{"an agent's built-in", TurnOverrides{Tools: []TurnTool{{Name: "web_fetch"}}}, "a tool of agent bot"},
		{"an agent's client tool", TurnOverrides{Tools: []TurnTool{{Name: "lookup"}}}, "a tool of agent bot"},
		{"a subagent", TurnOverrides{Tools: []TurnTool{{Name: "helper"}}}, "a tool of agent bot"},
		{"an MCP server's prefix", TurnOverrides{Tools: []TurnTool{{Name: "github_search"}}}, "MCP server"},
		{"non-object schema", TurnOverrides{Tools: []TurnTool{{Name: "x", InputSchema: json.RawMessage(`{"type":"array"}`)}}}, "describe an object"},
		{"invalid schema JSON", TurnOverrides{Tools: []TurnTool{{Name: "x", InputSchema: json.RawMessage(`{"type":`)}}}, "JSON Schema object"},
		{"output schema", TurnOverrides{OutputSchema: &OutputSchema{Name: "bad name"}}, "output_schema.name"},
	} {
		err := c.o.Check(agent)
		if c.contains == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: got %v, want ErrInvalid with %q", c.name, err, c.contains)
		}
	}
	locked := &Agent{Name: "vault", Locked: true}
	if err := (&TurnOverrides{TopP: f(0.5)}).Check(locked); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "agent vault is locked") || !strings.Contains(err.Error(), "top_p") {
		t.Errorf("locked: %v", err)
	}
	if err := (&TurnOverrides{}).Check(locked); err != nil {
		t.Errorf("empty overrides on a locked agent: %v", err)
	}
}

func TestWithOverrides(t *testing.T) {
	temp := 0.7
	a := &Agent{Name: "bot", Instructions: "Agent rules.", ModelParams: ModelParams{Temperature: &temp}, Tools: []ToolSpec{{Name: "lookup", Client: true}}}
	if a.WithOverrides(nil) != a || a.WithOverrides(&TurnOverrides{}) != a {
		t.Fatal("no overrides must return the agent itself")
	}
	top, maxOut, t2 := 0.5, 42, 0.1
	got := a.WithOverrides(&TurnOverrides{Instructions: "Turn rules.", Temperature: &t2, TopP: &top, MaxOutputTokens: &maxOut,
		Tools: []TurnTool{{Name: "ticket", Description: "d"}}})
	if got.Instructions != "Agent rules.\n\nTurn rules." || *got.ModelParams.Temperature != 0.1 || *got.ModelParams.TopP != 0.5 || *got.ModelParams.MaxTokens != 42 {
		t.Fatalf("applied: %+v", got)
	}
	if len(got.Tools) != 2 || got.Tools[1].Name != "ticket" || !got.Tools[1].Client {
		t.Fatalf("tools %+v", got.Tools)
	}
	if a.Instructions != "Agent rules." || *a.ModelParams.Temperature != 0.7 || len(a.Tools) != 1 || a.ModelParams.TopP != nil {
		t.Fatalf("the agent changed: %+v", a)
	}
	if only := (&Agent{}).WithOverrides(&TurnOverrides{Instructions: "x"}); only.Instructions != "x" {
		t.Fatalf("no agent instructions: %q", only.Instructions)
	}
}
