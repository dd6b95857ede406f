package openai_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/providertest"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

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

func TestResponsesFixtures(t *testing.T) {
	t.Parallel()
	const (
		enc1 = "gAAAAABooeTjX2yqv0n3cWmQ0x-8bZrRkJ7VwqHkWb3Yl1X9sQd2mT4pLr6UuE0aHc5GfN8iKzOjS1vP7yBxD3eMwA2tIq4_RnCoZlKgFhYs9JdUbVe6XyT=="
		enc2 = "gAAAAABooeTkQ1w2e3r4t5y6u7i8o9p0-AsDfGhJkLzXcVbNm_QwErTyUiOp1234567890abcdEFGHijklMNOPqrstUVWXyz=="
	)
	providertest.Fixtures(t, []providertest.Fixture{
		{File: "responses_text.sse", Want: []string{
			"text+", "text:Hello", "text:!", "text: Café \"Ω\"\n", "text: <ok> & done.", "text-",
			"finish:stop in=19 out=10 read=0 write=0 think=0"}},
		{File: "responses_parallel_tools.sse", Want: []string{
			`call:call_5Xq8yWbT3nKd0RmJ2vLc9PfA get_weather {"city": "Paris"}`,
			`call:call_Hn4sZ7uKc1Ye8WdQ3bMx6RtG get_time {"tz": "Asia/Tokyo"}`,
			"finish:tool_calls in=1210 out=48 read=1024 write=0 think=0"}},
		{File: "responses_reasoning_tool.sse", Want: []string{
			"reason+", "reason:**Planning", "reason: the lookup**\n\nThe user wants the weather.",
			"reason:\n\n", "reason:I'll call get_weather.",
			`reason- {"id":"rs_0b3c6e2a1f4d5e6f0068a1f2e4a5b6c7d8","encrypted_content":"` + enc1 + `"}`,
			"text+", "text:Let me", "text: check.", "text-",
			`call:call_Tq2Vx9 get_weather {"city":"Paris"}`,
			"finish:tool_calls in=312 out=174 read=0 write=0 think=128"}},
		{File: "responses_reasoning_no_summary.sse", Want: []string{
			// No summary: an empty reasoning part still keeps the state.
			"reason+", `reason- {"id":"rs_68a1f3a1c2d38190bb22cc33dd44ee55","encrypted_content":"` + enc2 + `"}`,
			"text+", "text:Yes.", "text-",
			"finish:stop in=40 out=70 read=0 write=0 think=64"}},
		{File: "responses_vllm_reasoning_text.sse", Want: []string{
			// Raw reasoning text, no encrypted content: no Provider data.
			"reason+", "reason:The user asks 2+2.", "reason: Answer: 4.", "reason-",
			"text+", "text:2 + 2 = ", "text:4.", "text-",
			"finish:stop in=75 out=24 read=0 write=0 think=12"}},
		{File: "responses_incomplete_truncated_call.sse", Want: []string{
			// The call never reached output_item.done: emitted with the
			// arguments that arrived, invalid JSON included.
			`call:call_Lz9 write_file {"path":"a.txt","content":"lo`,
			"finish:length in=50 out=16 read=0 write=0 think=0"}},
		{File: "responses_content_filter.sse", Want: []string{
			"text+", "text:I can", "text-",
			"finish:content_filter in=25 out=2 read=0 write=0 think=0"}},
		{File: "responses_refusal.sse", Want: []string{
			"text+", "text:I'm sorry,", "text: I can't help with that.", "text-",
			"finish:stop in=30 out=9 read=0 write=0 think=0"}},
		{File: "responses_failed_server_error.sse", Want: []string{"text+", "text:Par"},
			Err: &forge.ModelError{Provider: "openai", Message: "An error occurred while processing your request", Retryable: true}},
		{File: "responses_failed_context_length.sse",
			Err: &forge.ModelError{Provider: "openai", Message: "exceeds the context window", ContextOverflow: true}},
		{File: "responses_error_event.sse",
			Err: &forge.ModelError{Provider: "openai", Message: "Rate limit reached for gpt-5", Retryable: true, RetryAfter: 1400 * time.Millisecond}},
	}, func(t *testing.T, sse []byte) forge.Model {
		srv, m := newResponsesModel(t)
		srv.Enqueue(openaitest.Raw(sse))
		return m
	})
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
			_, err := providertest.Collect(t.Context(), m, hello())
			me := providertest.ModelError(t, err)
			if me.Retryable || me.RetryAfter != 0 || me.ContextOverflow ||
				!strings.Contains(me.Message, "exceeded your current quota") || !strings.Contains(me.Message, "retrying cannot help") {
				t.Errorf("error = %+v, want a final quota error", me)
			}
		})
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
		Tools:  providertest.Tools(),
		Params: forge.ModelParams{MaxTokens: &maxTokens, Temperature: &temp, ReasoningEffort: "high"},
	}
	if _, err := providertest.Collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r := lastResponsesRequest(t, srv)
	providertest.SameJSON(t, "request body", r.Body, `{
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
	    {"type": "function", "name": "untyped", "strict": false, "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "$defs": {"x": {}}}}
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
	if _, err := providertest.Collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r := lastResponsesRequest(t, srv)
	providertest.SameJSON(t, "request body", r.Body, `{
	  "model": "gpt-4.1-mini",
	  "input": [{"type": "message", "role": "user", "content": "Hello"}],
	  "store": false,
	  "stream": true,
	  "reasoning": {"effort": "none"}
	}`)
}

// Reasoning state the server did not issue is refused, as OpenAI refuses
// it with store=false.
func TestResponsesForgedReasoningRefused(t *testing.T) {
	t.Parallel()
	_, m := newResponsesModel(t)
	req := hello()
	req.Messages = append(req.Messages, forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
		{Type: forge.ModelPartReasoning, Provider: json.RawMessage(`{"id":"rs_x","encrypted_content":"forged"}`)},
		{Type: forge.ModelPartText, Text: "hi"}}})
	_, err := providertest.Collect(t.Context(), m, req)
	if me := providertest.ModelError(t, err); me.StatusCode != 400 || me.Retryable || !strings.Contains(me.Message, "could not be verified") {
		t.Errorf("error = %+v", me)
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
	got, err := providertest.Collect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"reason+", "reason:a\n\nb", "reason-", "text+", "text:Hi there", "text-",
		`call:call_1 f {"a":1}`, "finish:tool_calls in=3 out=4 read=0 write=0 think=0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
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
	got, err := providertest.Collect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || !strings.HasPrefix(got[4], "call:call_") || !strings.HasSuffix(got[4], ` g {"y":2}`) {
		t.Fatalf("events %q", got)
	}
	got[4] = "call:? g"
	want := []string{"text+", "text:Hi", "text-", `call:call_a f {"x":1}`, "call:? g", "finish:tool_calls in=1 out=2 read=0 write=0 think=0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}

	// [DONE] before any terminal event: the reply is incomplete.
	srv.Enqueue(openaitest.Raw([]byte("data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\ndata: [DONE]\n\n")))
	_, err = providertest.Collect(t.Context(), m, hello())
	if me := providertest.ModelError(t, err); !me.Retryable || !strings.Contains(me.Message, "ended before") {
		t.Errorf("error = %+v", me)
	}
}
