package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/tools"
)

// countingEcho is echo that counts its runs.
type countingEcho struct{ runs *atomic.Int32 }

func (c countingEcho) Def() forge.ToolDef { return tools.Echo{}.Def() }

func (c countingEcho) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	c.runs.Add(1)
	return tools.Echo{}.Call(ctx, args)
}

// A turn can call exactly its agent version's tools: an approval granted
// after a new version dropped the tool is an error result, and the tool
// does not run (API.md, Agents).
func TestResolvedCallRunsOnlyToolsOfTheTurnsAgentVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		v2Tools []forge.ToolSpec // the agent's tools after the update
		runs    int32
		want    string // in the resolved call's output or error
		isError bool
	}{
		{name: "kept", v2Tools: []forge.ToolSpec{{Name: "echo", BuiltIn: true}, {Name: "sleep", BuiltIn: true}}, runs: 1, want: "hi"},
		{name: "removed", v2Tools: []forge.ToolSpec{{Name: "sleep", BuiltIn: true}}, want: `the tool "echo" is not available in this agent version`, isError: true},
		{name: "none left", v2Tools: nil, want: `the tool "echo" is not available in this agent version`, isError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			h := newHarness(t, func(c *engine.Config) {
				c.Tools = tools.Builtins()
				c.Tools["echo"] = countingEcho{runs: &runs}
			})
			a := h.agent("a", func(a *forge.Agent) {
				a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
				a.Approval = map[string]string{"echo": forge.PolicyAsk}
			})
			s := h.session("a")
			h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"hi"}`)}}, reply{deltas: []string{"fin"}})
			paused := h.run(s.ID, msg("go"))
			if paused.Status != forge.TurnDone || len(paused.RequiredActions) != 1 {
				t.Fatalf("paused turn %+v", paused)
			}
			a.Tools, a.Approval = tc.v2Tools, nil
			if err := a.Normalize(h.eng.IsBuiltin); err != nil {
				t.Fatal(err)
			}
			if err := h.store.UpdateAgent(h.ctx, a); err != nil {
				t.Fatal(err)
			}

			next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{approve(paused.RequiredActions[0].CallID, true, "")}})
			if next.Status != forge.TurnDone || next.AgentVersion != 2 {
				t.Fatalf("resolving turn %+v", next)
			}
			if got := runs.Load(); got != tc.runs {
				t.Fatalf("echo ran %d times, want %d", got, tc.runs)
			}
			var part *forge.Part
			for _, ev := range h.events(s.ID, paused.LastSeq) {
				if ev.Type != forge.EventToolResponse {
					continue
				}
				part = &forge.Part{}
				if err := json.Unmarshal(ev.Data, part); err != nil {
					t.Fatal(err)
				}
			}
			if part == nil || part.CallID != paused.RequiredActions[0].CallID {
				t.Fatalf("tool response %+v", part)
			}
			got := ""
			switch {
			case part.State == forge.StateError && part.Error != nil:
				got = *part.Error
			case part.State == forge.StateCompleted && part.Output != nil:
				got = *part.Output
			}
			if (part.State == forge.StateError) != tc.isError || !strings.Contains(got, tc.want) {
				t.Fatalf("resolved call %s %q, want error=%v %q", part.State, got, tc.isError, tc.want)
			}
			// The model is told the same.
			res := h.model.sent()[1].Messages[2].Parts[0]
			if res.IsError != tc.isError || !strings.Contains(res.Output, tc.want) {
				t.Fatalf("model saw %+v", res)
			}
		})
	}
}
