package openaitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

const userOnly = `"messages":[{"role":"user","content":"hi"}]`

func post(t *testing.T, srv *openaitest.Server, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return res, string(b)
}

var createdRE = regexp.MustCompile(`"created":\d+`)

func TestWireFormat(t *testing.T) {
	t.Parallel()
	const head = `data: {"id":"chatcmpl-OTEST0000000000000000001","object":"chat.completion.chunk","created":0,"model":"gpt-x","system_fingerprint":"fp_openaitest","choices":[`
	tests := []struct {
		name  string
		resp  openaitest.Response
		usage bool
		want  []string // events, without the common head
	}{
		{"text with usage", openaitest.Text("Hel", "lo \"q\"\n").Usage(3, 2), true, []string{
			head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
			head + `{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			head + `{"index":0,"delta":{"content":"lo \"q\"\n"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
			head + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`,
			`data: [DONE]`,
		}},
		{"text without include_usage", openaitest.Text("<a&b>"), false, []string{
			head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"content":"<a&b>"},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`,
			`data: [DONE]`,
		}},
		{"tool calls", openaitest.ToolCalls(
			openaitest.Call{ID: "call_1", Name: "get_weather", Args: `{"city":"Paris"}`},
			openaitest.Call{ID: "call_2", Name: "now"},
		).Usage(9, 4), false, []string{
			head + `{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"Paris"}}]},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"now","arguments":""}}]},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}`,
			`data: [DONE]`,
		}},
		{"reasoning, no finish chunk", openaitest.Reasoning("hm").Text("ok").Finish(""), false, []string{
			head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"reasoning_content":"hm"},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"content":"ok"},"logprobs":null,"finish_reason":null}]}`,
			`data: [DONE]`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t)
			srv.Enqueue(tt.resp)
			body := `{"model":"gpt-x","stream":true,` + userOnly
			if tt.usage {
				body += `,"stream_options":{"include_usage":true}`
			}
			res, got := post(t, srv, body+"}")
			if ct := res.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			want := strings.Join(tt.want, "\n\n") + "\n\n"
			if got = createdRE.ReplaceAllString(got, `"created":0`); got != want {
				t.Errorf("stream:\n%s\nwant:\n%s", got, want)
			}
			// Every chunk is valid JSON.
			for _, line := range strings.Split(got, "\n\n") {
				if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" && !json.Valid([]byte(data)) {
					t.Errorf("invalid JSON: %s", data)
				}
			}
		})
	}
}

func TestDefaultUsageAndIDs(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "a"}, openaitest.Call{Name: "b"}))
	_, got := post(t, srv, `{"model":"m","stream":true,"stream_options":{"include_usage":true},`+userOnly+`}`)
	ids := regexp.MustCompile(`"id":"(call_[^"]+)"`).FindAllStringSubmatch(got, -1)
	if len(ids) != 2 || ids[0][1] == ids[1][1] {
		t.Errorf("call ids %q", ids)
	}
	if !regexp.MustCompile(`"usage":\{"prompt_tokens":[1-9]\d*,"completion_tokens":[1-9]`).MatchString(got) {
		t.Errorf("no default usage in %s", got)
	}
}

func TestDefaultResponse(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	for i, want := range []string{`"content":"ok"`, `"content":"custom"`} {
		if i == 1 {
			srv.SetDefault(openaitest.Text("custom"))
		}
		if _, got := post(t, srv, `{"model":"m","stream":true,`+userOnly+`}`); !strings.Contains(got, want) {
			t.Errorf("default reply %d: %s", i, got)
		}
	}
	srv.Enqueue(openaitest.Text("queued"))
	if srv.Pending() != 1 {
		t.Errorf("Pending = %d", srv.Pending())
	}
	if _, got := post(t, srv, `{"model":"m","stream":true,`+userOnly+`}`); !strings.Contains(got, `"content":"queued"`) {
		t.Errorf("queued reply: %s", got)
	}
	if srv.Pending() != 0 {
		t.Errorf("Pending = %d", srv.Pending())
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   func(*openaitest.Server)
		body    string
		header  []string
		path    string
		status  int
		message string
		retry   string
	}{
		{name: "429", setup: func(s *openaitest.Server) { s.Enqueue(openaitest.Status(429, "")) },
			status: 429, message: "Rate limit reached", retry: "1"},
		{name: "429 custom Retry-After", setup: func(s *openaitest.Server) {
			s.Enqueue(openaitest.Status(429, "").Header("Retry-After", "7"))
		}, status: 429, message: "Rate limit", retry: "7"},
		{name: "500 custom body", setup: func(s *openaitest.Server) { s.Enqueue(openaitest.Status(500, `{"error":{"message":"kaput"}}`)) },
			status: 500, message: "kaput"},
		{name: "auth", setup: func(s *openaitest.Server) { s.SetAPIKey("sk-1") }, header: []string{"Authorization", "Bearer sk-2"},
			status: 401, message: "Incorrect API key"},
		{name: "auth missing", setup: func(s *openaitest.Server) { s.SetAPIKey("sk-1") }, status: 401, message: "Incorrect API key"},
		{name: "bad json", body: `{"model":`, status: 400, message: "could not parse the JSON body"},
		{name: "no messages", body: `{"model":"m","messages":[]}`, status: 400, message: "too short"},
		{name: "stream_options without stream", body: `{"model":"m","stream_options":{"include_usage":true},` + userOnly + `}`, status: 400, message: "only allowed when 'stream' is enabled"},
		{name: "unanswered tool call", body: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"y"}]}`,
			status: 400, message: "did not have response messages: call_9"},
		{name: "orphan tool message", body: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_1","content":"r"}]}`,
			status: 400, message: "must be a response to a preceeding message with 'tool_calls'"},
		{name: "empty assistant", body: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null}]}`,
			status: 400, message: "expected a string, got null"},
		{name: "schema without type", body: `{"model":"m",` + userOnly + `,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`,
			status: 400, message: "schema must be a JSON Schema of 'type: \"object\"'"},
		{name: "bad function name", body: `{"model":"m",` + userOnly + `,"tools":[{"type":"function","function":{"name":"a.b"}}]}`,
			status: 400, message: "does not match pattern"},
		{name: "unknown path", path: "/v1/embeddings", body: "{}", status: 404, message: "Invalid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t)
			if tt.setup != nil {
				tt.setup(srv)
			}
			body := tt.body
			if body == "" {
				body = `{"model":"m","stream":true,` + userOnly + `}`
			}
			url := srv.URL() + "/chat/completions"
			if tt.path != "" {
				url = strings.TrimSuffix(srv.URL(), "/v1") + tt.path
			}
			req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
			for i := 0; i+1 < len(tt.header); i += 2 {
				req.Header.Set(tt.header[i], tt.header[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.status || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("status %d message %q, want %d ~ %q", res.StatusCode, e.Error.Message, tt.status, tt.message)
			}
			if got := res.Header.Get("Retry-After"); got != tt.retry {
				t.Errorf("Retry-After %q, want %q", got, tt.retry)
			}
		})
	}
}

func TestRequestsRecorded(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetAPIKey("sk-1")
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":5,"temperature":0.5,"reasoning_effort":"low",
	  "messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
	    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
	    {"role":"tool","tool_call_id":"call_1","content":"out"}],
	  "tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{}}}}]}`
	post(t, srv, body, "Authorization", "Bearer sk-1")
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Header.Get("Authorization") != "Bearer sk-1" || !bytes.Equal(r.Body, []byte(body)) {
		t.Errorf("header/body not kept")
	}
	if r.Model != "m" || !r.Stream || r.StreamOptions == nil || !r.StreamOptions.IncludeUsage ||
		*r.MaxCompletionTokens != 5 || *r.Temperature != 0.5 || r.ReasoningEffort != "low" {
		t.Errorf("params: %+v", r)
	}
	m := r.Messages
	if len(m) != 4 || m[0].Content != "s" || m[1].Content != "ab" || !m[2].ContentNull ||
		m[2].ToolCalls[0].ID != "call_1" || m[2].ToolCalls[0].Function.Arguments != `{"x":1}` ||
		m[3].Role != "tool" || m[3].ToolCallID != "call_1" || m[3].Content != "out" {
		t.Errorf("messages: %+v", m)
	}
	if len(r.Tools) != 1 || r.Tools[0].Function.Name != "f" || string(r.Tools[0].Function.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("tools: %+v", r.Tools)
	}
	srv.RecordRequests(false)
	post(t, srv, body, "Authorization", "Bearer sk-1")
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("recording off: %d requests", n)
	}
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Reasoning("r").Text("Hel", "lo").ToolCalls(openaitest.Call{ID: "call_1", Name: "f", Args: `{"a":1}`}).Usage(3, 4))
	res, body := post(t, srv, `{"model":"m",`+userOnly+`}`)
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
				ToolCalls        []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %s %v", res.StatusCode, body, err)
	}
	msg := c.Choices[0].Message
	if c.Object != "chat.completion" || msg.Content != "Hello" || msg.ReasoningContent != "r" ||
		msg.ToolCalls[0].Function.Arguments != `{"a":1}` || c.Choices[0].FinishReason != "tool_calls" ||
		c.Usage.PromptTokens != 3 || c.Usage.CompletionTokens != 4 {
		t.Errorf("completion: %s", body)
	}
}

func streamReq(ctx context.Context, srv *openaitest.Server) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL()+"/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,`+userOnly+`}`))
	return http.DefaultClient.Do(req)
}

func TestCutAfter(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a", "b", "c").CutAfter(2))
	res, err := streamReq(t.Context(), srv)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error = %v, want unexpected EOF", err)
	}
	if n := strings.Count(string(b), "data: "); n != 2 {
		t.Errorf("%d chunks before the cut: %s", n, b)
	}
}

func TestHangAfterReleasedByClientAndClose(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a", "b").HangAfter(1), openaitest.Text("a").HangAfter(1))
	// The client gives up.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	res, err := streamReq(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || strings.Count(string(b), "data: ") != 1 {
		t.Errorf("read %q, %v", b, err)
	}
	// The server closes while a stream stalls: Close does not hang.
	res, err = streamReq(t.Context(), srv)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a stalled stream")
	}
}

func TestDelayAndErrorAfter(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a", "b", "c").DelayBetweenChunks(20*time.Millisecond).ErrorAfter(3, "overloaded"))
	start := time.Now()
	res, err := streamReq(t.Context(), srv)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("took %v", d)
	}
	events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	if len(events) != 4 || events[3] != `data: {"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}` {
		t.Errorf("events: %q", events)
	}
}

func TestRaw(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Raw([]byte("data: {\"a\":1}\r\n\r\n\n\ndata: [DONE]\n\n")))
	_, got := post(t, srv, `{"model":"m","stream":true,`+userOnly+`}`)
	if got != "data: {\"a\":1}\n\ndata: [DONE]\n\n" {
		t.Errorf("raw replay: %q", got)
	}
}
