package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
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

// render writes events compactly: "text+", "text:Hel", "text-", "reason+",
// "reason:...", "reason-", "call:ID NAME ARGS", "finish:REASON in=N out=N
// cached=N reasoning=N".
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
		return "reason-"
	case forge.ToolCallEvent:
		return fmt.Sprintf("call:%s %s %s", ev.ToolCall.ID, ev.ToolCall.Name, ev.ToolCall.Arguments)
	case forge.FinishEvent:
		u := ev.Finish.Usage
		return fmt.Sprintf("finish:%s in=%d out=%d cached=%d reasoning=%d", ev.Finish.Reason,
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.ReasoningTokens)
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

func hello() *forge.ModelRequest {
	return &forge.ModelRequest{Model: "gpt-4.1-mini", Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Hello"}}},
	}}
}

func newModel(t testing.TB) (*openaitest.Server, forge.Model) {
	srv := openaitest.New(t)
	return srv, openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini")
}

func modelError(t *testing.T, err error) *forge.ModelError {
	t.Helper()
	var me *forge.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *forge.ModelError", err, err)
	}
	return me
}

func TestFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file    string
		want    []string
		wantErr string // substring of a ModelError's message
	}{
		{file: "openai_text.sse", want: []string{
			"text+", "text:Hello", "text:!", "text: Café \"Ω\"\n", "text: <ok> & done.", "text-",
			"finish:stop in=19 out=10 cached=0 reasoning=0"}},
		{file: "openai_parallel_tools.sse", want: []string{
			`call:call_5Xq8yWbT3nKd0RmJ2vLc9PfA get_weather {"city": "Paris"}`,
			`call:call_Hn4sZ7uKc1Ye8WdQ3bMx6RtG get_time {"tz": "Asia/Tokyo"}`,
			"finish:tool_calls in=1210 out=48 cached=1024 reasoning=0"}},
		{file: "openai_text_then_tool.sse", want: []string{
			"text+", "text:Let me", "text: check.", "text-",
			`call:call_Tq2 read_file {"path":"a.txt"}`,
			"finish:tool_calls in=87 out=21 cached=0 reasoning=0"}},
		{file: "deepseek_reasoning.sse", want: []string{
			"reason+", "reason:The user", "reason: greets me.", "reason-",
			"text+", "text:Hi", "text: there!", "text-",
			"finish:stop in=12 out=30 cached=0 reasoning=24"}},
		{file: "ollama_reasoning_tool.sse", want: []string{
			"reason+", "reason:I need", "reason: the weather.", "reason-",
			`call:call_o1nq2x7d get_weather {"city":"Paris"}`,
			// Ollama says "stop" for a tool call reply.
			"finish:tool_calls in=140 out=35 cached=0 reasoning=0"}},
		{file: "compat_index0_no_done.sse", want: []string{
			`call:function-call-1 get_weather {"city":"Paris"}`,
			`call:function-call-2 get_weather {"city":"Rome"}`,
			"finish:tool_calls in=30 out=12 cached=0 reasoning=0"}},
		{file: "azure_content_filter.sse", want: []string{
			"text+", "text:I can", "text-",
			"finish:content_filter in=25 out=2 cached=0 reasoning=0"}},
		{file: "openai_length_truncated_args.sse", want: []string{
			// Invalid JSON arguments are still emitted, raw.
			`call:call_Lz9 write_file {"path":"a.txt","content":"lo`,
			"finish:length in=50 out=16 cached=0 reasoning=0"}},
		{file: "openrouter_comments_reasoning.sse", want: []string{
			"reason+", "reason:Short", "reason: answer.", "reason-", "text+", "text:Yes.", "text-",
			"finish:stop in=9 out=7 cached=0 reasoning=5"}},
		{file: "openai_error_event.sse", want: []string{"text+", "text:Par"},
			wantErr: "The server had an error processing your request"},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".sse"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			srv, m := newModel(t)
			srv.Enqueue(openaitest.Raw(data))
			got, err := collect(t.Context(), m, hello())
			if tt.wantErr != "" {
				me := modelError(t, err)
				if !strings.Contains(me.Message, tt.wantErr) || me.Provider != "openai" {
					t.Errorf("error = %+v, want message containing %q", me, tt.wantErr)
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
		resp openaitest.Response
		want []string
	}{
		{"text", openaitest.Text("Hel", "lo").Usage(7, 2), []string{
			"text+", "text:Hel", "text:lo", "text-", "finish:stop in=7 out=2 cached=0 reasoning=0"}},
		{"parallel tool calls across chunks", openaitest.Text("Checking.").ToolCalls(
			openaitest.Call{ID: "call_a", Name: "read_file", Args: `{"path":"some/long/path/name.txt"}`},
			openaitest.Call{ID: "call_b", Name: "list_files", Args: `{"dir":"."}`},
			openaitest.Call{ID: "call_c", Name: "noargs"},
		).Usage(30, 20), []string{
			"text+", "text:Checking.", "text-",
			`call:call_a read_file {"path":"some/long/path/name.txt"}`,
			`call:call_b list_files {"dir":"."}`,
			`call:call_c noargs {}`,
			"finish:tool_calls in=30 out=20 cached=0 reasoning=0"}},
		{"reasoning", openaitest.Reasoning("Think", "ing").Text("Done").Tokens(openaitest.Tokens{Input: 5, Output: 9, Cached: 3, Reasoning: 6}), []string{
			"reason+", "reason:Think", "reason:ing", "reason-", "text+", "text:Done", "text-",
			"finish:stop in=5 out=9 cached=3 reasoning=6"}},
		{"content filter", openaitest.Text("Sorry").Finish("content_filter").Usage(4, 1), []string{
			"text+", "text:Sorry", "text-", "finish:content_filter in=4 out=1 cached=0 reasoning=0"}},
		{"length", openaitest.Text("cut").Finish("length").Usage(4, 1), []string{
			"text+", "text:cut", "text-", "finish:length in=4 out=1 cached=0 reasoning=0"}},
		{"empty reply", openaitest.Text().Usage(4, 0), []string{
			"finish:stop in=4 out=0 cached=0 reasoning=0"}},
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

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	const (
		quota = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
		// The type alone, as some proxies pass it on.
		quotaType = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":null}}`
		billing   = `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","param":null,"code":"billing_hard_limit_reached"}}`
		overflow  = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
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
		// The fake adds "Retry-After: 1" to 429 and 503 answers.
		{"429", openaitest.Status(429, ""), 429, true, time.Second, false, "Rate limit reached"},
		{"429 Retry-After", openaitest.Status(429, "").Header("Retry-After", "7"), 429, true, 7 * time.Second, false, "Rate limit"},
		{"429 retry-after-ms", openaitest.Status(429, "").Header("Retry-After-Ms", "250"), 429, true, 250 * time.Millisecond, false, "Rate limit"},
		{"429 delay in the message", openaitest.Status(429, slowMsg).Header("Retry-After", "0"), 429, true, 1500 * time.Millisecond, false, "tokens per min"},
		{"429 insufficient quota", openaitest.Status(429, quota), 429, false, time.Second, false, "retrying cannot help"},
		{"429 insufficient quota type", openaitest.Status(429, quotaType), 429, false, time.Second, false, "retrying cannot help"},
		{"429 billing hard limit", openaitest.Status(429, billing), 429, false, time.Second, false, "retrying cannot help"},
		{"500", openaitest.Status(500, ""), 500, true, 0, false, "The server had an error"},
		{"503 plain text", openaitest.Status(503, "upstream overloaded").Header("Retry-After", "12"), 503, true, 12 * time.Second, false, "upstream overloaded"},
		{"400 json", openaitest.Status(400, `{"error":{"message":"max_tokens is too large","type":"invalid_request_error","param":"max_tokens","code":null}}`), 400, false, 0, false, "max_tokens is too large"},
		{"400 context length", openaitest.Status(400, overflow), 400, false, 0, true, "maximum context length is 128000"},
		{"400 vllm old", openaitest.Status(400, vllmOld), 400, false, 0, true, "maximum context length is 4096"},
		{"400 vllm new", openaitest.Status(400, vllmNew), 400, false, 0, true, "maximum context length is 4096"},
		{"400 llama.cpp", openaitest.Status(400, llamacpp), 400, false, 0, true, "exceeds the available context size"},
		{"500 ollama", openaitest.Status(500, ollama), 500, false, 0, true, "input exceeds maximum context length"},
		{"401", openaitest.Status(401, ""), 401, false, 0, false, "Incorrect API key"},
		{"404 bare", openaitest.Status(404, `{"detail":"Not Found"}`), 404, false, 0, false, `{"detail":"Not Found"}`},
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
			if me.StatusCode != tt.status || me.Retryable != tt.retryable || me.RetryAfter != tt.after ||
				me.ContextOverflow != tt.overflow || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v, want status %d retryable %v after %v overflow %v message ~ %q",
					me, tt.status, tt.retryable, tt.after, tt.overflow, tt.message)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

// A quota error keeps the provider's message and says why it is final.
func TestQuotaErrorMessage(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(openaitest.Status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`))
	_, err := collect(t.Context(), m, hello())
	const want = "openai: status 429: You exceeded your current quota, please check your plan and billing details." +
		" (insufficient_quota: the account is out of quota or credit, or over its billing limit;" +
		" not retried, as retrying cannot help until its plan or billing is fixed)"
	if me := modelError(t, err); me.Retryable || err.Error() != want {
		t.Errorf("error = %q (retryable %v)\nwant %q", err, me.Retryable, want)
	}
}

func TestRetryAfterDate(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(openaitest.Status(503, "").Header("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat)))
	_, err := collect(t.Context(), m, hello())
	if me := modelError(t, err); !me.Retryable || me.RetryAfter < 25*time.Second || me.RetryAfter > 31*time.Second {
		t.Errorf("error = %+v, want RetryAfter about 30s", me)
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
			_, err := collect(t.Context(), m, hello())
			me := modelError(t, err)
			if me.Retryable != tt.retry || me.ContextOverflow != tt.overflow || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v, want retryable %v overflow %v message ~ %q", me, tt.retry, tt.overflow, tt.message)
			}
		})
	}
}

func TestRequestRefusedByValidation(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	req := hello()
	req.Messages = append(req.Messages, forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolCall, CallID: "call_1", Name: "x", Arguments: json.RawMessage(`{}`)}}})
	_, err := collect(t.Context(), m, req)
	me := modelError(t, err)
	if me.StatusCode != 400 || me.Retryable || !strings.Contains(me.Message, "call_1") {
		t.Errorf("error = %+v", me)
	}
	_ = srv
}

func TestMidStreamFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		resp      openaitest.Response
		want      []string
		retryable bool
		message   string
	}{
		{"cut", openaitest.Text("a", "b", "c", "d").CutAfter(3), []string{"text+", "text:a", "text:b"}, true, "stream"},
		{"cut before any chunk", openaitest.Text("a").CutAfter(0), nil, true, "stream"},
		{"cut before the finish chunk", openaitest.Text("a").CutAfter(2), []string{"text+", "text:a"}, true, "stream"},
		{"error event", openaitest.Text("a", "b", "c").ErrorAfter(2, "boom"), []string{"text+", "text:a"}, true, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m := newModel(t)
			srv.Enqueue(tt.resp)
			got, err := collect(t.Context(), m, hello())
			me := modelError(t, err)
			if me.Retryable != tt.retryable || !strings.Contains(me.Message, tt.message) {
				t.Errorf("error = %+v", me)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A cut after the finish_reason only loses the usage chunk.
func TestCutAfterFinish(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(openaitest.Text("a").CutAfter(3))
	got, err := collect(t.Context(), m, hello())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"text+", "text:a", "text-", "finish:stop in=0 out=0 cached=0 reasoning=0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestStallCancelledByContext(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(openaitest.Text("a", "b", "c").HangAfter(2))
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
			// The stream now stalls; cancel from outside shortly after.
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

func TestCancelledBeforeHeaders(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.Enqueue(openaitest.Text("a").HangAfter(0))
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
	// The provider stays usable.
	got, err := collect(t.Context(), m, hello())
	if err != nil || len(got) == 0 || got[len(got)-1][:7] != "finish:" {
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
	m := openai.New(openai.Config{BaseURL: "http://" + addr + "/v1"}).Model("x")
	_, err = collect(t.Context(), m, hello())
	me := modelError(t, err)
	if !me.Retryable || me.StatusCode != 0 {
		t.Errorf("error = %+v, want retryable without status", me)
	}
}

func TestConfigWinsOverEnvironment(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-env")

	srv := openaitest.New(t)
	srv.SetAPIKey("sk-config")
	m := openai.New(openai.Config{APIKey: "sk-config", BaseURL: srv.URL()}).Model("gpt")
	if _, err := collect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	// Keyless: no Authorization header at all, despite OPENAI_API_KEY.
	srv2 := openaitest.New(t)
	m2 := openai.New(openai.Config{BaseURL: srv2.URL()}).Model("gpt")
	if _, err := collect(t.Context(), m2, hello()); err != nil {
		t.Fatal(err)
	}
	r, _ := srv2.LastRequest()
	if h := r.Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization %q sent without a configured key", h)
	}
	if h := r.Header.Get("OpenAI-Organization"); h != "" {
		t.Errorf("OpenAI-Organization %q read from the environment", h)
	}
	// A wrong key is a 401 ModelError.
	m3 := openai.New(openai.Config{APIKey: "sk-wrong", BaseURL: srv.URL()}).Model("gpt")
	_, err := collect(t.Context(), m3, hello())
	if me := modelError(t, err); me.StatusCode != 401 || me.Retryable {
		t.Errorf("error = %+v", me)
	}
}

func TestProviderName(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Status(500, ""))
	p := openai.New(openai.Config{Name: "vllm", BaseURL: srv.URL()})
	_, err := collect(t.Context(), p.Model("llama"), hello())
	if me := modelError(t, err); me.Provider != "vllm" {
		t.Errorf("provider = %q", me.Provider)
	}
	if r, _ := srv.LastRequest(); r.Model != "gpt-4.1-mini" {
		t.Errorf("model sent = %q, want the request's", r.Model)
	}
	srv.Enqueue(openaitest.Text("x"))
	req := hello()
	req.Model = ""
	if _, err := collect(t.Context(), p.Model("llama"), req); err != nil {
		t.Fatal(err)
	}
	if r, _ := srv.LastRequest(); r.Model != "llama" {
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
			if _, err := collect(t.Context(), m, req); err != nil {
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
		Tools: []forge.ToolDef{
			{Name: "get_weather", Description: "Weather of a city", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`)},
			{Name: "now", InputSchema: json.RawMessage(`{}`)},
			{Name: "ping"},
			{Name: "untyped", InputSchema: json.RawMessage(`{"properties":{"a":{"type":"integer"}}}`)},
		},
		Params: forge.ModelParams{MaxTokens: &maxTokens, Temperature: &temp, ReasoningEffort: "low"},
	}
	if _, err := collect(t.Context(), m, req); err != nil {
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
	    {"type": "function", "function": {"name": "untyped", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
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
	if _, err := collect(t.Context(), m, hello()); err != nil {
		t.Fatal(err)
	}
	r, _ := srv.LastRequest()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max_completion_tokens", "max_tokens", "temperature", "reasoning_effort", "tools"} {
		if _, ok := body[k]; ok {
			t.Errorf("%s sent though not set", k)
		}
	}
}

func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	srv, m := newModel(t)
	srv.RecordRequests(false)
	srv.SetDefault(openaitest.Text("a", "b", "c"))
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			got, err := collect(t.Context(), m, hello())
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
}

// TestConnectionReused checks that a finished stream leaves its connection
// to the next request (no new TCP, or TLS, handshake per model call).
func TestConnectionReused(t *testing.T) {
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
	m := openai.New(openai.Config{BaseURL: srv.URL(), HTTPClient: client}).Model("gpt")
	for range 3 {
		if _, err := collect(t.Context(), m, hello()); err != nil {
			t.Fatal(err)
		}
	}
	if want := []bool{false, true, true}; !reflect.DeepEqual(reused, want) {
		t.Errorf("connection reused: %v, want %v", reused, want)
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
	got, err := collect(t.Context(), m, req)
	me := modelError(t, err)
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
	_, err = collect(t.Context(), m, req)
	if me := modelError(t, err); !strings.Contains(me.Message, "no finish_reason or [DONE]; the server closed it") {
		t.Errorf("error %q", me.Message)
	}
}

// TestStreamReportsItsWaits: both APIs report their waits
// (forge.ReportWaits): one before the request, and one before a read of a
// stream that stalls, once every event of what was read has been passed on
// (the consumer cancels there; without that wait the test would time out).
func TestStreamReportsItsWaits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		api   string
		stall int // chunks (chat) or events (responses) before the stall, after "text:a"
	}{{"chat", 2}, {"responses", 5}} {
		t.Run(tc.api, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.New(t)
			cfg := openai.Config{BaseURL: srv.URL()}
			m := openai.New(cfg).Model("gpt-4.1-mini")
			if tc.api == "responses" {
				m = openai.NewResponses(cfg).Model("gpt-4.1-mini")
			}
			srv.Enqueue(openaitest.Text("a", "b", "c").HangAfter(tc.stall))
			providertest.ReportsWaits(t, m, hello(), render)
		})
	}
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
