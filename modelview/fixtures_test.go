package modelview

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

// fixture is a file of testdata: a history, and what the model view of it
// is (FilterCompacted: the ids; Convert: the model messages, rendered by
// render; EstimateTokens of the view; the model messages with tool
// outputs pruned to a budget, when it names one).
type fixture struct {
	About       string           `json:"about"`
	History     []fixtureMessage `json:"history"`
	View        []string         `json:"view"`
	Model       []string         `json:"model"`
	Tokens      int64            `json:"tokens"`
	PruneBudget *int64           `json:"prune_budget"`
	PrunedModel []string         `json:"pruned_model"`
}

// fixtureMessage is a message as a fixture writes it: the API's fields and
// the provider state the API does not show.
type fixtureMessage struct {
	ID       string          `json:"id"`
	Role     string          `json:"role"`
	TurnID   string          `json:"turn_id"`
	ParentID *string         `json:"parent_id"`
	Finish   string          `json:"finish"`
	Summary  bool            `json:"summary"`
	Usage    *forge.Usage    `json:"usage"`
	Metadata json.RawMessage `json:"metadata"`
	Parts    []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		State     string          `json:"state"`
		CallID    string          `json:"call_id"`
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
		Output    *string         `json:"output"`
		Error     *string         `json:"error"`
		Data      json.RawMessage `json:"data"`
		Provider  json.RawMessage `json:"provider"`
	} `json:"parts"`
}

func (f fixtureMessage) message() *forge.Message {
	m := &forge.Message{ID: f.ID, Role: f.Role, TurnID: f.TurnID, ParentID: f.ParentID, Finish: f.Finish,
		Summary: f.Summary, Usage: f.Usage, Metadata: f.Metadata, Parts: []*forge.Part{}}
	for i, p := range f.Parts {
		m.Parts = append(m.Parts, &forge.Part{ID: f.ID + "_p" + string(rune('0'+i)), MessageID: f.ID, Type: p.Type,
			Text: p.Text, State: p.State, CallID: p.CallID, Tool: p.Tool, Arguments: p.Arguments, Output: p.Output,
			Error: p.Error, Data: p.Data, Provider: p.Provider})
	}
	return m
}

// render writes model messages one a line: the role, then each part.
func render(msgs []forge.ModelMessage) []string {
	out := []string{}
	for _, m := range msgs {
		line := m.Role
		for _, p := range m.Parts {
			line += " | "
			switch p.Type {
			case forge.ModelPartText, forge.ModelPartReasoning:
				line += p.Type + ": " + p.Text
			case forge.ModelPartToolCall:
				line += "call " + p.CallID + " " + p.Name + " " + string(p.Arguments)
			case forge.ModelPartToolResult:
				line += "result " + p.CallID + " " + p.Name
				if p.IsError {
					line += " (error)"
				}
				line += ": " + p.Output
			default:
				line += "?" + p.Type
			}
			if len(p.Provider) > 0 && p.Type != forge.ModelPartToolResult {
				line += " " + string(p.Provider)
			}
		}
		out = append(out, line)
	}
	return out
}

func TestFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var f fixture
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			var history []*forge.Message
			for _, m := range f.History {
				history = append(history, m.message())
			}
			view := FilterCompacted(history)
			ids := []string{}
			for _, m := range view {
				ids = append(ids, m.ID)
			}
			same(t, "view", ids, f.View)
			same(t, "model messages", render(Convert(view)), f.Model)
			if got := EstimateTokens(view...); got != f.Tokens {
				t.Errorf("EstimateTokens = %d, want %d", got, f.Tokens)
			}
			// Converted a message at a time as a history grows, the memo
			// agrees.
			var memo Memo
			for i := range view {
				var got []forge.ModelMessage
				got, memo = memo.Convert(view[:i+1])
				same(t, "memo conversion", render(got), render(Convert(view[:i+1])))
			}
			if f.PruneBudget != nil {
				pruned := PruneToolOutputs(view, *f.PruneBudget)
				same(t, "pruned model messages", render(Convert(pruned)), f.PrunedModel)
				for i, m := range view {
					if pruned[i] != m && reflect.DeepEqual(pruned[i], m) {
						t.Errorf("message %s copied with nothing pruned", m.ID)
					}
				}
				if got := render(Convert(view)); !reflect.DeepEqual(got, f.Model) {
					t.Errorf("pruning changed the view it was given")
				}
			}
		})
	}
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}
