package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// rrender is render plus the Provider data of end events and calls:
// "reason- {...}".
func rrender(ev forge.ModelEvent) string {
	s := render(ev)
	if len(ev.Provider) > 0 {
		s += " " + string(ev.Provider)
	}
	return s
}

func rcollect(ctx context.Context, m forge.Model, req *forge.ModelRequest) ([]string, []forge.ModelEvent, error) {
	var out []string
	var evs []forge.ModelEvent
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return out, evs, err
		}
		out = append(out, rrender(ev))
		evs = append(evs, ev)
	}
	return out, evs, nil
}

func newResponsesModel(t testing.TB) (*openaitest.Server, forge.Model) {
	srv := openaitest.New(t)
	return srv, openai.NewResponses(openai.Config{BaseURL: srv.URL()}).Model("gpt-5-mini")
}

func lastResponsesRequest(t *testing.T, srv *openaitest.Server) openaitest.ResponsesRequest {
	t.Helper()
	r, ok := srv.LastResponsesRequest()
	if !ok {
		t.Fatal("no Responses request received")
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d Chat Completions requests", n)
	}
	return r
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var gotV, wantV any
	if err := json.Unmarshal(got, &gotV); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal([]byte(want), &wantV); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(gotV, wantV) {
		g, _ := json.MarshalIndent(gotV, "", "  ")
		w, _ := json.MarshalIndent(wantV, "", "  ")
		t.Errorf("%s:\n%s\nwant:\n%s", what, g, w)
	}
}

func TestResponsesFixtures(t *testing.T) {
	t.Parallel()
	const (
		enc1 = "gAAAAABooeTjX2yqv0n3cWmQ0x-8bZrRkJ7VwqHkWb3Yl1X9sQd2mT4pLr6UuE0aHc5GfN8iKzOjS1vP7yBxD3eMwA2tIq4_RnCoZlKgFhYs9JdUbVe6XyT=="
		enc2 = "gAAAAABooeTkQ1w2e3r4t5y6u7i8o9p0-AsDfGhJkLzXcVbNm_QwErTyUiOp1234567890abcdEFGHijklMNOPqrstUVWXyz=="
	)
	tests := []struct {
		file    string
		want    []string
		wantErr *forge.ModelError // Message is a substring
	}{
		{file: "responses_text.sse", want: []string{
			"text+", "text:Hello", "text:!", "text: Café \"Ω\"\n", "text: <ok> & done.", "text-",
			"finish:stop in=19 out=10 cached=0 reasoning=0"}},
		{file: "responses_parallel_tools.sse", want: []string{
			`call:call_5Xq8yWbT3nKd0RmJ2vLc9PfA get_weather {"city": "Paris"}`,
			`call:call_Hn4sZ7uKc1Ye8WdQ3bMx6RtG get_time {"tz": "Asia/Tokyo"}`,
			"finish:tool_calls in=1210 out=48 cached=1024 reasoning=0"}},
		{file: "responses_reasoning_tool.sse", want: []string{
			"reason+", "reason:**Planning", "reason: the lookup**\n\nThe user wants the weather.",
			"reason:\n\n", "reason:I'll call get_weather.",
			`reason- {"id":"rs_0b3c6e2a1f4d5e6f0068a1f2e4a5b6c7d8","encrypted_content":"` + enc1 + `"}`,
			"text+", "text:Let me", "text: check.", "text-",
			`call:call_Tq2Vx9 get_weather {"city":"Paris"}`,
			"finish:tool_calls in=312 out=174 cached=0 reasoning=128"}},
		{file: "responses_reasoning_no_summary.sse", want: []string{
			// No summary: an empty reasoning part still keeps the state.
			"reason+", `reason- {"id":"rs_68a1f3a1c2d38190bb22cc33dd44ee55","encrypted_content":"` + enc2 + `"}`,
			"text+", "text:Yes.", "text-",
			"finish:stop in=40 out=70 cached=0 reasoning=64"}},
		{file: "responses_vllm_reasoning_text.sse", want: []string{
			// Raw reasoning text, no encrypted content: no Provider data.
			"reason+", "reason:The user asks 2+2.", "reason: Answer: 4.", "reason-",
			"text+", "text:2 + 2 = ", "text:4.", "text-",
			"finish:stop in=75 out=24 cached=0 reasoning=12"}},
		{file: "responses_incomplete_truncated_call.sse", want: []string{
			// The call never reached output_item.done: emitted with the
			// arguments that arrived, invalid JSON included.
			`call:call_Lz9 write_file {"path":"a.txt","content":"lo`,
			"finish:length in=50 out=16 cached=0 reasoning=0"}},
		{file: "responses_content_filter.sse", want: []string{
			"text+", "text:I can", "text-",
			"finish:content_filter in=25 out=2 cached=0 reasoning=0"}},
		{file: "responses_refusal.sse", want: []string{
			"text+", "text:I'm sorry,", "text: I can't help with that.", "text-",
			"finish:stop in=30 out=9 cached=0 reasoning=0"}},
		{file: "responses_failed_server_error.sse", want: []string{"text+", "text:Par"},
			wantErr: &forge.ModelError{Message: "An error occurred while processing your request", Retryable: true}},
		{file: "responses_failed_context_length.sse",
			wantErr: &forge.ModelError{Message: "exceeds the context window", ContextOverflow: true}},
		{file: "responses_error_event.sse",
			wantErr: &forge.ModelError{Message: "Rate limit reached for gpt-5", Retryable: true, RetryAfter: 1400 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".sse"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			srv, m := newResponsesModel(t)
			srv.Enqueue(openaitest.Raw(data))
			got, _, err := rcollect(t.Context(), m, hello())
			if w := tt.wantErr; w != nil {
				me := modelError(t, err)
				if !strings.Contains(me.Message, w.Message) || me.Provider != "openai" || me.StatusCode != 0 ||
					me.Retryable != w.Retryable || me.ContextOverflow != w.ContextOverflow || me.RetryAfter != w.RetryAfter {
					t.Errorf("error = %+v, want %+v", me, w)
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

// A quota error event (its code, or its type alone) is final and says so.
func TestResponsesQuotaErrorEvent(t *testing.T) {
	t.Parallel()
	errorEvent, err := os.ReadFile(filepath.Join("testdata", "responses_error_event.sse"))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(errorEvent, []byte("event: error\n"))
	for _, tt := range []struct{ name, event string }{
		{"code", `{"type":"error","sequence_number":2,"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details.","param":null}`},
		{"type only", `{"type":"error","sequence_number":2,"error":{"type":"insufficient_quota","code":null,"message":"You exceeded your current quota, please check your plan and billing details.","param":null}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newResponsesModel(t)
			srv.Enqueue(openaitest.Raw(append(errorEvent[:i:i], "event: error\ndata: "+tt.event+"\n"...)))
			_, _, err := rcollect(t.Context(), m, hello())
			me := modelError(t, err)
			if me.Retryable || me.RetryAfter != 0 || me.ContextOverflow ||
				!strings.Contains(me.Message, "exceeded your current quota") || !strings.Contains(me.Message, "retrying cannot help") {
				t.Errorf("error = %+v, want a final quota error", me)
			}
		})
	}
}

func TestResponsesBuilders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp openaitest.Response
		want []string
	}{
		{"text", openaitest.Text("Hel", "lo").Usage(7, 2), []string{
			"text+", "text:Hel", "text:lo", "text-", "finish:stop in=7 out=2 cached=0 reasoning=0"}},
		{"parallel function calls", openaitest.Text("Checking.").ToolCalls(
			openaitest.Call{ID: "call_a", Name: "read_file", Args: `{"path":"some/long/path/name.txt"}`},
			openaitest.Call{ID: "call_b", Name: "list_files", Args: `{"dir":"."}`},
			openaitest.Call{ID: "call_c", Name: "noargs"},
		).Usage(30, 20), []string{
			"text+", "text:Checking.", "text-",
			`call:call_a read_file {"path":"some/long/path/name.txt"}`,
			`call:call_b list_files {"dir":"."}`,
			`call:call_c noargs {}`,
			"finish:tool_calls in=30 out=20 cached=0 reasoning=0"}},
		{"reasoning without encrypted content", openaitest.Reasoning("Think", "ing").Text("Done").
			Tokens(openaitest.Tokens{Input: 5, Output: 9, Cached: 3, Reasoning: 6}), []string{
			"reason+", "reason:Think", "reason:ing", "reason-", "text+", "text:Done", "text-",
			"finish:stop in=5 out=9 cached=3 reasoning=6"}},
		{"two messages", openaitest.Text("a").Text("b").Usage(1, 1), []string{
			"text+", "text:a", "text-", "text+", "text:b", "text-", "finish:stop in=1 out=1 cached=0 reasoning=0"}},
		{"content filter", openaitest.Text("Sorry").Finish("content_filter").Usage(4, 1), []string{
			"text+", "text:Sorry", "text-", "finish:content_filter in=4 out=1 cached=0 reasoning=0"}},
		{"length", openaitest.Text("cut").Finish("length").Usage(4, 1), []string{
			"text+", "text:cut", "text-", "finish:length in=4 out=1 cached=0 reasoning=0"}},
		{"empty reply", openaitest.Text().Usage(4, 0), []string{
			"finish:stop in=4 out=0 cached=0 reasoning=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newResponsesModel(t)
			srv.Enqueue(tt.resp)
			got, _, err := rcollect(t.Context(), m, hello())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestResponsesReasoningRoundTrip runs two calls the way the engine does:
// the reasoning item (id and encrypted content) of the first reply goes
// back with the function call and its output in the second request, and
// the fake verifies it as OpenAI would with store=false.
func TestResponsesReasoningRoundTrip(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(
		openaitest.Reasoning("Need", " weather").Text("Checking.").
			ToolCalls(openaitest.Call{ID: "call_w", Name: "get_weather", Args: `{"city":"Paris"}`}).
			Tokens(openaitest.Tokens{Input: 50, Output: 40, Reasoning: 30}),
		openaitest.Text("Sunny.").Usage(90, 3))
	req := &forge.ModelRequest{
		System: "Be brief.",
		Messages: []forge.ModelMessage{
			{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Weather in Paris?"}}},
		},
		Tools:  []forge.ToolDef{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
		Params: forge.ModelParams{ReasoningEffort: "low"},
	}
	got, evs, err := rcollect(t.Context(), m, req)
	if err != nil {
		t.Fatal(err)
	}
	var rsID, enc string
	var assistant forge.ModelMessage
	assistant.Role = forge.RoleAssistant
	var text strings.Builder
	for _, ev := range evs {
		switch ev.Type {
		case forge.ReasoningEnd:
			var rd struct {
				ID               string `json:"id"`
				EncryptedContent string `json:"encrypted_content"`
			}
			if err := json.Unmarshal(ev.Provider, &rd); err != nil || rd.ID == "" || rd.EncryptedContent == "" {
				t.Fatalf("ReasoningEnd provider data %s: %v", ev.Provider, err)
			}
			rsID, enc = rd.ID, rd.EncryptedContent
			assistant.Parts = append(assistant.Parts, forge.ModelPart{Type: forge.ModelPartReasoning, Text: "Need weather", Provider: ev.Provider})
		case forge.TextDelta:
			text.WriteString(ev.Delta)
		case forge.TextEnd:
			assistant.Parts = append(assistant.Parts, forge.ModelPart{Type: forge.ModelPartText, Text: text.String(), Provider: ev.Provider})
		case forge.ToolCallEvent:
			// The engine sends its own call id back, not the model's.
			assistant.Parts = append(assistant.Parts, forge.ModelPart{Type: forge.ModelPartToolCall, CallID: "call_forge1",
				Name: ev.ToolCall.Name, Arguments: ev.ToolCall.Arguments})
		}
	}
	if last := got[len(got)-1]; last != "finish:tool_calls in=50 out=40 cached=0 reasoning=30" {
		t.Errorf("finish %q", last)
	}
	first := lastResponsesRequest(t, srv)
	if !reflect.DeepEqual(first.Include, []string{"reasoning.encrypted_content"}) || first.Store == nil || *first.Store ||
		first.Reasoning == nil || first.Reasoning.Effort != "low" || first.Reasoning.Summary != "auto" {
		t.Errorf("first request: include %q store %v reasoning %+v", first.Include, first.Store, first.Reasoning)
	}

	req.Messages = append(req.Messages, assistant, forge.ModelMessage{Role: forge.RoleTool, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolResult, CallID: "call_forge1", Output: "18C, sunny"}}})
	got, _, err = rcollect(t.Context(), m, req)
	if err != nil {
		t.Fatalf("second call refused: %v", err)
	}
	if want := []string{"text+", "text:Sunny.", "text-", "finish:stop in=90 out=3 cached=0 reasoning=0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("second reply %q", got)
	}
	second := lastResponsesRequest(t, srv)
	in, _ := json.Marshal(json.RawMessage(second.RawInput))
	jsonEqual(t, "second input", in, `[
	  {"type": "message", "role": "user", "content": "Weather in Paris?"},
	  {"type": "reasoning", "id": "`+rsID+`", "encrypted_content": "`+enc+`",
	   "summary": [{"type": "summary_text", "text": "Need weather"}]},
	  {"type": "message", "role": "assistant", "content": "Checking."},
	  {"type": "function_call", "call_id": "call_forge1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
	  {"type": "function_call_output", "call_id": "call_forge1", "output": "18C, sunny"}
	]`)
	if len(srv.ResponsesRequests()) != 2 {
		t.Errorf("%d requests", len(srv.ResponsesRequests()))
	}
}

// TestResponsesWireRequest asserts exactly what is sent.
func TestResponsesWireRequest(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	maxTokens, temp := int64(512), 0.2
	rs1 := json.RawMessage(`{"id":"rs_1","encrypted_content":"` + openaitest.EncryptedContent("rs_1") + `"}`)
	rs2 := json.RawMessage(`{"id":"rs_2","encrypted_content":"` + openaitest.EncryptedContent("rs_2") + `"}`)
	req := &forge.ModelRequest{
		Model:  "gpt-5",
		System: "You are terse.",
		Messages: []forge.ModelMessage{
			{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Weather in Paris and Tokyo?"}}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				{Type: forge.ModelPartReasoning, Text: "two lookups", Provider: rs1},
				{Type: forge.ModelPartText, Text: "Checking ", Provider: json.RawMessage(`{"phase":"commentary"}`)},
				{Type: forge.ModelPartText, Text: "both."},
				{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`),
					Provider: json.RawMessage(`{"call_id":"call_model_1"}`)},
				{Type: forge.ModelPartToolCall, CallID: "call_2", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Tokyo"}`)},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_1", Output: "18C sunny"},
				{Type: forge.ModelPartToolResult, CallID: "call_2", Output: "denied: not allowed", IsError: true},
			}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				// Reasoning without usable state is not sent: plain text
				// from another provider, another provider's signature.
				{Type: forge.ModelPartReasoning, Text: "from chat completions"},
				{Type: forge.ModelPartReasoning, Text: "from anthropic", Provider: json.RawMessage(`{"signature":"EqQB"}`)},
				{Type: forge.ModelPartReasoning, Provider: rs2},
				{Type: forge.ModelPartToolCall, CallID: "call_3", Name: "now"},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_3", Output: "12:00"},
			}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Paris: 18C.",
				Provider: json.RawMessage(`{"phase":"final_answer"}`)}}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				// A reasoning item with nothing after it (a cancelled
				// step) would be refused: dropped.
				{Type: forge.ModelPartReasoning, Text: "interrupted", Provider: json.RawMessage(`{"id":"rs_3","encrypted_content":"x"}`)},
			}},
			{Role: forge.RoleUser, Parts: []forge.ModelPart{
				{Type: forge.ModelPartText, Text: "Thanks."},
				{Type: forge.ModelPartText, Text: "And Rome?"},
			}},
		},
		Tools: []forge.ToolDef{
			{Name: "get_weather", Description: "Weather of a city", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`)},
			{Name: "now", InputSchema: json.RawMessage(`{}`)},
			{Name: "ping"},
			{Name: "untyped", InputSchema: json.RawMessage(`{"properties":{"a":{"type":"integer"}}}`)},
		},
		Params: forge.ModelParams{MaxTokens: &maxTokens, Temperature: &temp, ReasoningEffort: "high"},
	}
	if _, _, err := rcollect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r := lastResponsesRequest(t, srv)
	jsonEqual(t, "request body", r.Body, `{
	  "model": "gpt-5",
	  "instructions": "You are terse.",
	  "input": [
	    {"type": "message", "role": "user", "content": "Weather in Paris and Tokyo?"},
	    {"type": "reasoning", "id": "rs_1", "encrypted_content": "`+openaitest.EncryptedContent("rs_1")+`",
	     "summary": [{"type": "summary_text", "text": "two lookups"}]},
	    {"type": "message", "role": "assistant", "content": "Checking both.", "phase": "commentary"},
	    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
	    {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Tokyo\"}"},
	    {"type": "function_call_output", "call_id": "call_1", "output": "18C sunny"},
	    {"type": "function_call_output", "call_id": "call_2", "output": "denied: not allowed"},
	    {"type": "reasoning", "id": "rs_2", "encrypted_content": "`+openaitest.EncryptedContent("rs_2")+`", "summary": []},
	    {"type": "function_call", "call_id": "call_3", "name": "now", "arguments": "{}"},
	    {"type": "function_call_output", "call_id": "call_3", "output": "12:00"},
	    {"type": "message", "role": "assistant", "content": "Paris: 18C.", "phase": "final_answer"},
	    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks."}, {"type": "input_text", "text": "And Rome?"}]}
	  ],
	  "tools": [
	    {"type": "function", "name": "get_weather", "description": "Weather of a city", "strict": false, "parameters":
	      {"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}},
	    {"type": "function", "name": "now", "strict": false, "parameters": {"type": "object", "properties": {}}},
	    {"type": "function", "name": "ping", "strict": false, "parameters": {"type": "object", "properties": {}}},
	    {"type": "function", "name": "untyped", "strict": false, "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}
	  ],
	  "store": false,
	  "stream": true,
	  "include": ["reasoning.encrypted_content"],
	  "reasoning": {"effort": "high", "summary": "auto"},
	  "max_output_tokens": 512,
	  "temperature": 0.2
	}`)
	if !r.Stream || r.Store == nil || *r.Store || r.Instructions != "You are terse." || len(r.Input) != 12 ||
		r.Input[1].Type != "reasoning" || r.Input[1].Summary[0].Text != "two lookups" || r.Input[3].CallID != "call_1" ||
		r.Input[5].Output != "18C sunny" || r.Input[11].Content != "Thanks.And Rome?" {
		t.Errorf("request not decoded by the fake: %+v", r)
	}
}

func TestResponsesNoParamsSent(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	req := hello()
	req.Params.ReasoningEffort = "none" // reasoning off: no summary, no include
	if _, _, err := rcollect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r := lastResponsesRequest(t, srv)
	jsonEqual(t, "request body", r.Body, `{
	  "model": "gpt-4.1-mini",
	  "input": [{"type": "message", "role": "user", "content": "Hello"}],
	  "store": false,
	  "stream": true,
	  "reasoning": {"effort": "none"}
	}`)
}

func TestResponsesHTTPErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		resp     openaitest.Response
		status   int
		retry    bool
		after    time.Duration
		overflow bool
		message  string
	}{
		{"429", openaitest.Status(429, ""), 429, true, time.Second, false, "Rate limit reached"},
		{"429 Retry-After", openaitest.Status(429, "").Header("Retry-After", "7"), 429, true, 7 * time.Second, false, "Rate limit"},
		{"429 retry-after-ms", openaitest.Status(429, "").Header("Retry-After-Ms", "250"), 429, true, 250 * time.Millisecond, false, "Rate limit"},
		{"429 insufficient quota", openaitest.Status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`),
			429, false, time.Second, false, "exceeded your current quota"},
		{"429 insufficient quota says why", openaitest.Status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`),
			429, false, time.Second, false, "(insufficient_quota: the account is out of quota or credit, or over its billing limit; not retried, as retrying cannot help"},
		{"429 insufficient quota type only", openaitest.Status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":null}}`),
			429, false, time.Second, false, "retrying cannot help"},
		{"429 billing hard limit", openaitest.Status(429, `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","param":null,"code":"billing_hard_limit_reached"}}`),
			429, false, time.Second, false, "retrying cannot help"},
		{"400 vllm context length", openaitest.Status(400, `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5120 tokens. Please reduce the length of the input or output.","type":"BadRequestError","param":null,"code":400}}`),
			400, false, 0, true, "maximum context length"},
		{"500", openaitest.Status(500, ""), 500, true, 0, false, "The server had an error"},
		{"503 plain text", openaitest.Status(503, "upstream overloaded"), 503, true, time.Second, false, "upstream overloaded"},
		{"400 context length", openaitest.Status(400, `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`),
			400, false, 0, true, "exceeds the context window"},
		{"400 other", openaitest.Status(400, `{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}`),
			400, false, 0, false, "Unsupported parameter"},
		{"401", openaitest.Status(401, ""), 401, false, 0, false, "Incorrect API key"},
		{"404 bare", openaitest.Status(404, `{"detail":"Not Found"}`), 404, false, 0, false, `{"detail":"Not Found"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newResponsesModel(t)
			srv.Enqueue(tt.resp)
			got, _, err := rcollect(t.Context(), m, hello())
			if len(got) != 0 {
				t.Errorf("events before the error: %q", got)
			}
			me := modelError(t, err)
			if me.StatusCode != tt.status || me.Retryable != tt.retry || me.RetryAfter != tt.after ||
				me.ContextOverflow != tt.overflow || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v, want status %d retryable %v after %v overflow %v message ~ %q",
					me, tt.status, tt.retry, tt.after, tt.overflow, tt.message)
			}
			if n := len(srv.ResponsesRequests()); n != 1 {
				t.Errorf("%d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

func TestResponsesRetryAfterDate(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Status(503, "").Header("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat)))
	_, _, err := rcollect(t.Context(), m, hello())
	if me := modelError(t, err); !me.Retryable || me.RetryAfter < 25*time.Second || me.RetryAfter > 31*time.Second {
		t.Errorf("error = %+v, want RetryAfter about 30s", me)
	}
}

func TestResponsesRefusedByValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		msgs   []forge.ModelMessage
		status int
		msg    string
	}{
		{"unanswered call", []forge.ModelMessage{{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
			{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "x", Arguments: json.RawMessage(`{}`)}}}},
			400, "No tool output found for function call call_1"},
		{"reasoning not issued by the server", []forge.ModelMessage{{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
			{Type: forge.ModelPartReasoning, Provider: json.RawMessage(`{"id":"rs_x","encrypted_content":"forged"}`)},
			{Type: forge.ModelPartText, Text: "hi"}}}},
			400, "could not be verified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newResponsesModel(t)
			req := hello()
			req.Messages = append(req.Messages, tt.msgs...)
			_, _, err := rcollect(t.Context(), m, req)
			me := modelError(t, err)
			if me.StatusCode != tt.status || me.Retryable || !strings.Contains(me.Message, tt.msg) {
				t.Errorf("error = %+v", me)
			}
			if srv.Pending() != 0 {
				t.Error("queue changed")
			}
		})
	}
}

func TestResponsesMidStreamFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		resp      openaitest.Response
		want      []string
		retryable bool
		message   string
	}{
		// Events: created, in_progress, item added, part added, deltas...
		{"cut", openaitest.Text("a", "b", "c", "d").CutAfter(6), []string{"text+", "text:a", "text:b"}, true, "stream"},
		{"cut before any event", openaitest.Text("a").CutAfter(0), nil, true, "stream"},
		{"cut before response.completed", openaitest.Text("a").CutAfter(8), []string{"text+", "text:a", "text-"}, true, "stream"},
		{"no terminal event", openaitest.Text("a").Finish(""), []string{"text+", "text:a", "text-"}, true, "ended before the response was complete"},
		{"response.failed", openaitest.Text("a", "b", "c").ErrorAfter(5, "boom"), []string{"text+", "text:a"}, true, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newResponsesModel(t)
			srv.Enqueue(tt.resp)
			got, _, err := rcollect(t.Context(), m, hello())
			me := modelError(t, err)
			if me.Retryable != tt.retryable || !strings.Contains(me.Message, tt.message) || me.StatusCode != 0 {
				t.Errorf("error = %+v", me)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A compatible server that sends output items only complete, without
// deltas, still yields the text and reasoning.
func TestResponsesItemsWithoutDeltas(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Raw([]byte(`event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":0,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}]}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":1,"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi ","annotations":[]},{"type":"output_text","text":"there","annotations":[]}]}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":2,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{\"a\":1}"}}

event: response.completed
data: {"type":"response.completed","sequence_number":3,"response":{"id":"resp_1","status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":4}}}
`)))
	got, _, err := rcollect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"reason+", "reason:a\n\nb", "reason-", "text+", "text:Hi there", "text-",
		`call:call_1 f {"a":1}`, "finish:tool_calls in=3 out=4 cached=0 reasoning=0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

func TestResponsesStallCancelledByContext(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Text("a", "b", "c").HangAfter(5))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []string
	var err error
	var cancelledAt time.Time
	for ev, e := range m.Stream(ctx, hello()) {
		if e != nil {
			err = e
			break
		}
		got = append(got, render(ev))
		if ev.Type == forge.TextDelta {
			time.AfterFunc(50*time.Millisecond, func() { cancelledAt = time.Now(); cancel() })
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(cancelledAt); d > time.Second {
		t.Errorf("returned %v after cancel", d)
	}
	if want := []string{"text+", "text:a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestResponsesCancelledBeforeHeaders(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Text("a").HangAfter(0))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := rcollect(ctx, m, hello())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestResponsesConsumerBreak(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Text("a", "b", "c").DelayBetweenChunks(10 * time.Millisecond))
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
	got, _, err := rcollect(t.Context(), m, hello())
	if err != nil || len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "finish:") {
		t.Fatalf("second call: %q %v", got, err)
	}
}

func TestResponsesConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := openai.NewResponses(openai.Config{BaseURL: "http://" + addr + "/v1"}).Model("x")
	_, _, err = rcollect(t.Context(), m, hello())
	me := modelError(t, err)
	if !me.Retryable || me.StatusCode != 0 {
		t.Errorf("error = %+v, want retryable without status", me)
	}
}

func TestResponsesJSONBody(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Request: r, Header: http.Header{"Content-Type": {"application/json"}},
			Body: http.NoBody}, nil
	})}
	m := openai.NewResponses(openai.Config{BaseURL: "http://x.invalid/v1", HTTPClient: client}).Model("x")
	_, _, err := rcollect(t.Context(), m, hello())
	if me := modelError(t, err); me.Retryable || !strings.Contains(me.Message, "expected an event stream") {
		t.Errorf("error = %+v", me)
	}
}

func TestResponsesConfigWinsOverEnvironment(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-env")

	srv := openaitest.New(t)
	srv.SetAPIKey("sk-config")
	m := openai.NewResponses(openai.Config{APIKey: "sk-config", BaseURL: srv.URL()}).Model("gpt")
	if _, _, err := rcollect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	srv2 := openaitest.New(t)
	m2 := openai.NewResponses(openai.Config{BaseURL: srv2.URL()}).Model("gpt")
	if _, _, err := rcollect(t.Context(), m2, hello()); err != nil {
		t.Fatal(err)
	}
	r := lastResponsesRequest(t, srv2)
	if h := r.Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization %q sent without a configured key", h)
	}
	if h := r.Header.Get("OpenAI-Organization"); h != "" {
		t.Errorf("OpenAI-Organization %q read from the environment", h)
	}
	m3 := openai.NewResponses(openai.Config{APIKey: "sk-wrong", BaseURL: srv.URL()}).Model("gpt")
	_, _, err := rcollect(t.Context(), m3, hello())
	if me := modelError(t, err); me.StatusCode != 401 || me.Retryable {
		t.Errorf("error = %+v", me)
	}
}

func TestResponsesProviderName(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Status(500, ""))
	p := openai.NewResponses(openai.Config{Name: "azure", BaseURL: srv.URL()})
	if p.Name() != "azure" {
		t.Errorf("Name() = %q", p.Name())
	}
	_, _, err := rcollect(t.Context(), p.Model("gpt-5"), hello())
	if me := modelError(t, err); me.Provider != "azure" {
		t.Errorf("provider = %q", me.Provider)
	}
	if r := lastResponsesRequest(t, srv); r.Model != "gpt-4.1-mini" {
		t.Errorf("model sent = %q, want the request's", r.Model)
	}
	req := hello()
	req.Model = ""
	if _, _, err := rcollect(t.Context(), p.Model("gpt-5"), req); err != nil {
		t.Fatal(err)
	}
	if r := lastResponsesRequest(t, srv); r.Model != "gpt-5" {
		t.Errorf("model sent = %q, want the provider model id", r.Model)
	}
	if openai.NewResponses(openai.Config{}).Name() != "openai" {
		t.Error("default name")
	}
}

func TestResponsesBadRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  forge.ModelRequest
		msg  string
	}{
		{"unknown role", forge.ModelRequest{Messages: []forge.ModelMessage{{Role: "system"}}}, `unknown role "system"`},
		{"bad schema", forge.ModelRequest{Messages: hello().Messages, Tools: []forge.ToolDef{
			{Name: "x", InputSchema: json.RawMessage(`[1]`)}}}, `tool "x": input schema is not a JSON object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newResponsesModel(t)
			_, _, err := rcollect(t.Context(), m, &tt.req)
			if me := modelError(t, err); me.Retryable || !strings.Contains(me.Message, tt.msg) {
				t.Errorf("error = %+v, want %q", me, tt.msg)
			}
			if n := len(srv.ResponsesRequests()); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
}

func TestResponsesConcurrentStreams(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.RecordRequests(false)
	srv.SetDefault(openaitest.Text("a", "b", "c"))
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			got, _, err := rcollect(t.Context(), m, hello())
			if err == nil && len(got) != 6 {
				err = fmt.Errorf("events %q", got)
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := len(srv.ResponsesRequests()); n != 0 {
		t.Errorf("%d requests recorded with recording off", n)
	}
}

func TestResponsesConnectionReused(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	var reused []bool
	// A transport of its own: parallel tests closing their servers close
	// the idle connections of http.DefaultTransport.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) }}
		return tr.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	})}
	m := openai.NewResponses(openai.Config{BaseURL: srv.URL(), HTTPClient: client}).Model("gpt")
	for range 3 {
		if _, _, err := rcollect(t.Context(), m, hello()); err != nil {
			t.Fatal(err)
		}
	}
	if want := []bool{false, true, true}; !reflect.DeepEqual(reused, want) {
		t.Errorf("connection reused: %v, want %v", reused, want)
	}
}

// A server that keeps the connection open after response.completed costs
// at most a second: the reply is complete.
func TestResponsesStallAfterCompleted(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Text("a").Usage(1, 1).HangAfter(100))
	start := time.Now()
	got, _, err := rcollect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	if want := []string{"text+", "text:a", "text-", "finish:stop in=1 out=1 cached=0 reasoning=0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %q", got)
	}
}

// Servers that send no item ids: items are told apart by output_index;
// a trailing [DONE] is ignored.
func TestResponsesWithoutItemIDs(t *testing.T) {
	t.Parallel()
	srv, m := newResponsesModel(t)
	srv.Enqueue(openaitest.Raw([]byte(`data: {"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"Hi"}

data: {"type":"response.output_item.done","output_index":0,"item":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}}

data: {"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"call_a","name":"f","arguments":""}}

data: {"type":"response.output_item.added","output_index":2,"item":{"type":"function_call","name":"g","arguments":""}}

data: {"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"x\":"}

data: {"type":"response.function_call_arguments.delta","output_index":2,"delta":"{\"y\":2}"}

data: {"type":"response.function_call_arguments.delta","output_index":1,"delta":"1}"}

data: {"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":1,"output_tokens":2}}}

data: [DONE]
`)))
	got, _, err := rcollect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || !strings.HasPrefix(got[4], "call:call_") || !strings.HasSuffix(got[4], ` g {"y":2}`) {
		t.Fatalf("events %q", got)
	}
	got[4] = "call:? g"
	want := []string{"text+", "text:Hi", "text-", `call:call_a f {"x":1}`, "call:? g", "finish:tool_calls in=1 out=2 cached=0 reasoning=0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}

	// [DONE] before any terminal event: the reply is incomplete.
	srv.Enqueue(openaitest.Raw([]byte("data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\ndata: [DONE]\n\n")))
	_, _, err = rcollect(t.Context(), m, hello())
	if me := modelError(t, err); !me.Retryable || !strings.Contains(me.Message, "ended before") {
		t.Errorf("error = %+v", me)
	}
}
