package openai_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

const triageSchema = `{"type": "object", "properties": {"priority": {"enum": ["low", "high"]}, "score": {"type": "number", "maximum": 100000000000000000000001}}, "required": ["priority"], "additionalProperties": false}`

func withSchema(strict bool) *forge.ModelRequest {
	return &forge.ModelRequest{Model: "m",
		Messages:     []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "site down"}}}},
		Tools:        []forge.ToolDef{{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		OutputSchema: &forge.OutputSchema{Name: "triage", Schema: json.RawMessage(triageSchema), Strict: strict}}
}

func drain(t *testing.T, m forge.Model, req *forge.ModelRequest) string {
	t.Helper()
	var text strings.Builder
	for ev, err := range m.Stream(context.Background(), req) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == forge.TextDelta {
			text.WriteString(ev.Delta)
		}
	}
	return text.String()
}

// TestChatSendsOutputSchema: Chat Completions gets response_format
// json_schema with the schema as given (numbers exact), its name and strict,
// next to the tools.
func TestChatSendsOutputSchema(t *testing.T) {
	srv := openaitest.New(t)
	m := openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini")
	for _, strict := range []bool{true, false} {
		srv.Enqueue(openaitest.Text(`{"priority":"high"}`))
		if got := drain(t, m, withSchema(strict)); got != `{"priority":"high"}` {
			t.Fatalf("text %q", got)
		}
		r, ok := srv.LastRequest()
		if !ok || r.ResponseFormat == nil || r.ResponseFormat.Type != "json_schema" || r.ResponseFormat.JSONSchema == nil {
			t.Fatalf("request %s", r.Body)
		}
		js := r.ResponseFormat.JSONSchema
		if js.Name != "triage" || js.Strict == nil || *js.Strict != strict || len(r.Tools) != 1 {
			t.Fatalf("response_format %+v tools %d", js, len(r.Tools))
		}
		sameJSON(t, js.Schema, json.RawMessage(triageSchema))
		if !strings.Contains(string(js.Schema), "100000000000000000000001") {
			t.Fatalf("schema numbers changed: %s", js.Schema)
		}
	}
}

// TestChatWithoutOutputSchema: a plain request sends no response_format.
func TestChatWithoutOutputSchema(t *testing.T) {
	srv := openaitest.New(t)
	m := openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini")
	srv.Enqueue(openaitest.Text("hi"))
	req := withSchema(false)
	req.OutputSchema = nil
	drain(t, m, req)
	if r, _ := srv.LastRequest(); r.ResponseFormat != nil || strings.Contains(string(r.Body), "response_format") {
		t.Fatalf("request %s", r.Body)
	}
}

// TestResponsesSendsOutputSchema: the Responses API gets text.format
// json_schema with name, schema (numbers exact) and strict.
func TestResponsesSendsOutputSchema(t *testing.T) {
	srv := openaitest.New(t)
	m := openai.NewResponses(openai.Config{BaseURL: srv.URL()}).Model("gpt-5-mini")
	srv.Enqueue(openaitest.Text(`{"priority":"low"}`))
	if got := drain(t, m, withSchema(true)); got != `{"priority":"low"}` {
		t.Fatalf("text %q", got)
	}
	r, ok := srv.LastResponsesRequest()
	if !ok || r.Text == nil || r.Text.Format == nil {
		t.Fatalf("request %s", r.Body)
	}
	f := r.Text.Format
	if f.Type != "json_schema" || f.Name != "triage" || f.Strict == nil || !*f.Strict || len(r.Tools) != 1 {
		t.Fatalf("text.format %+v", f)
	}
	sameJSON(t, f.Schema, json.RawMessage(triageSchema))
	if !strings.Contains(string(f.Schema), "100000000000000000000001") {
		t.Fatalf("schema numbers changed: %s", f.Schema)
	}
}

// TestOutputSchemaNotAnObject: a schema that is not a JSON object (the
// engine refuses them; a direct caller may not) fails the call before
// anything is sent.
func TestOutputSchemaNotAnObject(t *testing.T) {
	srv := openaitest.New(t)
	for name, m := range map[string]forge.Model{
		"chat":      openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini"),
		"responses": openai.NewResponses(openai.Config{BaseURL: srv.URL()}).Model("gpt-5-mini"),
	} {
		req := withSchema(true)
		req.OutputSchema.Schema = json.RawMessage(`[1]`)
		var failed bool
		for _, err := range m.Stream(context.Background(), req) {
			failed = failed || err != nil
		}
		if !failed {
			t.Errorf("%s: the call did not fail", name)
		}
	}
	if n := len(srv.Requests()) + len(srv.ResponsesRequests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// TestFakeRefusesBadFormats: the fake refuses a format the real API
// refuses, so the tests above would notice a malformed one.
func TestFakeRefusesBadFormats(t *testing.T) {
	srv := openaitest.New(t)
	m := openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini")
	req := withSchema(true)
	req.OutputSchema.Name = "bad name"
	var err error
	for _, e := range m.Stream(context.Background(), req) {
		if e != nil {
			err = e
		}
	}
	if err == nil || !strings.Contains(err.Error(), "response_format.json_schema.name") {
		t.Fatalf("err = %v", err)
	}
}
