package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
)

const triageSchema = `{"type": "object", "properties": {"priority": {"enum": ["low", "high"]}, "score": {"type": "number", "maximum": 100000000000000000000001}}, "required": ["priority"], "additionalProperties": false}`

// TestMessagesSendOutputSchema: the Messages API gets the schema as
// output_config.format (native structured output, numbers exact), the
// tools still offered and no tool forced; the answer streams as text.
func TestMessagesSendOutputSchema(t *testing.T) {
	srv := anthropictest.New(t)
	m := anthropic.New(anthropic.Config{APIKey: "sk-ant-test", BaseURL: srv.URL()}).Model("claude-sonnet-4-5")
	srv.Enqueue(anthropictest.Text(`{"priority":"high"}`))
	req := &forge.ModelRequest{Model: "claude-sonnet-4-5",
		Messages:     []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "site down"}}}},
		Tools:        []forge.ToolDef{{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		OutputSchema: &forge.OutputSchema{Name: "triage", Schema: json.RawMessage(triageSchema), Strict: true}}
	var text strings.Builder
	for ev, err := range m.Stream(context.Background(), req) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == forge.TextDelta {
			text.WriteString(ev.Delta)
		}
	}
	if text.String() != `{"priority":"high"}` {
		t.Fatalf("text %q", text.String())
	}
	r, ok := srv.LastRequest()
	if !ok || r.OutputConfig == nil || len(r.Tools) != 1 || len(r.ToolChoice) != 0 {
		t.Fatalf("request %s", r.Body)
	}
	var format struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(r.OutputConfig.Format, &format); err != nil || format.Type != "json_schema" {
		t.Fatalf("output_config.format %s (%v)", r.OutputConfig.Format, err)
	}
	var got, want any
	_ = json.Unmarshal(format.Schema, &got)
	_ = json.Unmarshal([]byte(triageSchema), &want)
	if !jsonEqual(got, want) || !strings.Contains(string(format.Schema), "100000000000000000000001") {
		t.Fatalf("schema sent %s", format.Schema)
	}

	// Without a schema, no format.
	req.OutputSchema = nil
	srv.Enqueue(anthropictest.Text("hi"))
	for range m.Stream(context.Background(), req) {
	}
	if r, _ := srv.LastRequest(); r.OutputConfig != nil && len(r.OutputConfig.Format) > 0 {
		t.Fatalf("plain request sent a format: %s", r.Body)
	}
}

// TestMessagesRefuseBadOutputSchema: a schema that is not an object fails
// the call before anything is sent.
func TestMessagesRefuseBadOutputSchema(t *testing.T) {
	srv := anthropictest.New(t)
	m := anthropic.New(anthropic.Config{APIKey: "sk-ant-test", BaseURL: srv.URL()}).Model("claude-sonnet-4-5")
	req := &forge.ModelRequest{Model: "claude-sonnet-4-5",
		Messages:     []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "x"}}}},
		OutputSchema: &forge.OutputSchema{Name: "x", Schema: json.RawMessage(`"string"`)}}
	var failed bool
	for _, err := range m.Stream(context.Background(), req) {
		failed = failed || err != nil
	}
	if !failed || len(srv.Requests()) != 0 {
		t.Fatalf("failed %v, %d requests", failed, len(srv.Requests()))
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
