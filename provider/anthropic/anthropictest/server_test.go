package anthropictest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
)

func post(t *testing.T, srv *anthropictest.Server, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2026-10-21")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
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

const hi = `{"model":"claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestWireFormat(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.Enqueue(
		anthropictest.Text("Hel", "lo \"q\"\n").Usage(3, 2),
		anthropictest.Thinking("hm").ToolUse(anthropictest.Call{ID: "toolu_1", Name: "get_weather", Input: `{"city":"Paris"}`}).
			Tokens(anthropictest.Tokens{Input: 9, Output: 4, CacheRead: 7, CacheWrite: 5, Thinking: 1}),
	)
	res, body := post(t, srv, hi)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" || res.Header.Get("request-id") == "" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	want := "event: message_start\n" +
		`data: {"type":"message_start","message":{"model":"claude-x","id":"msg_01ATEST0000000000000001","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"stop_details":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard","inference_geo":"global"}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo \"q\"\n"}}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null,"stop_details":null},"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2,"output_tokens_details":{"thinking_tokens":0}}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	if body != want {
		t.Errorf("stream:\n%s\nwant:\n%s", body, want)
	}

	_, body = post(t, srv, hi)
	sig := anthropictest.Sign("hm")
	want = "event: message_start\n" +
		`data: {"type":"message_start","message":{"model":"claude-x","id":"msg_01ATEST0000000000000002","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"stop_details":null,"usage":{"input_tokens":9,"cache_creation_input_tokens":5,"cache_read_input_tokens":7,"cache_creation":{"ephemeral_5m_input_tokens":5,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard","inference_geo":"global"}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}` + "\n\n" +
		"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"` + sig + `"}}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\""}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"Paris\"}"}}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":1}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null,"stop_details":null},"usage":{"input_tokens":9,"cache_creation_input_tokens":5,"cache_read_input_tokens":7,"output_tokens":4,"output_tokens_details":{"thinking_tokens":1}}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	if body != want {
		t.Errorf("stream:\n%s\nwant:\n%s", body, want)
	}
}

func TestErrorEventAndRaw(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.Enqueue(anthropictest.Text("a", "b").ErrorAfter(4, "overloaded_error", "Overloaded"))
	_, body := post(t, srv, hi)
	if !strings.HasSuffix(body, "event: error\n"+`data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`+"\n\n") ||
		strings.Count(body, "event: ") != 5 {
		t.Errorf("stream:\n%s", body)
	}
	raw := "event: message_start\r\ndata: {\"type\":\"message_start\"}\r\n\r\n\r\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n"
	srv.Enqueue(anthropictest.Raw([]byte(raw)))
	_, body = post(t, srv, hi)
	if body != "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n" {
		t.Errorf("raw replay %q", body)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.Enqueue(anthropictest.Status(429, ""), anthropictest.Status(529, ""), anthropictest.PromptTooLong(300000, 200000),
		anthropictest.Status(500, `{"type":"error","error":{"type":"api_error","message":"custom"}}`).Header("x-should-retry", "false"))
	tests := []struct {
		status int
		body   string
		header string
	}{
		{429, `"type":"rate_limit_error"`, "1"},
		{529, `"error":{"type":"overloaded_error","message":"Overloaded"}`, ""},
		{400, `"message":"prompt is too long: 300000 tokens > 200000 maximum"`, ""},
		{500, `"message":"custom"`, ""},
	}
	for _, tt := range tests {
		res, body := post(t, srv, hi)
		if res.StatusCode != tt.status || !strings.Contains(body, tt.body) || res.Header.Get("Retry-After") != tt.header {
			t.Errorf("%d %v %s, want %d %s", res.StatusCode, res.Header, body, tt.status, tt.body)
		}
	}
	if res, _ := post(t, srv, hi); res.StatusCode != 200 || srv.Pending() != 0 {
		t.Errorf("default answer: %d", res.StatusCode)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.SetAPIKey("sk-ant-1")
	tests := []struct {
		header []string
		status int
		msg    string
	}{
		{nil, 401, "x-api-key header is required"},
		{[]string{"x-api-key", "sk-ant-2"}, 401, "invalid x-api-key"},
		{[]string{"Authorization", "Bearer sk-ant-2"}, 401, "invalid x-api-key"},
		{[]string{"x-api-key", "sk-ant-1"}, 200, ""},
		{[]string{"Authorization", "Bearer sk-ant-1"}, 200, ""},
		// x-api-key wins over the bearer token.
		{[]string{"Authorization", "Bearer sk-ant-1", "x-api-key", "sk-ant-2"}, 401, "invalid x-api-key"},
		{[]string{"x-api-key", "sk-ant-1", "anthropic-version", ""}, 400, "anthropic-version: header is required"},
		{[]string{"x-api-key", "sk-ant-1", "anthropic-version", "2023-06-01"}, 200, ""},
		{[]string{"x-api-key", "sk-ant-1", "anthropic-version", "2024-01-01"}, 400, "unknown version"},
	}
	for _, tt := range tests {
		res, body := post(t, srv, hi, tt.header...)
		if res.StatusCode != tt.status || !strings.Contains(body, tt.msg) {
			t.Errorf("%q: %d %s, want %d %q", tt.header, res.StatusCode, body, tt.status, tt.msg)
		}
	}
	if n := len(srv.Requests()); n != 5 {
		t.Errorf("%d requests recorded, want the 5 past the key check", n)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	const tools = `"tools":[{"name":"x","input_schema":{"type":"object","properties":{}}}]`
	use := func(id string) string {
		return `{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"x","input":{}}]}`
	}
	result := func(id string) string {
		return `{"type":"tool_result","tool_use_id":"` + id + `","content":"ok"}`
	}
	u := `{"role":"user","content":"go"}`
	req := func(extra string, msgs ...string) string {
		if extra != "" {
			extra += ","
		}
		return `{"model":"m","max_tokens":4000,"stream":true,` + extra + `"messages":[` + strings.Join(msgs, ",") + `]}`
	}
	signed := `{"type":"thinking","thinking":"plan","signature":"` + anthropictest.Sign("plan") + `"}`
	tests := []struct {
		name string
		body string
		msg  string // "" for accepted
	}{
		{"ok", req(tools, u, use("toolu_1"), `{"role":"user","content":[`+result("toolu_1")+`,{"type":"text","text":"and?"}]}`), ""},
		{"no model", `{"max_tokens":1,"messages":[` + u + `]}`, "model: Field required"},
		{"no max_tokens", `{"model":"m","messages":[` + u + `]}`, "max_tokens: Field required"},
		{"no messages", `{"model":"m","max_tokens":1,"messages":[]}`, "messages: Field required"},
		{"temperature", req(`"temperature":1`, u), "temperature: Extra inputs are not permitted"},
		{"top_k", req(`"top_k":5`, u), "top_k: Extra inputs are not permitted"},
		{"roles alternate", req("", u, u), `roles must alternate between "user" and "assistant", but found multiple "user" roles in a row`},
		{"bad role", req("", `{"role":"tool","content":"x"}`), "messages.0.role: Input should be 'user' or 'assistant'"},
		{"empty content", req("", `{"role":"user","content":[]}`), "messages.0: all messages must have non-empty content"},
		{"empty text", req("", `{"role":"user","content":""}`), "text content blocks must be non-empty"},
		{"blank text", req("", `{"role":"user","content":[{"type":"text","text":" \n"}]}`), "text content blocks must contain non-whitespace text"},
		{"final whitespace", req("", u, `{"role":"assistant","content":"Sure "}`), "final assistant content cannot end with trailing whitespace"},
		{"prefill", req("", u, `{"role":"assistant","content":"Sure"}`), ""},
		{"tool_use without result", req(tools, u, use("toolu_1"), `{"role":"user","content":"what?"}`),
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1."},
		{"tool_use at the end", req(tools, u, use("toolu_1")), "messages.1: `tool_use` ids were found without `tool_result` blocks"},
		{"text before result", req(tools, u, use("toolu_1"), `{"role":"user","content":[{"type":"text","text":"x"},`+result("toolu_1")+`]}`),
			"`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"},
		{"result without use", req(tools, u, `{"role":"assistant","content":"hm"}`, `{"role":"user","content":[`+result("toolu_9")+`]}`),
			"messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"},
		{"bad tool_use id", req(tools, u, use("call.1"), `{"role":"user","content":[`+result("call.1")+`]}`),
			"messages.1.content.0.tool_use.id: String should match pattern"},
		{"input not an object", req(tools, u, `{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"x","input":"{}"}]}`, `{"role":"user","content":[`+result("t")+`]}`),
			"tool_use.input: Input should be a valid dictionary"},
		{"duplicate ids", req(tools, u, `{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"x","input":{}},{"type":"tool_use","id":"t","name":"x","input":{}}]}`, `{"role":"user","content":[`+result("t")+`]}`),
			"`tool_use` ids must be unique"},
		{"tool schema", req(`"tools":[{"name":"x","input_schema":{"type":"string"}}]`, u), "tools.0.custom.input_schema.type: Input should be 'object'"},
		{"tool name", req(`"tools":[{"name":"a.b","input_schema":{"type":"object"}}]`, u), "tools.0.custom.name: String should match pattern"},
		{"duplicate tools", req(`"tools":[{"name":"a","input_schema":{"type":"object"}},{"name":"a","input_schema":{"type":"object"}}]`, u), "Tool names must be unique"},
		{"budget too small", req(`"thinking":{"type":"enabled","budget_tokens":512}`, u), "budget_tokens: Input should be greater than or equal to 1024"},
		{"budget over max_tokens", req(`"thinking":{"type":"enabled","budget_tokens":4000}`, u), "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{"effort", req(`"output_config":{"effort":"extreme"}`, u), "output_config.effort"},
		{"thinking signed", req(`"thinking":{"type":"enabled","budget_tokens":1024},`+tools, u,
			`{"role":"assistant","content":[`+signed+`,{"type":"tool_use","id":"t","name":"x","input":{}}]}`, `{"role":"user","content":[`+result("t")+`]}`), ""},
		{"thinking changed", req(tools, u, `{"role":"assistant","content":[{"type":"thinking","thinking":"plan!","signature":"`+anthropictest.Sign("plan")+`"}]}`, u),
			"messages.1.content.0: Invalid `signature` in `thinking` block"},
		{"thinking foreign signature", req(tools, u, `{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"RXFRQkNr"}]}`, u), ""},
		{"thinking unsigned", req(tools, u, `{"role":"assistant","content":[{"type":"thinking","thinking":"x"}]}`, u),
			"messages.1.content.0.thinking.signature: Field required"},
		{"thinking missing in loop", req(`"thinking":{"type":"enabled","budget_tokens":1024},`+tools, u, use("t"), `{"role":"user","content":[`+result("t")+`]}`),
			"messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block"},
		{"adaptive loop without thinking", req(`"thinking":{"type":"adaptive"},`+tools, u, use("t"), `{"role":"user","content":[`+result("t")+`]}`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := anthropictest.New(t)
			srv.Enqueue(anthropictest.Text("queued"))
			res, body := post(t, srv, tt.body)
			if tt.msg == "" {
				if res.StatusCode != 200 || srv.Pending() != 0 {
					t.Fatalf("refused: %d %s", res.StatusCode, body)
				}
				return
			}
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 400 || e.Type != "error" || e.Error.Type != "invalid_request_error" ||
				!strings.Contains(e.Error.Message, tt.msg) || e.RequestID == "" {
				t.Errorf("%d %s, want 400 %q", res.StatusCode, body, tt.msg)
			}
			if srv.Pending() != 1 {
				t.Error("a refused request consumed the queued response")
			}
			if r, ok := srv.LastRequest(); !ok || string(r.Body) != tt.body {
				t.Error("refused request not recorded")
			}
		})
	}
}

func TestDecodedRequest(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	post(t, srv, `{"model":"m","max_tokens":9,"stream":true,"system":[{"type":"text","text":"be "},{"type":"text","text":"brief"}],
		"thinking":{"type":"adaptive"},"output_config":{"effort":"low"},"cache_control":{"type":"ephemeral"},
		"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t","name":"x","input":{"k":1}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}],"is_error":true}]}],
		"tools":[{"name":"x","description":"d","input_schema":{"type":"object"}}]}`)
	r, _ := srv.LastRequest()
	if r.Model != "m" || *r.MaxTokens != 9 || !r.Stream || r.System != "be brief" || r.Thinking.Type != "adaptive" ||
		r.OutputConfig.Effort != "low" || string(r.CacheControl) != `{"type":"ephemeral"}` || len(r.Tools) != 1 || r.Tools[0].Description != "d" {
		t.Errorf("request %+v", r)
	}
	m := r.Messages
	if len(m) != 3 || m[0].Text != "hi" || m[1].Text != "a" || string(m[1].Content[1].Input) != `{"k":1}` ||
		m[2].Content[0].Content != "r1r2" || !*m[2].Content[0].IsError || m[2].Content[0].ToolUseID != "t" {
		t.Errorf("messages %+v", m)
	}
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.Enqueue(anthropictest.Thinking("a").Text("Hi").ToolUse(anthropictest.Call{ID: "toolu_1", Name: "x", Input: `{"a":1}`}).Usage(5, 6))
	res, body := post(t, srv, `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)
	var msg struct {
		Type       string `json:"type"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, Text, Thinking, Signature, ID, Name string
			Input                                     json.RawMessage
		} `json:"content"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %s %v", res.StatusCode, body, err)
	}
	if msg.Type != "message" || msg.StopReason != "tool_use" || len(msg.Content) != 3 || msg.Content[0].Signature != anthropictest.Sign("a") ||
		msg.Content[1].Text != "Hi" || string(msg.Content[2].Input) != `{"a":1}` || msg.Usage.InputTokens != 5 || msg.Usage.OutputTokens != 6 {
		t.Errorf("message %s", body)
	}
}

func TestHangReleasedOnClose(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.Enqueue(anthropictest.Text("a").HangAfter(2))
	done, streaming := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest("POST", srv.URL()+"/v1/messages", strings.NewReader(hi))
		req.Header.Set("anthropic-version", "2026-10-21")
		res, err := http.DefaultClient.Do(req)
		close(streaming) // the server has sent its first events and hangs
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}()
	<-streaming
	srv.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled stream outlived Close")
	}
}
