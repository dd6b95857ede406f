package anthropic_test

import (
	"encoding/json"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/internal/providertest"
)

func TestWireRequest(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	maxTokens, temp := int64(512), 0.2
	req := &forge.ModelRequest{
		Model:  "claude-sonnet-4-5",
		System: "You are terse.",
		Messages: []forge.ModelMessage{
			user("Weather in Paris and Tokyo?"),
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				{Type: forge.ModelPartReasoning, Text: "two lookups", Provider: json.RawMessage(`{"type":"thinking","signature":"c2lnMQ=="}`)},
				{Type: forge.ModelPartText, Text: "Checking "},
				{Type: forge.ModelPartText, Text: "both."},
				{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`),
					Provider: json.RawMessage(`{"call_id":"toolu_01A"}`)},
				{Type: forge.ModelPartToolCall, CallID: "call_2", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Tokyo"}`)},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_1", Output: "18C sunny"},
				{Type: forge.ModelPartToolResult, CallID: "call_2", Output: "denied: not allowed", IsError: true},
			}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				{Type: forge.ModelPartReasoning, Provider: json.RawMessage(`{"type":"redacted_thinking","data":"ZW5j"}`)},
				{Type: forge.ModelPartToolCall, CallID: "call_3", Name: "now"},
				{Type: forge.ModelPartToolCall, CallID: "call_4", Name: "now", Arguments: json.RawMessage(`"not json: {"`)},
			}},
			// Two tool messages in a row (as after a resumed turn) and a
			// user message: one user message, results first.
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_3", Output: "12:00"},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_4", Output: "", IsError: true},
			}},
			user("Also: hurry."),
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Paris: 18C."}}},
			{Role: forge.RoleUser, Parts: []forge.ModelPart{
				{Type: forge.ModelPartText, Text: "Thanks."},
				{Type: forge.ModelPartText, Text: " "},
				{Type: forge.ModelPartText, Text: "And Rome?"},
			}},
		},
		Tools:  providertest.Tools(),
		Params: forge.ModelParams{MaxTokens: &maxTokens, Temperature: &temp},
	}
	if _, err := providertest.Collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r, ok := srv.LastRequest()
	if !ok {
		t.Fatal("no request")
	}
	providertest.SameJSON(t, "request body", r.Body, `{
	  "model": "claude-sonnet-4-5",
	  "max_tokens": 512,
	  "stream": true,
	  "system": [{"type": "text", "text": "You are terse."}],
	  "cache_control": {"type": "ephemeral"},
	  "messages": [
	    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Tokyo?"}]},
	    {"role": "assistant", "content": [
	      {"type": "thinking", "thinking": "two lookups", "signature": "c2lnMQ=="},
	      {"type": "text", "text": "Checking "},
	      {"type": "text", "text": "both."},
	      {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
	      {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Tokyo"}}]},
	    {"role": "user", "content": [
	      {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "18C sunny"}]},
	      {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "denied: not allowed"}], "is_error": true}]},
	    {"role": "assistant", "content": [
	      {"type": "redacted_thinking", "data": "ZW5j"},
	      {"type": "tool_use", "id": "call_3", "name": "now", "input": {}},
	      {"type": "tool_use", "id": "call_4", "name": "now", "input": {}}]},
	    {"role": "user", "content": [
	      {"type": "tool_result", "tool_use_id": "call_3", "content": [{"type": "text", "text": "12:00"}]},
	      {"type": "tool_result", "tool_use_id": "call_4", "is_error": true},
	      {"type": "text", "text": "Also: hurry."}]},
	    {"role": "assistant", "content": [{"type": "text", "text": "Paris: 18C."}]},
	    {"role": "user", "content": [{"type": "text", "text": "Thanks."}, {"type": "text", "text": "And Rome?"}]}
	  ],
	  "tools": [
	    {"name": "get_weather", "description": "Weather of a city", "input_schema":
	      {"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}},
	    {"name": "now", "input_schema": {"type": "object", "properties": {}}},
	    {"name": "ping", "input_schema": {"type": "object", "properties": {}}},
	    {"name": "untyped", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "$defs": {"x": {}}}}
	  ]
	}`)
}

// TestReasoningEffort checks the thinking configuration per model family
// and the max_tokens that goes with it.
func TestReasoningEffort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model     string
		effort    string
		maxTokens *int64
		want      string // thinking, output_config and max_tokens, as JSON
	}{
		{"claude-sonnet-4-5-20250929", "", nil, `{"max_tokens":16384}`},
		{"claude-3-5-haiku-latest", "", nil, `{"max_tokens":8192}`},
		{"claude-3-haiku-20240307", "", nil, `{"max_tokens":4096}`},
		{"some-proxy-model", "", nil, `{"max_tokens":4096}`},
		{"claude-sonnet-4-5-20250929", "low", nil, `{"max_tokens":17408,"thinking":{"type":"enabled","budget_tokens":1024}}`},
		{"claude-haiku-4-5-20251001", "minimal", nil, `{"max_tokens":17408,"thinking":{"type":"enabled","budget_tokens":1024}}`},
		{"claude-3-7-sonnet-20250219", "high", nil, `{"max_tokens":32768,"thinking":{"type":"enabled","budget_tokens":16384}}`},
		{"claude-opus-4-1", "medium", ptr(int64(6000)), `{"max_tokens":6000,"thinking":{"type":"enabled","budget_tokens":4096}}`},
		{"claude-opus-4-1", "high", ptr(int64(6000)), `{"max_tokens":6000,"thinking":{"type":"enabled","budget_tokens":3000}}`},
		{"claude-sonnet-4-6", "medium", nil, `{"max_tokens":20480,"thinking":{"type":"adaptive"},"output_config":{"effort":"medium"}}`},
		{"claude-opus-4-7", "minimal", ptr(int64(1000)), `{"max_tokens":1000,"thinking":{"type":"adaptive"},"output_config":{"effort":"low"}}`},
		{"claude-opus-5", "high", nil, `{"max_tokens":32768,"thinking":{"type":"adaptive"},"output_config":{"effort":"high"}}`},
		{"claude-haiku-5-5", "low", nil, `{"max_tokens":17408,"thinking":{"type":"adaptive"},"output_config":{"effort":"low"}}`},
		{"claude-mythos-preview", "high", nil, `{"max_tokens":20480,"thinking":{"type":"adaptive"},"output_config":{"effort":"high"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.effort, func(t *testing.T) {
			srv, m := newModel(t)
			req := hello()
			req.Model = tt.model
			req.Params = forge.ModelParams{ReasoningEffort: tt.effort, MaxTokens: tt.maxTokens, Temperature: ptr(0.7)}
			if _, err := providertest.Collect(t.Context(), m, req); err != nil {
				t.Fatal(err)
			}
			r, _ := srv.LastRequest()
			var body map[string]json.RawMessage
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			got := map[string]json.RawMessage{}
			for _, k := range []string{"max_tokens", "thinking", "output_config", "temperature", "top_p", "top_k"} {
				if v, ok := body[k]; ok {
					got[k] = v
				}
			}
			g, _ := json.Marshal(got)
			providertest.SameJSON(t, "request body", g, tt.want)
		})
	}
}

// With budget thinking, a tool loop whose assistant message has no thinking
// block (it ran without thinking) is finished without thinking, as the API
// requires; the next user turn thinks again.
func TestThinkingOffInsideLoopWithoutThinking(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	req := hello()
	req.Params.ReasoningEffort = "low"
	req.Messages = append(req.Messages,
		forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
			{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "x", Arguments: json.RawMessage(`{}`)}}},
		forge.ModelMessage{Role: forge.RoleTool, Parts: []forge.ModelPart{
			{Type: forge.ModelPartToolResult, CallID: "call_1", Output: "done"}}})
	if _, err := providertest.Collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	if r, _ := srv.LastRequest(); r.Thinking != nil {
		t.Errorf("thinking %+v inside a loop without thinking", r.Thinking)
	}
	req.Messages = append(req.Messages, forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
		{Type: forge.ModelPartText, Text: "Done."}}}, user("Next"))
	if _, err := providertest.Collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	if r, _ := srv.LastRequest(); r.Thinking == nil || r.Thinking.Type != "enabled" {
		t.Errorf("thinking %+v on a new user turn", r.Thinking)
	}
}

func TestPromptCacheDisabled(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	m := anthropic.New(anthropic.Config{BaseURL: srv.URL(), DisablePromptCache: true}).Model("claude-sonnet-4-5")
	if _, err := providertest.Collect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	if r, _ := srv.LastRequest(); r.CacheControl != nil {
		t.Errorf("cache_control %s sent", r.CacheControl)
	}
}
