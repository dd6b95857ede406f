package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/scripted"
)

var triageSchema = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"priority": map[string]any{"enum": []string{"low", "high"}}},
	"required":             []string{"priority"},
	"additionalProperties": false,
}

func schemaAgent(name string, retries any, steps ...scripted.Step) map[string]any {
	body := map[string]any{"name": name, "model": "scripted/echo",
		"model_params":  map[string]any{"script": scripted.Script(steps...)},
		"output_schema": map[string]any{"name": "triage", "schema": triageSchema, "strict": true}}
	if retries != nil {
		body["output_retries"] = retries
	}
	return body
}

func TestAgentOutputSchemaAnswer(t *testing.T) {
	s := newStack(t)
	var a map[string]any
	s.call("POST", "/v1/agents", schemaAgent("t", nil, scripted.Step{Text: `{"priority": "high"}`}), 201, &a)
	if a["output_retries"] != float64(1) || a["output_schema"].(map[string]any)["name"] != "triage" {
		t.Fatalf("agent %v", a)
	}
	ses := s.createSession("t")
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("site down"), 200, &turn)
	if turn.Status != forge.TurnDone || string(turn.Output.JSON) != `{"priority":"high"}` || turn.Output.Text != `{"priority": "high"}` {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
	var got forge.Turn
	s.call("GET", "/v1/sessions/"+ses.ID+"/turns/"+turn.ID, nil, 200, &got)
	if string(got.Output.JSON) != `{"priority":"high"}` {
		t.Fatalf("GET turn output %+v", got.Output)
	}
}

func TestAgentOutputSchemaInvalidAnswer(t *testing.T) {
	s := newStack(t)
	s.call("POST", "/v1/agents", schemaAgent("t", 0, scripted.Step{Text: `{"priority": "urgent"}`}, scripted.Step{Text: `{"priority": "low"}`}), 201, nil)
	ses := s.createSession("t")
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("site down"), 200, &turn)
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeOutputInvalid || turn.Iterations != 1 {
		t.Fatalf("turn %s %+v iterations %d", turn.Status, turn.Error, turn.Iterations)
	}
}

func TestTurnOutputSchemaRepair(t *testing.T) {
	s := newStack(t)
	s.createAgent("plain", scripted.Step{Text: "seven"}, scripted.Step{Text: "7"})
	ses := s.createSession("plain")
	body := msgTurn("how many?")
	body["output_schema"] = map[string]any{"name": "count", "schema": map[string]any{"type": "integer"}}
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", body, 200, &turn)
	if turn.Status != forge.TurnDone || string(turn.Output.JSON) != `7` || turn.Iterations != 2 {
		t.Fatalf("turn %s %+v %+v", turn.Status, turn.Error, turn.Output)
	}
	var msgs struct{ Data []forge.Message }
	s.call("GET", "/v1/sessions/"+ses.ID+"/messages", nil, 200, &msgs)
	if len(msgs.Data) != 4 || msgs.Data[2].Role != forge.RoleUser || !strings.Contains(string(msgs.Data[2].Parts[0].Data), "output_repair") {
		t.Fatalf("messages %+v", msgs.Data)
	}
}

func TestOutputSchemaRefused(t *testing.T) {
	s := newStack(t)
	s.createAgent("plain")
	ses := s.createSession("plain")
	deep := map[string]any{}
	for range 40 {
		deep = map[string]any{"items": deep}
	}
	bad := map[string]any{
		"not a schema":  map[string]any{"name": "x", "schema": map[string]any{"type": "objekt"}},
		"remote ref":    map[string]any{"name": "x", "schema": map[string]any{"$ref": "http://169.254.169.254/latest/meta-data"}},
		"file ref":      map[string]any{"name": "x", "schema": map[string]any{"$ref": "file:///etc/passwd"}},
		"too deep":      map[string]any{"name": "x", "schema": deep},
		"too large":     map[string]any{"name": "x", "schema": map[string]any{"description": strings.Repeat("a", forge.MaxOutputSchemaBytes)}},
		"bad name":      map[string]any{"name": "a b", "schema": map[string]any{}},
		"no name":       map[string]any{"schema": map[string]any{}},
		"array schema":  map[string]any{"name": "x", "schema": []any{}},
		"unknown field": map[string]any{"name": "x", "schema": map[string]any{}, "format": "json"},
		"not an object": "triage",
	}
	for name, os := range bad {
		agent := map[string]any{"name": "t", "model": "scripted/echo", "output_schema": os}
		if a := s.do(req{method: "POST", path: "/v1/agents", body: agent}); a.status != 400 || a.errCode() != "invalid_request" {
			t.Errorf("%s: create agent answered %s", name, a)
		}
		if a := s.do(req{method: "PUT", path: "/v1/agents/plain", body: map[string]any{"model": "scripted/echo", "output_schema": os}}); a.status != 400 {
			t.Errorf("%s: PUT agent answered %s", name, a)
		}
		turn := msgTurn("hi")
		turn["output_schema"] = os
		if a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns", body: turn}); a.status != 400 || a.errCode() != "invalid_request" {
			t.Errorf("%s: turn answered %s", name, a)
		}
	}
	for _, r := range []any{-1, 6, "1"} {
		body := schemaAgent("t", r)
		if a := s.do(req{method: "POST", path: "/v1/agents", body: body}); a.status != 400 {
			t.Errorf("output_retries %v: answered %s", r, a)
		}
	}
	s.call("GET", "/v1/agents/t", nil, 404, nil)
	var agent forge.Agent
	s.call("GET", "/v1/agents/plain", nil, 200, &agent)
	if agent.Version != 1 || agent.OutputSchema != nil {
		t.Fatalf("agent changed: %+v", agent)
	}
	var turns struct{ Data []json.RawMessage }
	s.call("GET", "/v1/sessions/"+ses.ID+"/turns", nil, 200, &turns)
	if len(turns.Data) != 0 {
		t.Fatalf("refused turns stored: %d", len(turns.Data))
	}
}
