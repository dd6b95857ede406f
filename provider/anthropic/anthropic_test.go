package anthropic_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/internal/providertest"
)

func user(text string) forge.ModelMessage {
	return forge.ModelMessage{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: text}}}
}

func hello() *forge.ModelRequest {
	return &forge.ModelRequest{Model: "claude-sonnet-4-5", Messages: []forge.ModelMessage{user("Hello")}}
}

func newModel(t testing.TB) (*anthropictest.Server, forge.Model) {
	srv := anthropictest.New(t)
	srv.SetAPIKey("sk-ant-test")
	return srv, anthropic.New(anthropic.Config{APIKey: "sk-ant-test", BaseURL: srv.URL()}).Model("claude-sonnet-4-5")
}

const sig = `{"type":"thinking","signature":"EqQBCkgIARABGAIiQL2QgdJpS8Mhbq8H0BkZG5a0hkD7tAj/F2eu0xyVBo5qOmJmG3kLKtYKpRWZ6ctlG4OrB2mNuM4HUvdnuStPJdYSDJlPjD4zZc6QGuzmghoMkw4ry/eb2XIKjBqQIjC8Mk6hwRBcWcSCLHjWBqjmYu7ncqUEJ91DjaGiwJQt5sJx4SwXq4RdMRnuwSnsN4UqGFrgNikMc9R0RmgVRtk8b3MeXVtGLf0B/w=="}`

func TestFixtures(t *testing.T) {
	t.Parallel()
	providertest.Fixtures(t, []providertest.Fixture{
		{File: "anthropic_text.sse", Want: []string{
			"text+", "text:Hello", "text:! Café \"Ω\"\n", "text:<ok> & done 🚀.", "text-",
			"finish:stop in=25 out=15 read=0 write=0 think=0"}},
		{File: "anthropic_parallel_tools.sse", Want: []string{
			"text+", "text:I'll check", "text: both cities.", "text-",
			`call:toolu_01T1x1fJ34qAmk2tNTrN7Up6 get_weather {"city": "Paris", "unit": "celsius"}`,
			`call:toolu_01Hn4sZ7uKc1Ye8WdQ3bMx6R get_weather {"city": "Tōkyō"}`,
			`call:toolu_01Bq2Xw9oPz3nCfLd8VkRt4Y get_time {}`,
			// message_delta carries only output_tokens: the rest comes
			// from message_start. InputTokens is the whole prompt:
			// input_tokens 472 + cache reads 1024 + cache writes 312.
			"finish:tool_calls in=1808 out=89 read=1024 write=312 think=0"}},
		{File: "anthropic_thinking.sse", Want: []string{
			"reason+", "reason:The user asks for 27 * 453.", "reason:\n27 * 453 = 12231.", "reason- " + sig,
			"text+", "text:27 × 453", "text: = 12,231.", "text-",
			"finish:stop in=36 out=98 read=0 write=0 think=71"}},
		{File: "anthropic_redacted_thinking_tool.sse", Want: []string{
			"reason+", "reason:I should look up the time.",
			`reason- {"type":"thinking","signature":"ErUBCkYIBRgCIkBvZ2FmZnVzY2F0ZWQtc2lnbmF0dXJlLWZvci10ZXN0aW5nLW9ubHk="}`,
			"reason+",
			`reason- {"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pbeXJDz2xzRPhbGEvKhSy5Tt0ZMDFpzc0lK4SfqJZXbZg3A=="}`,
			// Empty input (only an empty fragment) is {}.
			`call:toolu_01Vx9Qm3Lp7Nz2RkWc5TyB8e get_time {}`,
			"finish:tool_calls in=310 out=61 read=0 write=0 think=0"}},
		{File: "anthropic_refusal.sse", Want: []string{
			"text+", "text:I can", "text-", "finish:content_filter in=31 out=3 read=0 write=0 think=0"}},
		{File: "compat_data_only.sse", Want: []string{
			// The input given whole in content_block_start.
			`call:toolu_proxy_1 get_weather {"city":"Rome"}`,
			"finish:tool_calls in=12 out=9 read=0 write=0 think=0"}},
		{File: "anthropic_error_event.sse", Want: []string{"text+", "text:Par"},
			Err: &forge.ModelError{Provider: "anthropic", StatusCode: 529, Message: "Overloaded", Retryable: true}},
		{File: "anthropic_max_tokens_tool_input.sse", Want: []string{"text+", "text:Writing the file.", "text-"},
			Err: &forge.ModelError{Provider: "anthropic", Message: `the reply reached max_tokens (16384) while writing the input of a call to "write_file"`}},
	}, func(t *testing.T, sse []byte) forge.Model {
		srv, m := newModel(t)
		srv.Enqueue(anthropictest.Raw(sse))
		return m
	})
}

// TestBuilders: what only the Messages API streams (signed and redacted
// thinking, its own stop reasons); the conformance suite checks the rest.
func TestBuilders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp anthropictest.Response
		want []string
	}{
		{"thinking then text", anthropictest.Thinking("Think", "ing").Text("Done").Tokens(anthropictest.Tokens{Input: 5, Output: 9, CacheRead: 3, CacheWrite: 2, Thinking: 6}), []string{
			"reason+", "reason:Think", "reason:ing", `reason- {"type":"thinking","signature":"` + anthropictest.Sign("Thinking") + `"}`,
			"text+", "text:Done", "text-",
			"finish:stop in=10 out=9 read=3 write=2 think=6"}},
		{"redacted thinking", anthropictest.RedactedThinking("opaque==").Text("ok").Usage(1, 1), []string{
			"reason+", `reason- {"type":"redacted_thinking","data":"opaque=="}`, "text+", "text:ok", "text-",
			"finish:stop in=1 out=1 read=0 write=0 think=0"}},
		{"context window exceeded", anthropictest.Text("cut").StopReason("model_context_window_exceeded").Usage(4, 1), []string{
			"text+", "text:cut", "text-", "finish:length in=4 out=1 read=0 write=0 think=0"}},
		{"stop sequence", anthropictest.Text("a").StopReason("stop_sequence").Usage(4, 1), []string{
			"text+", "text:a", "text-", "finish:stop in=4 out=1 read=0 write=0 think=0"}},
		{"complete call then max tokens", anthropictest.ToolUse(anthropictest.Call{ID: "toolu_1", Name: "x", Input: `{"a":1}`}).StopReason("max_tokens").Usage(4, 1), []string{
			`call:toolu_1 x {"a":1}`, "finish:length in=4 out=1 read=0 write=0 think=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := providertest.Collect(t.Context(), m, hello())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A reply cut by max_tokens inside a tool call's input is an error, not a
// call with broken arguments, whether or not the block was closed.
func TestMaxTokensInsideToolInput(t *testing.T) {
	t.Parallel()
	for _, cut := range []struct {
		name string
		resp anthropictest.Response
	}{
		{"closed block", anthropictest.Text("Writing.").ToolUse(anthropictest.Call{Name: "write_file", Input: `{"path":"a.txt","content":"lo`}).StopReason("max_tokens")},
		{"valid prefix", anthropictest.ToolUse(anthropictest.Call{Name: "write_file", Input: `{"path":"a.txt"`}).StopReason("max_tokens")},
	} {
		t.Run(cut.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(cut.resp)
			req := hello()
			req.Params.MaxTokens = ptr(int64(300))
			got, err := providertest.Collect(t.Context(), m, req)
			me := providertest.ModelError(t, err)
			if me.Retryable || !strings.Contains(me.Message, `max_tokens (300) while writing the input of a call to "write_file"`) {
				t.Errorf("error = %+v", me)
			}
			for _, ev := range got {
				if strings.HasPrefix(ev, "call:") || strings.HasPrefix(ev, "finish:") {
					t.Errorf("event %q after a cut call", ev)
				}
			}
		})
	}
	// The block still open when message_delta says max_tokens.
	srv, m := newModel(t)
	srv.Enqueue(anthropictest.Raw([]byte(`event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"edit","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":20}}

event: message_stop
data: {"type":"message_stop"}
`)))
	_, err := providertest.Collect(t.Context(), m, hello())
	if me := providertest.ModelError(t, err); !strings.Contains(me.Message, `"edit"`) {
		t.Errorf("error = %+v", me)
	}
	// Invalid JSON without max_tokens is passed on raw: the engine answers
	// the call with an error the model can correct.
	srv.Enqueue(anthropictest.ToolUse(anthropictest.Call{ID: "toolu_2", Name: "x", Input: `{"a":`}).StopReason("tool_use"))
	got, err := providertest.Collect(t.Context(), m, hello())
	if err != nil || !reflect.DeepEqual(got, []string{`call:toolu_2 x {"a":`, got[len(got)-1]}) {
		t.Errorf("events %q, %v", got, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestThinkingRoundTrip checks that thinking blocks, redacted ones too,
// go back to the API exactly as they came: text and signature unchanged,
// in order, before the tool_use they led to; a changed one is refused.
// (The conformance suite checks the replay every provider makes.)
func TestThinkingRoundTrip(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(
		anthropictest.Thinking("I need ", "the weather.").RedactedThinking("cmVkYWN0ZWQ=").Text("Checking.").
			ToolUse(anthropictest.Call{Name: "get_weather", Input: `{"city":"Paris"}`}),
		anthropictest.Text("Sunny."),
	)
	req := hello()
	req.Params.ReasoningEffort = "medium"
	req.Tools = []forge.ToolDef{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
	var first []forge.ModelEvent
	for ev, err := range m.Stream(t.Context(), req) {
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev)
	}
	msg := providertest.AssistantMessage(first)
	if len(msg.Parts) != 4 {
		t.Fatalf("first reply: %+v", msg)
	}
	req.Messages = append(req.Messages, msg, forge.ModelMessage{Role: forge.RoleTool, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolResult, CallID: "call_1", Name: "get_weather", Output: "18C"}}})
	if got, err := providertest.Collect(t.Context(), m, req); err != nil || got[1] != "text:Sunny." {
		t.Fatalf("second reply: %q %v", got, err)
	}
	r, _ := srv.LastRequest()
	a := r.Messages[1]
	want := []anthropictest.Block{
		{Type: "thinking", Thinking: ptr("I need the weather."), Signature: ptr(anthropictest.Sign("I need the weather."))},
		{Type: "redacted_thinking", Data: "cmVkYWN0ZWQ="},
		{Type: "text", Text: "Checking."},
		{Type: "tool_use", ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)},
	}
	if !reflect.DeepEqual(a.Content, want) {
		t.Errorf("assistant message sent back:\n got %+v\nwant %+v", a.Content, want)
	}
	if r.Thinking == nil || r.Thinking.Type != "enabled" || r.Thinking.BudgetTokens != 4096 {
		t.Errorf("thinking %+v, want the medium budget", r.Thinking)
	}

	// A changed thinking text is refused, as the API refuses it.
	req.Messages[1].Parts[0].Text = "I need the weather!"
	_, err := providertest.Collect(t.Context(), m, req)
	if me := providertest.ModelError(t, err); me.StatusCode != 400 || me.Retryable || !strings.Contains(me.Message, "Invalid `signature` in `thinking` block") {
		t.Errorf("error = %+v", me)
	}
}

// TestHTTPErrors: the errors only the Messages API gives; the
// conformance suite checks what every API answers alike.
func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		resp       anthropictest.Response
		status     int
		retryable  bool
		retryAfter time.Duration
		overflow   bool
		message    string
	}{
		{"529 overloaded", anthropictest.Status(529, ""), 529, true, 0, false, "Overloaded"},
		{"x-should-retry false", anthropictest.Status(500, "").Header("x-should-retry", "false"), 500, false, 0, false, "Internal"},
		{"context limit", anthropictest.Status(400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and `+"`max_tokens`"+` exceed context limit: 197000 + 16384 > 200000, decrease input length or `+"`max_tokens`"+` and try again"}}`), 400, false, 0, true, "exceed context limit"},
		{"413", anthropictest.Status(413, ""), 413, false, 0, true, "maximum allowed number of bytes"},
		{"prompt too long", anthropictest.PromptTooLong(208310, 200000), 400, false, 0, true, "prompt is too long: 208310 tokens > 200000 maximum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := providertest.Collect(t.Context(), m, hello())
			if len(got) != 0 {
				t.Errorf("events before the error: %q", got)
			}
			me := providertest.ModelError(t, err)
			if me.StatusCode != tt.status || me.Retryable != tt.retryable || me.RetryAfter != tt.retryAfter ||
				me.ContextOverflow != tt.overflow || !strings.Contains(me.Message, tt.message) || me.Provider != "anthropic" {
				t.Errorf("error = %+v, want status %d retryable %v retry after %v overflow %v message ~ %q",
					me, tt.status, tt.retryable, tt.retryAfter, tt.overflow, tt.message)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

// TestMidStreamFailures: an error event's type says its status and
// whether a retry can help (the conformance suite checks cut streams).
func TestMidStreamFailures(t *testing.T) {
	t.Parallel()
	// Events of Text("a","b","c"): message_start, content_block_start,
	// ping, 3 deltas, content_block_stop, message_delta, message_stop.
	tests := []struct {
		name      string
		resp      anthropictest.Response
		want      []string
		status    int
		retryable bool
		message   string
	}{
		{"overloaded", anthropictest.Text("a", "b", "c").ErrorAfter(4, "overloaded_error", "Overloaded"), []string{"text+", "text:a"}, 529, true, "Overloaded"},
		{"api error", anthropictest.Text("a").ErrorAfter(1, "api_error", "Internal server error"), nil, 500, true, "Internal server error"},
		{"invalid request", anthropictest.Text("a").ErrorAfter(1, "invalid_request_error", "bad"), nil, 400, false, "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := providertest.Collect(t.Context(), m, hello())
			me := providertest.ModelError(t, err)
			if me.Retryable != tt.retryable || me.StatusCode != tt.status || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v", me)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestRequestHeaders: the key goes in both x-api-key and a bearer token,
// with the API version Forge speaks; a base URL ending in /v1/ is the
// root; the SDK's telemetry settings from the environment change nothing.
// (The conformance suite checks the configuration wins over the rest of
// the environment.)
func TestRequestHeaders(t *testing.T) {
	t.Setenv("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "content")
	srv := anthropictest.New(t)
	srv.SetAPIKey("sk-ant-config")
	m := anthropic.New(anthropic.Config{APIKey: "sk-ant-config", BaseURL: srv.URL() + "/v1/"}).Model("claude")
	if _, err := providertest.Collect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	r, _ := srv.LastRequest()
	if got := [3]string{r.Header.Get("x-api-key"), r.Header.Get("Authorization"), r.Header.Get("anthropic-version")}; got != [3]string{"sk-ant-config", "Bearer sk-ant-config", "2026-10-21"} {
		t.Errorf("x-api-key, Authorization, anthropic-version = %q", got)
	}
	if r.Header.Get("X-Stainless-Retry-Count") != "0" {
		t.Errorf("headers %v", r.Header)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  forge.ModelRequest
		msg  string
	}{
		{"schema not an object", forge.ModelRequest{Messages: hello().Messages, Tools: []forge.ToolDef{
			{Name: "x", InputSchema: json.RawMessage(`{"type":"string"}`)}}}, `tool "x": input schema has type "string"`},
		{"call in a user message", forge.ModelRequest{Messages: []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{
			{Type: forge.ModelPartToolCall, CallID: "c", Name: "x"}}}}}, "a tool call in a user message"},
		{"effort without room", forge.ModelRequest{Messages: hello().Messages, Params: forge.ModelParams{
			MaxTokens: ptr(int64(2000)), ReasoningEffort: "high"}}, `reasoning_effort "high" needs model_params.max_tokens above 2047`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			_, err := providertest.Collect(t.Context(), m, &tt.req)
			if me := providertest.ModelError(t, err); me.Retryable || !strings.Contains(me.Message, tt.msg) {
				t.Errorf("error = %+v, want %q", me, tt.msg)
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
}
