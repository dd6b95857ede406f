package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/schemas"
)

const triageSchema = `{"type":"object","properties":{"priority":{"enum":["low","high"]}},"required":["priority"],"additionalProperties":false}`

func withSchemas(c *engine.Config) { c.Schemas = schemas.Compiler{} }

func triage(a *forge.Agent) {
	a.OutputSchema = &forge.OutputSchema{Name: "triage", Schema: json.RawMessage(triageSchema), Strict: true}
}

func TestOutputSchemaValidAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", triage)
	s := h.session("a")
	h.model.push(reply{deltas: []string{`{"priority":`, ` "high"}`}})
	turn := h.run(s.ID, msg("the site is down"))
	if turn.Status != forge.TurnDone || turn.Output == nil {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
	if string(turn.Output.JSON) != `{"priority":"high"}` || turn.Output.Text != `{"priority": "high"}` {
		t.Fatalf("output json %s text %q", turn.Output.JSON, turn.Output.Text)
	}
	req := h.model.sent()[0]
	if req.OutputSchema == nil || req.OutputSchema.Name != "triage" || !req.OutputSchema.Strict || string(req.OutputSchema.Schema) != triageSchema {
		t.Fatalf("model was asked for %+v", req.OutputSchema)
	}
	stored, err := h.store.GetTurn(h.ctx, forge.DefaultTenant, s.ID, turn.ID)
	if err != nil || stored.Output == nil || string(stored.Output.JSON) != `{"priority":"high"}` {
		t.Fatalf("stored turn output %+v %v", stored.Output, err)
	}
	evs := h.events(s.ID, 0)
	done := evs[len(evs)-1]
	if done.Type != forge.EventTurnDone || !strings.Contains(string(done.Data), `"json":{"priority":"high"}`) {
		t.Fatalf("turn.done %s %s", done.Type, done.Data)
	}
}

func TestOutputSchemaFencedAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", triage)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"```json\n{\"priority\":\"low\"}\n```"}})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnDone || string(turn.Output.JSON) != `{"priority":"low"}` {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
}

func TestOutputSchemaRepair(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", triage)
	s := h.session("a")
	h.model.push(reply{deltas: []string{`{"priority":"urgent"}`}}, reply{deltas: []string{`{"priority":"high"}`}})
	turn := h.run(s.ID, msg("the site is down"))
	if turn.Status != forge.TurnDone || string(turn.Output.JSON) != `{"priority":"high"}` || turn.Iterations != 2 {
		t.Fatalf("turn %s %+v %+v iterations %d", turn.Status, turn.Error, turn.Output, turn.Iterations)
	}
	sent := h.model.sent()
	if len(sent) != 2 {
		t.Fatalf("%d model calls, want 2", len(sent))
	}
	msgs := sent[1].Messages
	last := msgs[len(msgs)-1]
	if len(msgs) != 3 || last.Role != forge.RoleUser || !strings.Contains(last.Parts[0].Text, "/priority") ||
		!strings.Contains(last.Parts[0].Text, `"triage"`) {
		t.Fatalf("repair call was sent %+v", msgs)
	}
	// The note is a stored message, marked, so the next turn's model view
	// (a replay) is what the model saw.
	stored, _, err := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID})
	if err != nil || len(stored) != 4 {
		t.Fatalf("messages %v %d", err, len(stored))
	}
	note := stored[2]
	if note.Role != forge.RoleUser || note.TurnID != turn.ID || !strings.Contains(string(note.Parts[0].Data), `"kind":"output_repair"`) ||
		*stored[3].ParentID != note.ID {
		t.Fatalf("repair note %+v data %s", note, note.Parts[0].Data)
	}
	h.model.push(reply{deltas: []string{`{"priority":"low"}`}})
	next := h.run(s.ID, msg("and now?"))
	if next.Status != forge.TurnDone {
		t.Fatalf("next turn %s %+v", next.Status, next.Error)
	}
	replay := h.model.sent()[2].Messages
	if len(replay) != 5 || replay[2].Role != forge.RoleUser || replay[2].Parts[0].Text != last.Parts[0].Text {
		t.Fatalf("next turn's view %+v", replay)
	}
}

func TestOutputSchemaInvalidTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", triage)
	s := h.session("a")
	h.model.push(reply{deltas: []string{`{"priority":"urgent"}`}}, reply{deltas: []string{`not json`}}, reply{deltas: []string{`{"priority":"low"}`}})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeOutputInvalid || turn.Output != nil {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
	if !strings.Contains(turn.Error.Message, "not valid JSON") || len(h.model.sent()) != 2 {
		t.Fatalf("error %q after %d calls", turn.Error.Message, len(h.model.sent()))
	}
}

func TestOutputSchemaNoRetries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", func(a *forge.Agent) {
		triage(a)
		zero := 0
		a.OutputRetries = &zero
	})
	s := h.session("a")
	h.model.push(reply{deltas: []string{`{}`}}, reply{deltas: []string{`{"priority":"low"}`}})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeOutputInvalid || len(h.model.sent()) != 1 {
		t.Fatalf("turn %s %+v after %d calls", turn.Status, turn.Error, len(h.model.sent()))
	}
}

func TestOutputSchemaTurnOverridesAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", triage)
	s := h.session("a")
	req := msg("hi")
	req.OutputSchema = &forge.OutputSchema{Name: "count", Schema: json.RawMessage(`{"type":"integer"}`)}
	h.model.push(reply{deltas: []string{`{"priority":"low"}`}}, reply{deltas: []string{`42`}})
	turn := h.run(s.ID, req)
	if turn.Status != forge.TurnDone || string(turn.Output.JSON) != `42` {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
	for i, r := range h.model.sent() {
		if r.OutputSchema == nil || r.OutputSchema.Name != "count" {
			t.Fatalf("call %d asked for %+v", i, r.OutputSchema)
		}
	}
	// The next turn, without its own, has the agent's again.
	h.model.push(reply{deltas: []string{`{"priority":"low"}`}})
	if next := h.run(s.ID, msg("again")); next.Status != forge.TurnDone || string(next.Output.JSON) != `{"priority":"low"}` {
		t.Fatalf("next turn %s %+v", next.Status, next.Error)
	}
}

func TestOutputSchemaToolsBeforeAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", func(a *forge.Agent) {
		triage(a)
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"x"}`)}}, reply{deltas: []string{`{"priority":"low"}`}})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnDone || string(turn.Output.JSON) != `{"priority":"low"}` || turn.Iterations != 2 {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
	if sent := h.model.sent(); len(sent[0].Tools) != 1 || sent[0].OutputSchema == nil {
		t.Fatalf("first call: tools %d schema %v", len(sent[0].Tools), sent[0].OutputSchema)
	}
}

func TestOutputSchemaPlainAgentUnchanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{`not json`}})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnDone || turn.Output.JSON != nil || h.model.sent()[0].OutputSchema != nil {
		t.Fatalf("turn %s %+v", turn.Status, turn.Output)
	}
}

func TestOutputSchemaRefusedBeforeStoring(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSchemas)
	h.agent("a", nil)
	s := h.session("a")
	deep := strings.Repeat(`{"items":`, 40) + `{}` + strings.Repeat(`}`, 40)
	for name, sch := range map[string]*forge.OutputSchema{
		"bad name":       {Name: "tri age", Schema: json.RawMessage(`{}`)},
		"no schema":      {Name: "x"},
		"not an object":  {Name: "x", Schema: json.RawMessage(`[]`)},
		"not a schema":   {Name: "x", Schema: json.RawMessage(`{"type":"objekt"}`)},
		"remote ref":     {Name: "x", Schema: json.RawMessage(`{"$ref":"http://169.254.169.254/latest"}`)},
		"too deep":       {Name: "x", Schema: json.RawMessage(deep)},
		"too large":      {Name: "x", Schema: json.RawMessage(`{"description":"` + strings.Repeat("a", forge.MaxOutputSchemaBytes) + `"}`)},
		"malformed json": {Name: "x", Schema: json.RawMessage(`{"type":`)},
	} {
		req := msg("hi")
		req.OutputSchema = sch
		_, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, req)
		if !errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), "output_schema") {
			t.Errorf("%s: StartTurn = %v, want invalid_request naming output_schema", name, err)
		}
	}
	if evs := h.events(s.ID, 0); len(evs) != 0 {
		t.Fatalf("refused turns stored %d events", len(evs))
	}
}

func TestOutputSchemaWithoutCompiler(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", triage)
	s := h.session("a")
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("hi")); !errors.Is(err, forge.ErrInvalid) {
		t.Fatalf("StartTurn = %v, want invalid_request", err)
	}
	if err := h.eng.CheckOutputSchema(&forge.OutputSchema{Name: "x", Schema: json.RawMessage(`{}`)}, "output_schema"); !errors.Is(err, forge.ErrInvalid) {
		t.Fatalf("CheckOutputSchema = %v", err)
	}
}
