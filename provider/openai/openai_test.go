package openai_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/providertest"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

func hello() *forge.ModelRequest {
	return &forge.ModelRequest{Model: "gpt-4.1-mini", Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Hello"}}},
	}}
}

// apis are the package's two APIs, for what they share (errors.go).
var apis = []struct {
	name  string
	model func(openai.Config) forge.Model
}{
	{"chat", func(c openai.Config) forge.Model { return openai.New(c).Model("gpt-4.1-mini") }},
	{"responses", func(c openai.Config) forge.Model { return openai.NewResponses(c).Model("gpt-5-mini") }},
}

func newModel(t testing.TB) (*openaitest.Server, forge.Model) {
	srv := openaitest.New(t)
	return srv, openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini")
}

func TestFixtures(t *testing.T) {
	t.Parallel()
	providertest.Fixtures(t, []providertest.Fixture{
		{File: "openai_text.sse", Want: []string{
			"text+", "text:Hello", "text:!", "text: Café \"Ω\"\n", "text: <ok> & done.", "text-",
			"finish:stop in=19 out=10 read=0 write=0 think=0"}},
		{File: "openai_parallel_tools.sse", Want: []string{
			`call:call_5Xq8yWbT3nKd0RmJ2vLc9PfA get_weather {"city": "Paris"}`,
			`call:call_Hn4sZ7uKc1Ye8WdQ3bMx6RtG get_time {"tz": "Asia/Tokyo"}`,
			"finish:tool_calls in=1210 out=48 read=1024 write=0 think=0"}},
		{File: "openai_text_then_tool.sse", Want: []string{
			"text+", "text:Let me", "text: check.", "text-",
			`call:call_Tq2 read_file {"path":"a.txt"}`,
			"finish:tool_calls in=87 out=21 read=0 write=0 think=0"}},
		{File: "deepseek_reasoning.sse", Want: []string{
			"reason+", "reason:The user", "reason: greets me.", "reason-",
			"text+", "text:Hi", "text: there!", "text-",
			"finish:stop in=12 out=30 read=0 write=0 think=24"}},
		{File: "ollama_reasoning_tool.sse", Want: []string{
			"reason+", "reason:I need", "reason: the weather.", "reason-",
			`call:call_o1nq2x7d get_weather {"city":"Paris"}`,
			// Ollama says "stop" for a tool call reply.
			"finish:tool_calls in=140 out=35 read=0 write=0 think=0"}},
		{File: "compat_index0_no_done.sse", Want: []string{
			`call:function-call-1 get_weather {"city":"Paris"}`,
			`call:function-call-2 get_weather {"city":"Rome"}`,
			"finish:tool_calls in=30 out=12 read=0 write=0 think=0"}},
		{File: "azure_content_filter.sse", Want: []string{
			"text+", "text:I can", "text-",
			"finish:content_filter in=25 out=2 read=0 write=0 think=0"}},
		{File: "openai_length_truncated_args.sse", Want: []string{
			// Invalid JSON arguments are still emitted, raw.
			`call:call_Lz9 write_file {"path":"a.txt","content":"lo`,
			"finish:length in=50 out=16 read=0 write=0 think=0"}},
		{File: "openrouter_comments_reasoning.sse", Want: []string{
			"reason+", "reason:Short", "reason: answer.", "reason-", "text+", "text:Yes.", "text-",
			"finish:stop in=9 out=7 read=0 write=0 think=5"}},
		{File: "openai_error_event.sse", Want: []string{"text+", "text:Par"},
			Err: &forge.ModelError{Provider: "openai", Message: "The server had an error processing your request", Retryable: true}},
	}, func(t *testing.T, sse []byte) forge.Model {
		srv, m := newModel(t)
		srv.Enqueue(openaitest.Raw(sse))
		return m
	})
}

// TestHTTPErrors: the errors of OpenAI's own API (quotas, a delay in
// the message) and of compatible servers (vLLM, llama.cpp, Ollama); the
// conformance suite checks what every API answers alike. The fake adds
// "Retry-After: 1" to 429 answers.
func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	const (
		quota = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
		// The type alone, as some proxies pass it on.
		quotaType = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":null}}`
		billing   = `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","param":null,"code":"billing_hard_limit_reached"}}`
		// vLLM: a numeric code, the old top-level shape and the new one.
		vllmOld = `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4096 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`
		vllmNew = `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 1024. This model's maximum context length is 4096 tokens and your request has 3500 input tokens (1024 > 4096 - 3500).","type":"BadRequestError","param":null,"code":400}}`
		// llama.cpp's server: its own type, a message without "length".
		llamacpp = `{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}`
		// Ollama's compatible API passes a runner error on as a 500.
		ollama  = `{"error":{"message":"input exceeds maximum context length","type":"api_error","param":null,"code":null}}`
		slowMsg = `{"error":{"message":"Rate limit reached for gpt-4.1-mini on tokens per min (TPM): Limit 200000, Used 199500, Requested 1200. Please try again in 1.5s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	)
	tests := []struct {
		name      string
		resp      openaitest.Response
		status    int
		retryable bool
		after     time.Duration
		overflow  bool
		message   string
	}{
		{"429 delay in the message", openaitest.Status(429, slowMsg).Header("Retry-After", "0"), 429, true, 1500 * time.Millisecond, false, "tokens per min"},
		{"429 insufficient quota", openaitest.Status(429, quota), 429, false, time.Second, false, "retrying cannot help"},
		{"429 insufficient quota type", openaitest.Status(429, quotaType), 429, false, time.Second, false, "retrying cannot help"},
		{"429 billing hard limit", openaitest.Status(429, billing), 429, false, time.Second, false, "retrying cannot help"},
		{"400 vllm old", openaitest.Status(400, vllmOld), 400, false, 0, true, "maximum context length is 4096"},
		{"400 vllm new", openaitest.Status(400, vllmNew), 400, false, 0, true, "maximum context length is 4096"},
		{"400 llama.cpp", openaitest.Status(400, llamacpp), 400, false, 0, true, "exceeds the available context size"},
		{"500 ollama", openaitest.Status(500, ollama), 500, false, 0, true, "input exceeds maximum context length"},
	}
	for _, api := range apis {
		for _, tt := range tests {
			t.Run(api.name+"/"+tt.name, func(t *testing.T) {
				srv := openaitest.New(t)
				srv.Enqueue(tt.resp)
				got, err := providertest.Collect(t.Context(), api.model(openai.Config{BaseURL: srv.URL()}), hello())
				if len(got) != 0 {
					t.Errorf("events before the error: %q", got)
				}
				me := providertest.ModelError(t, err)
				if me.StatusCode != tt.status || me.Retryable != tt.retryable || me.RetryAfter != tt.after ||
					me.ContextOverflow != tt.overflow || !strings.Contains(me.Message, tt.message) {
					t.Errorf("error = %+v, want status %d retryable %v after %v overflow %v message ~ %q",
						me, tt.status, tt.retryable, tt.after, tt.overflow, tt.message)
				}
			})
		}
	}
}

// A quota error keeps the provider's message and says why it is final.
func TestQuotaErrorMessage(t *testing.T) {
	t.Parallel()
	for _, api := range apis {
		srv := openaitest.New(t)
		srv.Enqueue(openaitest.Status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`))
		_, err := providertest.Collect(t.Context(), api.model(openai.Config{BaseURL: srv.URL()}), hello())
		const want = "openai: status 429: You exceeded your current quota, please check your plan and billing details." +
			" (insufficient_quota: the account is out of quota or credit, or over its billing limit;" +
			" not retried, as retrying cannot help until its plan or billing is fixed)"
		if me := providertest.ModelError(t, err); me.Retryable || err.Error() != want {
			t.Errorf("%s: error = %q (retryable %v)\nwant %q", api.name, err, me.Retryable, want)
		}
	}
}

// TestProviderNames: the name in errors and in the registry.
func TestProviderNames(t *testing.T) {
	t.Parallel()
	if n := openai.NewResponses(openai.Config{Name: "azure"}).Name(); n != "azure" {
		t.Errorf("Name() = %q", n)
	}
	if openai.NewResponses(openai.Config{}).Name() != "openai" || openai.New(openai.Config{}).Name() != "openai" {
		t.Error("default name")
	}
}

// Error events mid-stream: a quota error is final, a context overflow is
// marked.
func TestErrorEventClassified(t *testing.T) {
	t.Parallel()
	const first = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	tests := []struct {
		name     string
		event    string
		retry    bool
		overflow bool
		message  string
	}{
		{"quota", `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, false, false, "retrying cannot help"},
		{"overflow", `{"error":{"message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}}`, false, true, "maximum context length"},
		{"rate limit", `{"error":{"message":"Rate limit reached.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, true, false, "Rate limit reached."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(openaitest.Raw([]byte(first + "data: " + tt.event + "\n\n")))
			_, err := providertest.Collect(t.Context(), m, hello())
			me := providertest.ModelError(t, err)
			if me.Retryable != tt.retry || me.ContextOverflow != tt.overflow || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v, want retryable %v overflow %v message ~ %q", me, tt.retry, tt.overflow, tt.message)
			}
		})
	}
}

// TestWireRequest asserts exactly what is sent.
// atOpenAI returns a model configured for OpenAI's own API (no base URL)
// whose requests the transport delivers to srv instead.
func atOpenAI(t testing.TB, srv *openaitest.Server, cfg openai.Config) forge.Model {
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "api.openai.com" {
			return nil, fmt.Errorf("request to %s, not api.openai.com", r.URL.Host)
		}
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, u.Host
		return http.DefaultTransport.RoundTrip(r)
	})}
	return openai.New(cfg).Model("gpt-4.1-mini")
}

// TestMaxTokensField: ModelParams.MaxTokens goes in max_completion_tokens to
// OpenAI's own API and in max_tokens to any other server (Ollama and other
// compatible servers ignore max_completion_tokens), unless the provider's
// MaxTokensField says otherwise.
func TestMaxTokensField(t *testing.T) {
	t.Parallel()
	limit := int64(12)
	for _, c := range []struct {
		name     string
		official bool
		field    string
		want     string
	}{
		{"OpenAI by default", true, "", "max_completion_tokens"},
		{"compatible server by default", false, "", "max_tokens"},
		{"OpenAI told max_tokens", true, openai.MaxTokens, "max_tokens"},
		{"compatible server told max_completion_tokens", false, openai.MaxCompletionTokens, "max_completion_tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.New(t)
			cfg := openai.Config{MaxTokensField: c.field}
			var m forge.Model
			if c.official {
				m = atOpenAI(t, srv, cfg)
			} else {
				cfg.BaseURL = srv.URL()
				m = openai.New(cfg).Model("gpt-4.1-mini")
			}
			req := hello()
			req.Params.MaxTokens = &limit
			if _, err := providertest.Collect(t.Context(), m, req); err != nil {
				t.Fatal(err)
			}
			r, _ := srv.LastRequest()
			var body map[string]json.RawMessage
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[c.want]
			if string(body[c.want]) != "12" || body[other] != nil {
				t.Errorf("body %s: want %s=12 and no %s", r.Body, c.want, other)
			}
		})
	}
	if !openai.IsOpenAIBaseURL("") || !openai.IsOpenAIBaseURL("https://api.openai.com/v1/") || openai.IsOpenAIBaseURL("http://127.0.0.1:11434/v1") {
		t.Error("IsOpenAIBaseURL")
	}
}

func TestWireRequest(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	m := atOpenAI(t, srv, openai.Config{})
	maxTokens, temp := int64(512), 0.2
	req := &forge.ModelRequest{
		Model:  "gpt-4.1-mini",
		System: "You are terse.",
		Messages: []forge.ModelMessage{
			{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Weather in Paris and Tokyo?"}}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				{Type: forge.ModelPartReasoning, Text: "two lookups"},
				{Type: forge.ModelPartText, Text: "Checking "},
				{Type: forge.ModelPartText, Text: "both."},
				{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
				{Type: forge.ModelPartToolCall, CallID: "call_2", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Tokyo"}`)},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_1", Output: "18C sunny"},
				{Type: forge.ModelPartToolResult, CallID: "call_2", Output: "denied: not allowed", IsError: true},
			}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolCall, CallID: "call_3", Name: "now"},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "call_3", Output: "12:00"},
			}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Paris: 18C."}}},
			{Role: forge.RoleUser, Parts: []forge.ModelPart{
				{Type: forge.ModelPartText, Text: "Thanks."},
				{Type: forge.ModelPartText, Text: "And Rome?"},
			}},
		},
		Tools:  providertest.Tools(),
		Params: forge.ModelParams{MaxTokens: &maxTokens, Temperature: &temp, ReasoningEffort: "low"},
	}
	if _, err := providertest.Collect(t.Context(), m, req); err != nil {
		t.Fatal(err)
	}
	r, ok := srv.LastRequest()
	if !ok {
		t.Fatal("no request")
	}
	want := `{
	  "model": "gpt-4.1-mini",
	  "messages": [
	    {"role": "system", "content": "You are terse."},
	    {"role": "user", "content": "Weather in Paris and Tokyo?"},
	    {"role": "assistant", "content": "Checking both.", "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
	      {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Tokyo\"}"}}]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "18C sunny"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "denied: not allowed"},
	    {"role": "assistant", "tool_calls": [
	      {"id": "call_3", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
	    {"role": "tool", "tool_call_id": "call_3", "content": "12:00"},
	    {"role": "assistant", "content": "Paris: 18C."},
	    {"role": "user", "content": [{"type": "text", "text": "Thanks."}, {"type": "text", "text": "And Rome?"}]}
	  ],
	  "tools": [
	    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters":
	      {"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}}},
	    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
	    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
	    {"type": "function", "function": {"name": "untyped", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "$defs": {"x": {}}}}}
	  ],
	  "stream": true,
	  "stream_options": {"include_usage": true},
	  "max_completion_tokens": 512,
	  "temperature": 0.2,
	  "reasoning_effort": "low"
	}`
	var gotV, wantV any
	if err := json.Unmarshal(r.Body, &gotV); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &wantV); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotV, wantV) {
		g, _ := json.MarshalIndent(gotV, "", "  ")
		w, _ := json.MarshalIndent(wantV, "", "  ")
		t.Errorf("request body:\n%s\nwant:\n%s", g, w)
	}
	if r.StreamOptions == nil || !r.StreamOptions.IncludeUsage || !r.Stream {
		t.Errorf("stream options not decoded: %+v", r.StreamOptions)
	}
}

func TestNoParamsSent(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	if _, err := providertest.Collect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	r, _ := srv.LastRequest()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	// (The conformance suite checks the token limit, temperature and
	// tools.)
	if _, ok := body["reasoning_effort"]; ok {
		t.Error("reasoning_effort sent though not set")
	}
}

// TestStreamCutNamesServer: a stream the server ends without
// finish_reason, usage or [DONE] (as Ollama does when it stops a
// repetition) fails, and the error says which server and model, and what
// the stream lacked.
func TestStreamCutNamesServer(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	base := strings.Replace(srv.URL(), "http://", "http://forge:hunter2pass@", 1)
	m := openai.New(openai.Config{Name: "ollama", BaseURL: base}).Model("llama3")
	chunk := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"llama3","choices":[{"index":0,"delta":{"role":"assistant","content":"%s"},"finish_reason":null}]}` + "\n\n"
	srv.Enqueue(openaitest.Raw([]byte(fmt.Sprintf(chunk, "la ") + fmt.Sprintf(chunk, "la"))))
	req := hello()
	req.Model = "" // the provider's model id
	got, err := providertest.Collect(t.Context(), m, req)
	me := providertest.ModelError(t, err)
	want := fmt.Sprintf(`ollama: the stream from %s (model "llama3") ended before the response was complete: no finish_reason, usage or [DONE]; the server closed it`,
		strings.Replace(srv.URL(), "http://", "http://forge:xxxxx@", 1))
	if me.Error() != want || !me.Retryable {
		t.Errorf("error %q (retryable %v)\nwant  %q", me.Error(), me.Retryable, want)
	}
	if strings.Contains(me.Error(), "hunter2pass") {
		t.Error("the error shows the URL's password")
	}
	if len(got) == 0 {
		t.Error("the text before the cut was not passed on")
	}
	// With a usage chunk, only the rest is missing.
	usage := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"llama3","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\n"
	srv.Enqueue(openaitest.Raw([]byte(fmt.Sprintf(chunk, "la") + usage)))
	_, err = providertest.Collect(t.Context(), m, req)
	if me := providertest.ModelError(t, err); !strings.Contains(me.Message, "no finish_reason or [DONE]; the server closed it") {
		t.Errorf("error %q", me.Message)
	}
}
