package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// render writes events compactly: "text+", "text:Hel", "text-", "reason+",
// "reason:...", "reason-" (followed by the provider state, if any),
// "call:ID NAME ARGS", "finish:REASON in=N out=N read=N write=N think=N".
func render(ev forge.ModelEvent) string {
	switch ev.Type {
	case forge.TextStart:
		return "text+"
	case forge.TextDelta:
		return "text:" + ev.Delta
	case forge.TextEnd:
		return "text-"
	case forge.ReasoningStart:
		return "reason+"
	case forge.ReasoningDelta:
		return "reason:" + ev.Delta
	case forge.ReasoningEnd:
		return "reason-" + string(ev.Provider)
	case forge.ToolCallEvent:
		return fmt.Sprintf("call:%s %s %s", ev.ToolCall.ID, ev.ToolCall.Name, ev.ToolCall.Arguments)
	case forge.FinishEvent:
		u := ev.Finish.Usage
		return fmt.Sprintf("finish:%s in=%d out=%d read=%d write=%d think=%d", ev.Finish.Reason,
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens)
	}
	return fmt.Sprintf("unknown(%d)", ev.Type)
}

func collect(ctx context.Context, m forge.Model, req *forge.ModelRequest) ([]string, error) {
	var out []string
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return out, err
		}
		out = append(out, render(ev))
	}
	return out, nil
}

// reply streams req and returns its events, failing the test on an error.
func reply(t *testing.T, m forge.Model, req *forge.ModelRequest) []forge.ModelEvent {
	t.Helper()
	var evs []forge.ModelEvent
	for ev, err := range m.Stream(t.Context(), req) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// assistant builds the assistant message the engine would store from a
// reply's events.
func assistant(evs []forge.ModelEvent) (forge.ModelMessage, []forge.ToolCall) {
	m := forge.ModelMessage{Role: forge.RoleAssistant}
	var calls []forge.ToolCall
	var cur *forge.ModelPart
	for _, ev := range evs {
		switch ev.Type {
		case forge.TextStart, forge.ReasoningStart:
			typ := forge.ModelPartText
			if ev.Type == forge.ReasoningStart {
				typ = forge.ModelPartReasoning
			}
			m.Parts = append(m.Parts, forge.ModelPart{Type: typ})
			cur = &m.Parts[len(m.Parts)-1]
		case forge.TextDelta, forge.ReasoningDelta:
			cur.Text += ev.Delta
		case forge.TextEnd, forge.ReasoningEnd:
			cur.Provider = ev.Provider
		case forge.ToolCallEvent:
			calls = append(calls, *ev.ToolCall)
		}
	}
	for i, c := range calls {
		// The engine gives calls its own ids.
		m.Parts = append(m.Parts, forge.ModelPart{Type: forge.ModelPartToolCall,
			CallID: fmt.Sprintf("call_%d", i+1), Name: c.Name, Arguments: c.Arguments})
	}
	return m, calls
}

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

func modelError(t *testing.T, err error) *forge.ModelError {
	t.Helper()
	var me *forge.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *forge.ModelError", err, err)
	}
	return me
}

// body decodes a request body for comparison with a JSON literal.
func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.MarshalIndent(g, "", "  ")
		wb, _ := json.MarshalIndent(w, "", "  ")
		t.Errorf("request body:\n%s\nwant:\n%s", gb, wb)
	}
}

const sig = `{"type":"thinking","signature":"EqQBCkgIARABGAIiQL2QgdJpS8Mhbq8H0BkZG5a0hkD7tAj/F2eu0xyVBo5qOmJmG3kLKtYKpRWZ6ctlG4OrB2mNuM4HUvdnuStPJdYSDJlPjD4zZc6QGuzmghoMkw4ry/eb2XIKjBqQIjC8Mk6hwRBcWcSCLHjWBqjmYu7ncqUEJ91DjaGiwJQt5sJx4SwXq4RdMRnuwSnsN4UqGFrgNikMc9R0RmgVRtk8b3MeXVtGLf0B/w=="}`

func TestFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file    string
		want    []string
		wantErr string // substring of a ModelError's message
		retry   bool
	}{
		{file: "anthropic_text.sse", want: []string{
			"text+", "text:Hello", "text:! Café \"Ω\"\n", "text:<ok> & done 🚀.", "text-",
			"finish:stop in=25 out=15 read=0 write=0 think=0"}},
		{file: "anthropic_parallel_tools.sse", want: []string{
			"text+", "text:I'll check", "text: both cities.", "text-",
			`call:toolu_01T1x1fJ34qAmk2tNTrN7Up6 get_weather {"city": "Paris", "unit": "celsius"}`,
			`call:toolu_01Hn4sZ7uKc1Ye8WdQ3bMx6R get_weather {"city": "Tōkyō"}`,
			`call:toolu_01Bq2Xw9oPz3nCfLd8VkRt4Y get_time {}`,
			// message_delta carries only output_tokens: the rest comes
			// from message_start. InputTokens is the whole prompt:
			// input_tokens 472 + cache reads 1024 + cache writes 312.
			"finish:tool_calls in=1808 out=89 read=1024 write=312 think=0"}},
		{file: "anthropic_thinking.sse", want: []string{
			"reason+", "reason:The user asks for 27 * 453.", "reason:\n27 * 453 = 12231.", "reason-" + sig,
			"text+", "text:27 × 453", "text: = 12,231.", "text-",
			"finish:stop in=36 out=98 read=0 write=0 think=71"}},
		{file: "anthropic_redacted_thinking_tool.sse", want: []string{
			"reason+", "reason:I should look up the time.",
			`reason-{"type":"thinking","signature":"ErUBCkYIBRgCIkBvZ2FmZnVzY2F0ZWQtc2lnbmF0dXJlLWZvci10ZXN0aW5nLW9ubHk="}`,
			"reason+",
			`reason-{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pbeXJDz2xzRPhbGEvKhSy5Tt0ZMDFpzc0lK4SfqJZXbZg3A=="}`,
			// Empty input (only an empty fragment) is {}.
			`call:toolu_01Vx9Qm3Lp7Nz2RkWc5TyB8e get_time {}`,
			"finish:tool_calls in=310 out=61 read=0 write=0 think=0"}},
		{file: "anthropic_refusal.sse", want: []string{
			"text+", "text:I can", "text-", "finish:content_filter in=31 out=3 read=0 write=0 think=0"}},
		{file: "compat_data_only.sse", want: []string{
			// The input given whole in content_block_start.
			`call:toolu_proxy_1 get_weather {"city":"Rome"}`,
			"finish:tool_calls in=12 out=9 read=0 write=0 think=0"}},
		{file: "anthropic_error_event.sse", want: []string{"text+", "text:Par"},
			wantErr: "Overloaded", retry: true},
		{file: "anthropic_max_tokens_tool_input.sse", want: []string{"text+", "text:Writing the file.", "text-"},
			wantErr: `the reply reached max_tokens (16384) while writing the input of a call to "write_file"`},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".sse"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			srv, m := newModel(t)
			srv.Enqueue(anthropictest.Raw(data))
			got, err := collect(t.Context(), m, hello())
			if tt.wantErr != "" {
				me := modelError(t, err)
				if !strings.Contains(me.Message, tt.wantErr) || me.Provider != "anthropic" || me.Retryable != tt.retry {
					t.Errorf("error = %+v, want message containing %q, retryable %v", me, tt.wantErr, tt.retry)
				}
			} else if err != nil {
				t.Fatalf("stream error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestBuilders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp anthropictest.Response
		want []string
	}{
		{"text", anthropictest.Text("Hel", "lo").Usage(7, 2), []string{
			"text+", "text:Hel", "text:lo", "text-", "finish:stop in=7 out=2 read=0 write=0 think=0"}},
		{"parallel tool calls across fragments", anthropictest.Text("Checking.").ToolUse(
			anthropictest.Call{ID: "toolu_a", Name: "read_file", Input: `{"path":"some/long/path/name.txt"}`},
			anthropictest.Call{ID: "toolu_b", Name: "list_files", Input: `{"dir":"."}`},
			anthropictest.Call{ID: "toolu_c", Name: "noargs"},
		).Usage(30, 20), []string{
			"text+", "text:Checking.", "text-",
			`call:toolu_a read_file {"path":"some/long/path/name.txt"}`,
			`call:toolu_b list_files {"dir":"."}`,
			`call:toolu_c noargs {}`,
			"finish:tool_calls in=30 out=20 read=0 write=0 think=0"}},
		{"thinking then text", anthropictest.Thinking("Think", "ing").Text("Done").Tokens(anthropictest.Tokens{Input: 5, Output: 9, CacheRead: 3, CacheWrite: 2, Thinking: 6}), []string{
			"reason+", "reason:Think", "reason:ing", `reason-{"type":"thinking","signature":"` + anthropictest.Sign("Thinking") + `"}`,
			"text+", "text:Done", "text-",
			"finish:stop in=10 out=9 read=3 write=2 think=6"}},
		{"redacted thinking", anthropictest.RedactedThinking("opaque==").Text("ok").Usage(1, 1), []string{
			"reason+", `reason-{"type":"redacted_thinking","data":"opaque=="}`, "text+", "text:ok", "text-",
			"finish:stop in=1 out=1 read=0 write=0 think=0"}},
		{"refusal", anthropictest.Text("Sorry").StopReason("refusal").Usage(4, 1), []string{
			"text+", "text:Sorry", "text-", "finish:content_filter in=4 out=1 read=0 write=0 think=0"}},
		{"max tokens in text", anthropictest.Text("cut").StopReason("max_tokens").Usage(4, 1), []string{
			"text+", "text:cut", "text-", "finish:length in=4 out=1 read=0 write=0 think=0"}},
		{"context window exceeded", anthropictest.Text("cut").StopReason("model_context_window_exceeded").Usage(4, 1), []string{
			"text+", "text:cut", "text-", "finish:length in=4 out=1 read=0 write=0 think=0"}},
		{"stop sequence", anthropictest.Text("a").StopReason("stop_sequence").Usage(4, 1), []string{
			"text+", "text:a", "text-", "finish:stop in=4 out=1 read=0 write=0 think=0"}},
		{"complete call then max tokens", anthropictest.ToolUse(anthropictest.Call{ID: "toolu_1", Name: "x", Input: `{"a":1}`}).StopReason("max_tokens").Usage(4, 1), []string{
			`call:toolu_1 x {"a":1}`, "finish:length in=4 out=1 read=0 write=0 think=0"}},
		{"empty reply", anthropictest.Response{}.Usage(4, 0), []string{
			"finish:stop in=4 out=0 read=0 write=0 think=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := collect(t.Context(), m, hello())
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
			got, err := collect(t.Context(), m, req)
			me := modelError(t, err)
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
	_, err := collect(t.Context(), m, hello())
	if me := modelError(t, err); !strings.Contains(me.Message, `"edit"`) {
		t.Errorf("error = %+v", me)
	}
	// Invalid JSON without max_tokens is passed on raw: the engine answers
	// the call with an error the model can correct.
	srv.Enqueue(anthropictest.ToolUse(anthropictest.Call{ID: "toolu_2", Name: "x", Input: `{"a":`}).StopReason("tool_use"))
	got, err := collect(t.Context(), m, hello())
	if err != nil || !reflect.DeepEqual(got, []string{`call:toolu_2 x {"a":`, got[len(got)-1]}) {
		t.Errorf("events %q, %v", got, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestThinkingRoundTrip checks that a thinking block goes back to the API
// exactly as it came: its text and signature unchanged, first in the
// assistant message, before the tool_use it led to.
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
	first := reply(t, m, req)
	msg, calls := assistant(first)
	if len(calls) != 1 || len(msg.Parts) != 4 {
		t.Fatalf("first reply: %+v %+v", msg, calls)
	}
	req.Messages = append(req.Messages, msg, forge.ModelMessage{Role: forge.RoleTool, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolResult, CallID: "call_1", Name: "get_weather", Output: "18C"}}})
	if got, err := collect(t.Context(), m, req); err != nil || got[1] != "text:Sunny." {
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
	_, err := collect(t.Context(), m, req)
	if me := modelError(t, err); me.StatusCode != 400 || me.Retryable || !strings.Contains(me.Message, "Invalid `signature` in `thinking` block") {
		t.Errorf("error = %+v", me)
	}
}

// Reasoning that this provider cannot send back (another provider's, or
// cut before its signature) is left out.
func TestForeignReasoningDropped(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	req := hello()
	req.Messages = append(req.Messages,
		forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
			{Type: forge.ModelPartReasoning, Text: "from another provider"},
			{Type: forge.ModelPartReasoning, Text: "odd state", Provider: json.RawMessage(`{"call_id":"x"}`)},
			{Type: forge.ModelPartText, Text: "Hi."},
		}},
		user("Again"))
	if _, err := collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r, _ := srv.LastRequest()
	if got := r.Messages[1].Content; len(got) != 1 || got[0].Type != "text" {
		t.Errorf("assistant content %+v", got)
	}
}

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
		{"429 with Retry-After", anthropictest.Status(429, "").Header("Retry-After", "7"), 429, true, 7 * time.Second, false, "rate limit"},
		{"429 retry-after-ms", anthropictest.Status(429, "").Header("retry-after-ms", "1500"), 429, true, 1500 * time.Millisecond, false, "rate limit"},
		{"500", anthropictest.Status(500, ""), 500, true, 0, false, "Internal server error"},
		{"529 overloaded", anthropictest.Status(529, ""), 529, true, 0, false, "Overloaded"},
		{"503 plain text", anthropictest.Status(503, "upstream connect error"), 503, true, 0, false, "upstream connect error"},
		{"x-should-retry false", anthropictest.Status(500, "").Header("x-should-retry", "false"), 500, false, 0, false, "Internal"},
		{"prompt too long", anthropictest.PromptTooLong(208310, 200000), 400, false, 0, true, "prompt is too long: 208310 tokens > 200000 maximum"},
		{"context limit", anthropictest.Status(400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and `+"`max_tokens`"+` exceed context limit: 197000 + 16384 > 200000, decrease input length or `+"`max_tokens`"+` and try again"}}`), 400, false, 0, true, "exceed context limit"},
		{"413", anthropictest.Status(413, ""), 413, false, 0, true, "maximum allowed number of bytes"},
		{"400", anthropictest.Status(400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed"}}`), 400, false, 0, false, "max_tokens: 100000"},
		{"401", anthropictest.Status(401, ""), 401, false, 0, false, "invalid x-api-key"},
		{"404 html", anthropictest.Status(404, "<html>nope</html>"), 404, false, 0, false, "<html>nope</html>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := collect(t.Context(), m, hello())
			if len(got) != 0 {
				t.Errorf("events before the error: %q", got)
			}
			me := modelError(t, err)
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

// The fake refuses the histories the API refuses; the error comes back as a
// non-retryable 400.
func TestRefusedHistories(t *testing.T) {
	t.Parallel()
	call := forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "x", Arguments: json.RawMessage(`{}`)}}}
	tests := []struct {
		name string
		msgs []forge.ModelMessage
		msg  string
	}{
		{"tool_use without result", []forge.ModelMessage{user("go"), call, user("what now?")},
			"`tool_use` ids were found without `tool_result` blocks immediately after: call_1"},
		{"tool_use last", []forge.ModelMessage{user("go"), call},
			"`tool_use` ids were found without `tool_result` blocks immediately after: call_1"},
		{"result without tool_use", []forge.ModelMessage{user("go"), {Role: forge.RoleTool, Parts: []forge.ModelPart{
			{Type: forge.ModelPartToolResult, CallID: "call_9", Output: "x"}}}},
			"unexpected `tool_use_id` found in `tool_result` blocks: call_9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, m := newModel(t)
			_, err := collect(t.Context(), m, &forge.ModelRequest{Messages: tt.msgs})
			me := modelError(t, err)
			if me.StatusCode != 400 || me.Retryable || !strings.Contains(me.Message, tt.msg) {
				t.Errorf("error = %+v, want %q", me, tt.msg)
			}
		})
	}
}

func TestMidStreamFailures(t *testing.T) {
	t.Parallel()
	// Events of Text("a","b","c","d"): message_start, content_block_start,
	// ping, 4 deltas, content_block_stop, message_delta, message_stop.
	tests := []struct {
		name      string
		resp      anthropictest.Response
		want      []string
		status    int
		retryable bool
		message   string
	}{
		{"cut after some deltas", anthropictest.Text("a", "b", "c", "d").CutAfter(5), []string{"text+", "text:a", "text:b"}, 0, true, "stream"},
		{"cut before any event", anthropictest.Text("a").CutAfter(0), nil, 0, true, "stream"},
		{"cut before message_delta", anthropictest.Text("a").CutAfter(5), []string{"text+", "text:a", "text-"}, 0, true, "stream"},
		{"overloaded", anthropictest.Text("a", "b", "c").ErrorAfter(4, "overloaded_error", "Overloaded"), []string{"text+", "text:a"}, 529, true, "Overloaded"},
		{"api error", anthropictest.Text("a").ErrorAfter(1, "api_error", "Internal server error"), nil, 500, true, "Internal server error"},
		{"invalid request", anthropictest.Text("a").ErrorAfter(1, "invalid_request_error", "bad"), nil, 400, false, "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := collect(t.Context(), m, hello())
			me := modelError(t, err)
			if me.Retryable != tt.retryable || me.StatusCode != tt.status || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v", me)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A cut after message_delta only loses message_stop: the reply is complete.
func TestCutAfterMessageDelta(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(anthropictest.Text("a").Usage(3, 1).CutAfter(6))
	got, err := collect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"text+", "text:a", "text-", "finish:stop in=3 out=1 read=0 write=0 think=0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestStallCancelledByContext(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(anthropictest.Text("a", "b", "c").HangAfter(4))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []string
	var err error
	cancelled := make(chan time.Time, 1)
	for ev, e := range m.Stream(ctx, hello()) {
		if e != nil {
			err = e
			break
		}
		got = append(got, render(ev))
		if ev.Type == forge.TextDelta {
			// The stream now stalls; cancel from outside shortly after.
			time.AfterFunc(50*time.Millisecond, func() { cancelled <- time.Now(); cancel() })
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(<-cancelled); d > time.Second {
		t.Errorf("returned %v after cancel", d)
	}
	if want := []string{"text+", "text:a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestCancelledBeforeHeaders(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(anthropictest.Text("a").HangAfter(0))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := collect(ctx, m, hello())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestConsumerBreak(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(anthropictest.Text("a", "b", "c").DelayBetweenChunks(10 * time.Millisecond))
	n := 0
	for ev, err := range m.Stream(t.Context(), hello()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if ev.Type == forge.TextDelta {
			break
		}
	}
	if n != 2 {
		t.Errorf("%d events, want 2", n)
	}
	// The provider stays usable.
	got, err := collect(t.Context(), m, hello())
	if err != nil || len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "finish:") {
		t.Fatalf("second call: %q %v", got, err)
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: "http://" + addr}).Model("claude")
	_, err = collect(t.Context(), m, hello())
	me := modelError(t, err)
	if !me.Retryable || me.StatusCode != 0 {
		t.Errorf("error = %+v, want retryable without status", me)
	}
}

func TestConfigWinsOverEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-From-Env: 1")
	t.Setenv("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "content")

	srv := anthropictest.New(t)
	srv.SetAPIKey("sk-ant-config")
	m := anthropic.New(anthropic.Config{APIKey: "sk-ant-config", BaseURL: srv.URL() + "/v1/"}).Model("claude")
	if _, err := collect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	r, _ := srv.LastRequest()
	if got := [3]string{r.Header.Get("x-api-key"), r.Header.Get("Authorization"), r.Header.Get("anthropic-version")}; got != [3]string{"sk-ant-config", "Bearer sk-ant-config", "2026-10-21"} {
		t.Errorf("x-api-key, Authorization, anthropic-version = %q", got)
	}
	if r.Header.Get("X-From-Env") != "" || r.Header.Get("X-Stainless-Retry-Count") != "0" {
		t.Errorf("headers %v", r.Header)
	}
	// Keyless: no credential at all, despite ANTHROPIC_API_KEY.
	srv2 := anthropictest.New(t)
	m2 := anthropic.New(anthropic.Config{BaseURL: srv2.URL()}).Model("claude")
	if _, err := collect(t.Context(), m2, hello()); err != nil {
		t.Fatal(err)
	}
	r, _ = srv2.LastRequest()
	if h := r.Header.Get("Authorization") + r.Header.Get("x-api-key"); h != "" {
		t.Errorf("credential %q sent without a configured key", h)
	}
	// A wrong key is a 401 ModelError.
	m3 := anthropic.New(anthropic.Config{APIKey: "sk-wrong", BaseURL: srv.URL()}).Model("claude")
	_, err := collect(t.Context(), m3, hello())
	if me := modelError(t, err); me.StatusCode != 401 || me.Retryable {
		t.Errorf("error = %+v", me)
	}
}

func TestProviderNameAndModel(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.Enqueue(anthropictest.Status(500, ""))
	p := anthropic.New(anthropic.Config{Name: "claude-proxy", BaseURL: srv.URL()})
	_, err := collect(t.Context(), p.Model("claude-haiku-4-5"), hello())
	if me := modelError(t, err); me.Provider != "claude-proxy" {
		t.Errorf("provider = %q", me.Provider)
	}
	if r, _ := srv.LastRequest(); r.Model != "claude-sonnet-4-5" {
		t.Errorf("model sent = %q, want the request's", r.Model)
	}
	req := hello()
	req.Model = ""
	if _, err := collect(t.Context(), p.Model("claude-haiku-4-5"), req); err != nil {
		t.Fatal(err)
	}
	if r, _ := srv.LastRequest(); r.Model != "claude-haiku-4-5" {
		t.Errorf("model sent = %q, want the provider model id", r.Model)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  forge.ModelRequest
		msg  string
	}{
		{"unknown role", forge.ModelRequest{Messages: []forge.ModelMessage{{Role: "system"}}}, `unknown role "system"`},
		{"bad schema", forge.ModelRequest{Messages: hello().Messages, Tools: []forge.ToolDef{
			{Name: "x", InputSchema: json.RawMessage(`[1]`)}}}, `tool "x": input schema is not a JSON object`},
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
			_, err := collect(t.Context(), m, &tt.req)
			if me := modelError(t, err); me.Retryable || !strings.Contains(me.Message, tt.msg) {
				t.Errorf("error = %+v, want %q", me, tt.msg)
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
}

// TestWireRequest asserts exactly what is sent.

// TestStreamReportsItsWaits: the provider reports its waits
// (forge.ReportWaits): one before the request, and one before a read of a
// stream that stalls, once every event of what was read has been passed on
// (the consumer cancels there; without that wait the test would time out).
func TestStreamReportsItsWaits(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(anthropictest.Text("a", "b", "c").HangAfter(4))
	providertest.ReportsWaits(t, m, hello(), render)
}

// TestConcurrentCallsReuseConnections: the provider's default client keeps
// an idle connection for each of 200 calls made at once (Go's transport
// keeps 2 per host, Forge's kept 64), so later waves dial nothing.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.RecordRequests(false)
	providertest.ReusesConnections(t, m, srv, hello(), 200, 3)
}
