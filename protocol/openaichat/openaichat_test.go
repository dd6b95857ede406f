package openaichat_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openaichat"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

type msgs = []openai.ChatCompletionMessageParamUnion

func start(t *testing.T) (*prototest.Stack, openai.Client) {
	t.Helper()
	s := prototest.New(t, openaichat.Protocol{}, openairesp.Protocol{})
	return s, client(s, "unused")
}

func client(s *prototest.Stack, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// complete runs a non-streaming completion and returns it with the
// session Forge ran it in.
func complete(t *testing.T, c openai.Client, model string, m msgs, opts ...option.RequestOption) (*openai.ChatCompletion, string) {
	t.Helper()
	var resp *http.Response
	got, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: model, Messages: m},
		append(opts, option.WithResponseInto(&resp))...)
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	return got, resp.Header.Get(openaichat.SessionHeader)
}

func turns(t *testing.T, s *prototest.Stack, tenant, sid string) []*forge.Turn {
	t.Helper()
	ts, _, err := s.Store.ListTurns(context.Background(), tenant, sid, forge.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func sessions(t *testing.T, s *prototest.Stack) int {
	t.Helper()
	ss, _, err := s.Store.ListSessions(context.Background(), forge.DefaultTenant, forge.SessionQuery{ListOptions: forge.ListOptions{Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	return len(ss)
}

// TestMultiTurnByResendingHistory: a client that resends the whole
// conversation continues one session, each request running one turn
// chained from the last; a history that differs at an earlier user
// message forks at the difference, in the same session.
func TestMultiTurnByResendingHistory(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	first, sid := complete(t, c, "bot", msgs{openai.UserMessage("hi")})
	if sid == "" || first.Object != "chat.completion" || first.Model != "bot" {
		t.Fatalf("first: session %q, %+v", sid, first)
	}
	ch := first.Choices[0]
	if ch.Message.Content != "echo: hi" || ch.FinishReason != "stop" || ch.Message.Role != "assistant" {
		t.Fatalf("first answer: %+v", ch)
	}
	if u := first.Usage; u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v", u)
	}
	history := msgs{openai.UserMessage("hi"), ch.Message.ToParam(), openai.UserMessage("again")}
	second, sid2 := complete(t, c, "bot", history)
	if sid2 != sid || second.Choices[0].Message.Content != "echo: again" {
		t.Fatalf("second: session %q (want %q), %q", sid2, sid, second.Choices[0].Message.Content)
	}
	history = append(history, second.Choices[0].Message.ToParam(), openai.UserMessage("third"))
	third, sid3 := complete(t, c, "bot", history)
	if sid3 != sid || third.Choices[0].Message.Content != "echo: third" {
		t.Fatalf("third: session %q, %q", sid3, third.Choices[0].Message.Content)
	}
	ts := turns(t, s, forge.DefaultTenant, sid)
	if len(ts) != 3 {
		t.Fatalf("%d turns, want 3 (nothing run twice)", len(ts))
	}
	for i, tr := range ts {
		if tr.ID != []string{first.ID, second.ID, third.ID}[i] || len(tr.Input) != 1 {
			t.Fatalf("turn %d: %s with %d inputs", i, tr.ID, len(tr.Input))
		}
		if i > 0 && (tr.PreviousTurnID == nil || *tr.PreviousTurnID != ts[i-1].ID) {
			t.Fatalf("turn %d does not chain from turn %d", i, i-1)
		}
	}
	// An edited second question: the conversation up to the first answer
	// is known, so the turn forks from the first turn.
	fork, sid4 := complete(t, c, "bot", msgs{openai.UserMessage("hi"), ch.Message.ToParam(), openai.UserMessage("instead")})
	if sid4 != sid || fork.Choices[0].Message.Content != "echo: instead" {
		t.Fatalf("fork: session %q, %q", sid4, fork.Choices[0].Message.Content)
	}
	ft, err := s.Store.GetTurn(context.Background(), forge.DefaultTenant, sid, fork.ID)
	if err != nil || ft.PreviousTurnID == nil || *ft.PreviousTurnID != first.ID {
		t.Fatalf("fork turn: %+v %v", ft, err)
	}
	// The same first message again is a new conversation.
	again, other := complete(t, c, "bot", msgs{openai.UserMessage("hi")})
	if other == sid {
		t.Fatal("a new one-message conversation reused a session")
	}
	if n := sessions(t, s); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	// Its conversation equals the first session's: unpinned, it continues
	// where it was first reached; pinned, in its own session.
	h := msgs{openai.UserMessage("hi"), again.Choices[0].Message.ToParam(), openai.UserMessage("mine")}
	if _, got := complete(t, c, "bot", h); got != sid {
		t.Fatalf("unpinned equal conversation went to %q, want %q", got, sid)
	}
	mine, got := complete(t, c, "bot", h, option.WithHeader(openaichat.SessionHeader, other))
	if got != other || *turns(t, s, forge.DefaultTenant, other)[1].PreviousTurnID != again.ID || mine.Choices[0].Message.Content != "echo: mine" {
		t.Fatalf("pinned equal conversation: %q", got)
	}
}

// TestConcurrentResend: two requests continuing the same conversation at
// once: one runs, the other is OpenAI's 409 (the session runs one turn at
// a time), and nothing of either is lost or run twice.
func TestConcurrentResend(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"slow","model":"scripted/x","model_params":{"script":[{"text":"first"},{"text":"a b c d e f","delay_ms":200}]}}`)
	first, sid := complete(t, c, "slow", msgs{openai.UserMessage("one")})
	h := msgs{openai.UserMessage("one"), first.Choices[0].Message.ToParam(), openai.UserMessage("two")}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "slow", Messages: h})
			errs <- err
		}()
	}
	var failed []error
	for range 2 {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("want one refusal, got %v", failed)
	}
	wantError(t, failed[0], 409, "conversation_locked", "")
	if n := len(turns(t, s, forge.DefaultTenant, sid)); n != 2 {
		t.Fatalf("%d turns, want 2", n)
	}
}

// TestStreamingChunks: the stream is OpenAI's chunks (role first, content
// deltas, the finish, the usage chunk with no choices, [DONE]); the
// accumulated message equals the non-streamed answer and continues the
// conversation like it.
func TestStreamingChunks(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"reasoning":"think","text":"the answer is 42"},{"text":"second ✓","usage":{"input_tokens":30,"output_tokens":2}}]}}`)
	var resp *http.Response
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "bot", Messages: msgs{openai.UserMessage("q")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithResponseInto(&resp))
	var acc openai.ChatCompletionAccumulator
	var chunks []openai.ChatCompletionChunk
	for st.Next() {
		chunks = append(chunks, st.Current())
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	sid := resp.Header.Get(openaichat.SessionHeader)
	if sid == "" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	if len(chunks) < 4 || chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %+v", chunks[0])
	}
	for _, ch := range chunks {
		if ch.Object != "chat.completion.chunk" || ch.ID != chunks[0].ID || ch.Model != "bot" {
			t.Fatalf("chunk %+v", ch)
		}
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.TotalTokens == 0 {
		t.Fatalf("last chunk %s", last.RawJSON())
	}
	fin := chunks[len(chunks)-2]
	if fin.Choices[0].FinishReason != "stop" {
		t.Fatalf("finish chunk %s", fin.RawJSON())
	}
	for _, ch := range chunks[:len(chunks)-1] {
		if !strings.Contains(ch.RawJSON(), `"usage":null`) {
			t.Fatalf("chunk without usage null: %s", ch.RawJSON())
		}
	}
	if got := acc.Choices[0].Message.Content; got != "the answer is 42" {
		t.Fatalf("accumulated %q", got)
	}
	// Reasoning rides as reasoning_content, as compatible servers send it.
	var reasoning strings.Builder
	for _, ch := range chunks {
		if len(ch.Choices) > 0 {
			var d struct {
				R string `json:"reasoning_content"`
			}
			_ = json.Unmarshal([]byte(ch.Choices[0].Delta.RawJSON()), &d)
			reasoning.WriteString(d.R)
		}
	}
	if reasoning.String() != "think" {
		t.Fatalf("reasoning %q", reasoning.String())
	}
	// The accumulated answer continues the conversation (non-streamed).
	next, sid2 := complete(t, c, "bot", msgs{openai.UserMessage("q"), acc.Choices[0].Message.ToParam(), openai.UserMessage("more")})
	if sid2 != sid || next.Choices[0].Message.Content != "second ✓" || next.Usage.PromptTokens != 30 || next.Usage.TotalTokens != 32 {
		t.Fatalf("next: %q %q %+v", sid2, next.Choices[0].Message.Content, next.Usage)
	}
	if n := len(turns(t, s, forge.DefaultTenant, sid)); n != 2 {
		t.Fatalf("%d turns", n)
	}
	// Without include_usage: no usage key at all, and the raw stream ends
	// with [DONE].
	status, body := s.Do("POST", "/openai/v1/chat/completions", `{"model":"bot","messages":[{"role":"user","content":"q"}],"stream":true}`)
	if status != 200 || strings.Contains(body, `"usage"`) || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Fatalf("raw stream %d:\n%s", status, body)
	}
}

// TestClientToolRoundTrip: an agent's client tool comes back as
// tool_calls (finish tool_calls); the tool message answers it in the same
// session, streamed and not.
func TestClientToolRoundTrip(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"tooly","model":"scripted/x","tools":[{"name":"lookup","description":"looks up","client":true,"input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}],
		"model_params":{"script":[{"text":"let me look","tool_calls":[{"name":"lookup","arguments":{"q":"x"}}]},{"text":"found it"}]}}`)
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "lookup", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}},
	})}
	for _, stream := range []bool{false, true} {
		params := openai.ChatCompletionNewParams{Model: "tooly", Messages: msgs{openai.UserMessage("find x")}, Tools: tools}
		var msg openai.ChatCompletionMessage
		var finish, sid string
		var resp *http.Response
		if stream {
			st := c.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&resp))
			var acc openai.ChatCompletionAccumulator
			for st.Next() {
				acc.AddChunk(st.Current())
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
		} else {
			got, err := c.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			msg, finish = got.Choices[0].Message, got.Choices[0].FinishReason
		}
		sid = resp.Header.Get(openaichat.SessionHeader)
		if finish != "tool_calls" || len(msg.ToolCalls) != 1 || msg.Content != "let me look" {
			t.Fatalf("stream %v: finish %q, %+v", stream, finish, msg)
		}
		call := msg.ToolCalls[0]
		if call.Function.Name != "lookup" || call.Function.Arguments != `{"q":"x"}` || call.ID == "" || call.Type != "function" {
			t.Fatalf("stream %v: call %+v", stream, call)
		}
		history := msgs{openai.UserMessage("find x"), msg.ToParam(), openai.ToolMessage("x is 7", call.ID)}
		got, sid2 := complete(t, c, "tooly", history)
		if sid2 != sid || got.Choices[0].Message.Content != "found it" || got.Choices[0].FinishReason != "stop" {
			t.Fatalf("stream %v: after the tool: %q %q", stream, sid2, got.Choices[0].Message.Content)
		}
		ts := turns(t, s, forge.DefaultTenant, sid)
		if len(ts) != 2 || ts[1].Input[0].Type != forge.InputToolResult || *ts[1].Input[0].Output != "x is 7" || ts[1].Input[0].CallID != call.ID {
			t.Fatalf("stream %v: turns %+v", stream, ts)
		}
		// The conversation goes on after the tool's answer.
		history = append(history, got.Choices[0].Message.ToParam(), openai.UserMessage("thanks"))
		if _, sid3 := complete(t, c, "tooly", history); sid3 != sid {
			t.Fatalf("stream %v: after the answer, session %q", stream, sid3)
		}
		// A request's tool whose parameters are not an object schema is
		// refused.
		_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "tooly", Messages: msgs{openai.UserMessage("x")},
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "other", Parameters: shared.FunctionParameters{"type": "string"}})}})
		wantError(t, err, 400, "invalid_request", "tools")
	}
}

func wantError(t *testing.T, err error, status int, code, param string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error %d %s, got %v", status, code, err)
	}
	if ae.StatusCode != status || ae.Code != code || ae.Param != param || ae.Message == "" {
		t.Fatalf("want %d %s (param %q), got %d %s (param %q): %s", status, code, param, ae.StatusCode, ae.Code, ae.Param, ae.Message)
	}
}

// TestPinnedSession: Forge-Session-Id pins the session: one new message
// chains from its tip, a resent history must be the session's, another
// tenant's session is not found.
func TestPinnedSession(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, openaichat.Protocol{}, openairesp.Protocol{})
	for _, k := range []string{"ka", "kb"} {
		if status, body := s.Do("POST", "/v1/agents", `{"name":"bot","model":"scripted/echo"}`, "Authorization", "Bearer "+k); status != 201 {
			t.Fatalf("agent: %d %s", status, body)
		}
	}
	a, b := client(s, "ka"), client(s, "kb")
	first, sid := complete(t, a, "bot", msgs{openai.UserMessage("one")})
	pin := option.WithHeader(openaichat.SessionHeader, sid)
	second, sid2 := complete(t, a, "bot", msgs{openai.UserMessage("two")}, pin)
	if sid2 != sid || second.Choices[0].Message.Content != "echo: two" {
		t.Fatalf("pinned: %q %q", sid2, second.Choices[0].Message.Content)
	}
	// The pinned client's own view (it sent "two" alone) continues,
	// pinned; unpinned it is not found, since the session's branch also
	// holds "one" that client never sent.
	h := msgs{openai.UserMessage("two"), second.Choices[0].Message.ToParam(), openai.UserMessage("three")}
	if _, imported := complete(t, a, "bot", h); imported == sid {
		t.Fatal("an unpinned client's partial view continued the pinned session")
	}
	if third, sid3 := complete(t, a, "bot", h, pin); sid3 != sid || third.Choices[0].Message.Content != "echo: three" || *turns(t, s, "acme", sid)[2].PreviousTurnID != second.ID {
		t.Fatalf("pinned partial history: %q %q", sid3, third.Choices[0].Message.Content)
	}
	// The whole history, pinned: forks from the first turn.
	h = msgs{openai.UserMessage("one"), first.Choices[0].Message.ToParam(), openai.UserMessage("four")}
	forked, sid4 := complete(t, a, "bot", h, pin)
	if sid4 != sid || forked.Choices[0].Message.Content != "echo: four" || *turns(t, s, "acme", sid)[3].PreviousTurnID != first.ID {
		t.Fatalf("pinned history: %q %q", sid4, forked.Choices[0].Message.Content)
	}
	// A history the session does not hold, pinned.
	h = msgs{openai.UserMessage("one"), openai.AssistantMessage("not what Forge said"), openai.UserMessage("five")}
	_, err := a.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "bot", Messages: h}, pin)
	wantError(t, err, 400, "conversation_mismatch", "messages")
	// A pinned session of another agent.
	if status, body := s.Do("POST", "/v1/agents", `{"name":"bot2","model":"scripted/echo"}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, body)
	}
	_, err = a.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "bot2", Messages: msgs{openai.UserMessage("x")}}, pin)
	wantError(t, err, 400, "invalid_request", "model")
	// Another tenant's session: not found, and nothing runs.
	_, err = b.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "bot", Messages: msgs{openai.UserMessage("steal")}}, pin)
	wantError(t, err, 404, "session_not_found", "")
	_, err = a.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "bot", Messages: msgs{openai.UserMessage("x")}},
		option.WithHeader(openaichat.SessionHeader, "ses_nope"))
	wantError(t, err, 404, "session_not_found", "")
	// Another tenant resending acme's conversation does not find it: it
	// is imported into a session of its own.
	if _, gsid := complete(t, b, "bot", h); gsid == sid {
		t.Fatal("globex continued acme's session")
	}
	if ts := turns(t, s, "acme", sid); len(ts) != 4 {
		t.Fatalf("%d turns in the pinned session, want 4", len(ts))
	}
	if ss, _, _ := s.Store.ListSessions(context.Background(), "globex", forge.SessionQuery{}); len(ss) != 1 {
		t.Fatalf("globex has %d sessions, want 1", len(ss))
	}
	// A wrong key is OpenAI's authentication error.
	bad := client(s, "nope")
	_, err = bad.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "bot", Messages: msgs{openai.UserMessage("x")}})
	wantError(t, err, 401, "invalid_api_key", "")
}

// TestRefusals: hostile and unsupported requests are clear 4xx errors in
// OpenAI's shape, and store nothing.
func TestRefusals(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	user := `{"role":"user","content":"hi"}`
	for _, c := range []struct {
		name, body  string
		status      int
		code, param string
		contains    string
	}{
		{"no model", `{"messages":[` + user + `]}`, 400, "invalid_request", "model", "model is required"},
		{"unknown model", `{"model":"ghost","messages":[` + user + `]}`, 404, "model_not_found", "model", "ghost"},
		{"no messages", `{"model":"bot"}`, 400, "invalid_request", "messages", "required"},
		{"empty messages", `{"model":"bot","messages":[]}`, 400, "invalid_request", "messages", "at least one"},
		{"messages not an array", `{"model":"bot","messages":"hi"}`, 400, "invalid_request", "messages", "array"},
		{"unknown role", `{"model":"bot","messages":[{"role":"wizard","content":"hi"}]}`, 400, "invalid_request", "messages[0].role", "wizard"},
		{"no role", `{"model":"bot","messages":[{"content":"hi"}]}`, 400, "invalid_request", "messages[0].role", "required"},
		{"only a system message", `{"model":"bot","messages":[{"role":"system","content":"be terse"}]}`, 400, "invalid_request", "messages", "only system"},
		{"system message with an image", `{"model":"bot","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:,"}}]},` + user + `]}`, 400, "invalid_request", "messages[0].content[0]", "image_url"},
		{"huge instructions", `{"model":"bot","messages":[{"role":"system","content":"` + strings.Repeat("x", 300<<10) + `"},` + user + `]}`, 400, "invalid_request", "messages", "at most"},
		{"blank user message", `{"model":"bot","messages":[{"role":"user","content":"  "}]}`, 400, "invalid_request", "messages[0].content", "blank"},
		{"audio part", `{"model":"bot","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"","format":"wav"}}]}]}`, 400, "invalid_request", "messages[0].content[0]", "input_audio"},
		{"assistant image part", `{"model":"bot","messages":[` + user + `,{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"data:,"}}]},` + user + `]}`, 400, "invalid_request", "messages[1].content[0]", "image_url"},
		{"ends with assistant", `{"model":"bot","messages":[` + user + `,{"role":"assistant","content":"echo: hi"}]}`, 400, "invalid_request", "messages", "assistant"},
		{"unseen history ending with tool results", `{"model":"bot","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}]}`, 400, "history_not_found", "messages", "imported"},
		{"unseen history: a tool message answering nothing", `{"model":"bot","messages":[` + user + `,{"role":"assistant","content":"a"},{"role":"tool","tool_call_id":"c9","content":"x"},{"role":"assistant","content":"b"},` + user + `]}`, 400, "invalid_request", "messages[2].tool_call_id", "c9"},
		{"unseen history: an unanswered call", `{"model":"bot","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"assistant","content":"b"},` + user + `]}`, 400, "invalid_request", "messages", "c1"},
		{"unseen history: a call id twice", `{"model":"bot","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"},{"role":"assistant","content":"b"},` + user + `]}`, 400, "invalid_request", "messages[1].tool_calls[1].id", "twice"},
		{"tool without call", `{"model":"bot","messages":[{"role":"tool","tool_call_id":"call_1","content":"x"}]}`, 400, "invalid_request", "messages", "tool_calls"},
		{"tool without id", `{"model":"bot","messages":[{"role":"tool","content":"x"}]}`, 400, "invalid_request", "messages[0].tool_call_id", "required"},
		{"temperature above 2", `{"model":"bot","messages":[` + user + `],"temperature":2.5}`, 400, "invalid_request", "temperature", "between 0 and 2"},
		{"negative temperature", `{"model":"bot","messages":[` + user + `],"temperature":-0.1}`, 400, "invalid_request", "temperature", "between 0 and 2"},
		{"temperature as text", `{"model":"bot","messages":[` + user + `],"temperature":"hot"}`, 400, "invalid_request", "temperature", "number"},
		{"top_p above 1", `{"model":"bot","messages":[` + user + `],"top_p":1.5}`, 400, "invalid_request", "top_p", "between 0 and 1"},
		{"max_tokens zero", `{"model":"bot","messages":[` + user + `],"max_tokens":0}`, 400, "invalid_request", "max_completion_tokens", "between 1 and"},
		{"max_completion_tokens huge", `{"model":"bot","messages":[` + user + `],"max_completion_tokens":1000000000}`, 400, "invalid_request", "max_completion_tokens", "between 1 and"},
		{"max_tokens fractional", `{"model":"bot","messages":[` + user + `],"max_tokens":1.5}`, 400, "invalid_request", "max_tokens", "integer"},
		{"max token fields that differ", `{"model":"bot","messages":[` + user + `],"max_tokens":10,"max_completion_tokens":20}`, 400, "invalid_request", "max_tokens", "differ"},
		{"tool_choice required", `{"model":"bot","messages":[` + user + `],"tool_choice":"required"}`, 400, "invalid_request", "tool_choice", "not supported"},
		{"tool_choice naming a function", `{"model":"bot","messages":[` + user + `],"tool_choice":{"type":"function","function":{"name":"f"}}}`, 400, "invalid_request", "tool_choice", "not supported"},
		{"custom tool", `{"model":"bot","messages":[` + user + `],"tools":[{"type":"custom","custom":{"name":"f"}}]}`, 400, "invalid_request", "tools[0]", ""},
		{"tool without a name", `{"model":"bot","messages":[` + user + `],"tools":[{"type":"function","function":{}}]}`, 400, "invalid_request", "tools[0].function.name", "name"},
		{"tool with a bad name", `{"model":"bot","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"a b"}}]}`, 400, "invalid_request", "tools", "name"},
		{"tools twice", `{"model":"bot","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, 400, "invalid_request", "tools", "duplicate"},
		{"tool parameters not an object", `{"model":"bot","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, 400, "invalid_request", "tools", "JSON Schema object"},
		{"too many tools", `{"model":"bot","messages":[` + user + `],"tools":[` + strings.TrimSuffix(strings.Repeat(`{"type":"function","function":{"name":"f"}},`, 129), ",") + `]}`, 400, "invalid_request", "tools", "at most 128"},
		{"logprobs", `{"model":"bot","messages":[` + user + `],"logprobs":true}`, 400, "invalid_request", "logprobs", "not supported"},
		{"audio", `{"model":"bot","messages":[` + user + `],"audio":{"voice":"alloy","format":"wav"}}`, 400, "invalid_request", "audio", "not supported"},
		{"response_format", `{"model":"bot","messages":[` + user + `],"response_format":{"type":"json_object"}}`, 400, "invalid_request", "response_format", "not supported"},
		{"n", `{"model":"bot","messages":[` + user + `],"n":2}`, 400, "invalid_request", "n", "one turn"},
		{"stream_options without stream", `{"model":"bot","messages":[` + user + `],"stream_options":{"include_usage":true}}`, 400, "invalid_request", "stream_options", "stream"},
		{"unknown field", `{"model":"bot","messages":[` + user + `],"frobnicate":1}`, 400, "invalid_request", "", "frobnicate"},
		{"invalid UTF-8", "{\"model\":\"bot\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfeb\"}]}", 400, "invalid_request", "", "UTF-8"},
		{"lone surrogate", `{"model":"bot","messages":[{"role":"user","content":"a\ud800b"}]}`, 400, "invalid_request", "", ""},
		{"too long a history to import", `{"model":"bot","messages":[` + strings.Repeat(user+`,{"role":"assistant","content":"y"},`, 2501) + user + `]}`, 400, "invalid_request", "messages", "at most 5000"},
		{"huge content", `{"model":"bot","messages":[{"role":"user","content":"` + strings.Repeat("x", 5<<20) + `"}]}`, 413, "", "", "exceeds"},
		{"not JSON", `{"model":`, 400, "invalid_request", "", ""},
	} {
		status, body := s.Do("POST", "/openai/v1/chat/completions", c.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Code    *string `json:"code"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || status != c.status {
			t.Fatalf("%s: %d %s", c.name, status, body)
		}
		code, param := "", ""
		if e.Error.Code != nil {
			code = *e.Error.Code
		}
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if (c.code != "" && code != c.code) || param != c.param || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, c.contains) {
			t.Fatalf("%s: %d %s", c.name, status, body)
		}
	}
	if n := sessions(t, s); n != 0 {
		t.Fatalf("refused requests left %d sessions", n)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/openai/v1/chat/completions"}, {"POST", "/openai/v1/chat/other"}} {
		status, body := s.Do(c.method, c.path, "")
		if status != 405 && status != 404 || !strings.Contains(body, `"error"`) {
			t.Fatalf("%s %s: %d %s", c.method, c.path, status, body)
		}
	}
	// The Responses API next door is untouched.
	if status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi"}`); status != 200 {
		t.Fatalf("responses: %d %s", status, body)
	}
}

// TestFailedTurn: a turn that fails is an OpenAI error, not a completion,
// streamed (an error frame) or not; a length finish is finish_reason
// length.
func TestFailedTurn(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"broken","model":"scripted/x","model_params":{"script":[{"text":"partial","error":"the model fell over"}]}}`)
	s.Agent(`{"name":"long","model":"scripted/x","model_params":{"script":[{"text":"cut short","finish":"length"}]}}`)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "broken", Messages: msgs{openai.UserMessage("x")}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 500 || ae.Code != forge.CodeModelError {
		t.Fatalf("non-stream failure: %v", err)
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "broken", Messages: msgs{openai.UserMessage("x")}})
	for st.Next() {
	}
	if st.Err() == nil || !strings.Contains(st.Err().Error(), forge.CodeModelError) {
		t.Fatalf("stream failure: %v", st.Err())
	}
	got, _ := complete(t, c, "long", msgs{openai.UserMessage("x")})
	if got.Choices[0].FinishReason != "length" || got.Choices[0].Message.Content != "cut short" {
		t.Fatalf("length: %+v", got.Choices[0])
	}
}

// TestServerToolsBetweenTexts: a tool Forge runs itself is not shown (Chat
// Completions has no such item); the texts around it are one content,
// streamed and not, and that content continues the conversation. A call
// waiting for an approval, which Chat Completions cannot express, is a
// clear error naming the way to resolve it.
func TestServerToolsBetweenTexts(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"worker","model":"scripted/x","tools":["echo"],"model_params":{"script":[
		{"text":"let me check","tool_calls":[{"name":"echo","arguments":{"text":"ping"}}]},{"text":"it says ping"},{"text":"bye"}]}}`)
	got, sid := complete(t, c, "worker", msgs{openai.UserMessage("go")})
	want := "let me check\n\nit says ping"
	if got.Choices[0].Message.Content != want || got.Choices[0].FinishReason != "stop" || len(got.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("non-stream: %+v", got.Choices[0])
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "worker", Messages: msgs{openai.UserMessage("go")}})
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if st.Err() != nil || acc.Choices[0].Message.Content != want {
		t.Fatalf("stream: %v %q", st.Err(), acc.Choices[0].Message.Content)
	}
	next, sid2 := complete(t, c, "worker", msgs{openai.UserMessage("go"), got.Choices[0].Message.ToParam(), openai.UserMessage("ok")})
	if sid2 != sid || next.Choices[0].Message.Content != "bye" {
		t.Fatalf("next: %q %q", sid2, next.Choices[0].Message.Content)
	}

	s.Agent(`{"name":"careful","model":"scripted/x","tools":["echo"],"approval":{"echo":"ask"},"model_params":{"script":[
		{"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},{"text":"done"}]}}`)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "careful", Messages: msgs{openai.UserMessage("go")}})
	wantError(t, err, 409, "action_required", "")
	var ae *openai.Error
	if errors.As(err, &ae); !strings.Contains(ae.Message, "/v1/sessions/ses_") {
		t.Fatalf("approval error does not say where to resolve it: %v", err)
	}
}

// TestImportUnseenHistory: a conversation Forge has never seen starts a
// new session seeded with the history, imported, not re-run: one turn
// runs, for the last message, and the model sees the earlier ones (the
// scripted model plays the step of the number of assistant messages in
// its request). The imported conversation then continues like any other.
func TestImportUnseenHistory(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"no history"},{"text":"saw one answer"},{"text":"saw two answers"},{"text":"saw three"}]}}`)
	h := msgs{openai.UserMessage("a"), openai.AssistantMessage("an answer from elsewhere"), openai.UserMessage("b")}
	got, sid := complete(t, c, "bot", h)
	if got.Choices[0].Message.Content != "saw one answer" {
		t.Fatalf("imported: %q", got.Choices[0].Message.Content)
	}
	ts := turns(t, s, forge.DefaultTenant, sid)
	if len(ts) != 1 || ts[0].Input[0].Text != "b" {
		t.Fatalf("turns %+v", ts)
	}
	status, body := s.Do("GET", "/v1/sessions/"+sid+"/messages", "")
	var page struct {
		Data []struct {
			Role   string `json:"role"`
			TurnID string `json:"turn_id"`
			Parts  []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || status != 200 || len(page.Data) != 4 {
		t.Fatalf("messages: %d %s", status, body)
	}
	if page.Data[0].TurnID != "" || page.Data[1].Role != "assistant" || page.Data[1].Parts[0].Text != "an answer from elsewhere" || page.Data[2].TurnID != ts[0].ID {
		t.Fatalf("messages: %s", body)
	}
	// Continued by resending: found, one more turn, the model sees all.
	h = append(h, got.Choices[0].Message.ToParam(), openai.UserMessage("c"))
	next, sid2 := complete(t, c, "bot", h)
	if sid2 != sid || next.Choices[0].Message.Content != "saw two answers" || len(turns(t, s, forge.DefaultTenant, sid)) != 2 {
		t.Fatalf("continued: %q %q", sid2, next.Choices[0].Message.Content)
	}
	// A history with tool calls and their results imports as tool parts.
	h = msgs{openai.UserMessage("x"), {OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
		OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_ext", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "lookup", Arguments: `{"q":1}`}},
	}}}}, openai.ToolMessage("found 1", "call_ext"), openai.AssistantMessage("it is 1"), openai.UserMessage("and?")}
	got, sid3 := complete(t, c, "bot", h)
	if sid3 == sid || got.Choices[0].Message.Content != "saw two answers" {
		t.Fatalf("tool history: %q %q", sid3, got.Choices[0].Message.Content)
	}
	_, body = s.Do("GET", "/v1/sessions/"+sid3+"/messages", "")
	if !strings.Contains(body, `"call_id":"call_ext"`) || !strings.Contains(body, `"output":"found 1"`) || !strings.Contains(body, `"state":"completed"`) {
		t.Fatalf("tool history messages: %s", body)
	}
}

// TestImagesAndFiles: image_url (a data URL) and file parts (file_id,
// file_data) of the new user message become file parts of the turn's
// message; resending that message in the history continues the session;
// a remote URL or a lying type is refused with nothing stored, and so is
// an unseen history with an image in an earlier message.
func TestImagesAndFiles(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 5, 7))); err != nil {
		t.Fatal(err)
	}
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
	up, err := c.Files.New(context.Background(), openai.FileNewParams{File: openai.File(bytes.NewReader(b.Bytes()), "a.png", "image/png"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n%%EOF\n"))
	question := openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("compare these"),
		openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL}),
		openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{FileID: openai.String(up.ID)}),
		openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{FileData: openai.String(pdf), Filename: openai.String("r.pdf")}),
	})
	got, sid := complete(t, c, "bot", msgs{question})
	if got.Choices[0].Message.Content != "echo: compare these" {
		t.Fatalf("answer %q", got.Choices[0].Message.Content)
	}
	_, body := s.Do("GET", "/v1/sessions/"+sid+"/messages", "")
	if strings.Count(body, `"type":"file"`) != 3 || !strings.Contains(body, `"filename":"r.pdf"`) || !strings.Contains(body, `"file_id":"`+up.ID+`"`) {
		t.Fatalf("messages: %s", body)
	}
	next, sid2 := complete(t, c, "bot", msgs{question, got.Choices[0].Message.ToParam(), openai.UserMessage("and?")})
	if sid2 != sid || next.Choices[0].Message.Content != "echo: and?" {
		t.Fatalf("resent: %q %q", sid2, next.Choices[0].Message.Content)
	}
	_, list := s.Do("GET", "/v1/files", "")
	before := strings.Count(list, `"id":"file_`)
	for _, part := range []string{
		`{"type":"image_url","image_url":{"url":"https://example.com/x.png"}}`,
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pdf + `"}}`,
		`{"type":"file","file":{"file_id":"file_missing"}}`,
		`{"type":"file","file":{}}`,
		`{"type":"input_audio","input_audio":{"data":"","format":"wav"}}`,
	} {
		status, out := s.Do("POST", "/openai/v1/chat/completions", `{"model":"bot","messages":[{"role":"user","content":[{"type":"text","text":"x"},`+part+`]}]}`)
		if status < 400 || status >= 500 || !strings.Contains(out, `"error"`) {
			t.Fatalf("%s: %d %s", part, status, out)
		}
	}
	status, out := s.Do("POST", "/openai/v1/chat/completions", `{"model":"bot","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+dataURL+`"}}]},{"role":"assistant","content":"a picture"},{"role":"user","content":"x"}]}`)
	if status != 400 || !strings.Contains(out, `"param":"messages[0].content"`) {
		t.Fatalf("unseen history with an image: %d %s", status, out)
	}
	_, list = s.Do("GET", "/v1/files", "")
	if after := strings.Count(list, `"id":"file_`); after != before {
		t.Fatalf("refused requests stored files: %d then %d", before, after)
	}
	if n := sessions(t, s); n != 1 {
		t.Fatalf("%d sessions", n)
	}
}
