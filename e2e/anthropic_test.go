package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

const anthropicKey = "sk-ant-e2e"

// startAnthropic runs forge serve with ANTHROPIC_API_KEY and
// ANTHROPIC_BASE_URL pointing at model (the harness adds its OpenAI
// variables, for a fake that is not used).
func startAnthropic(t *testing.T) (*server, *anthropictest.Server) {
	t.Helper()
	model := anthropictest.New(t)
	model.SetAPIKey(anthropicKey)
	env := []string{"ANTHROPIC_API_KEY=" + anthropicKey, "ANTHROPIC_BASE_URL=" + model.URL()}
	return startEnv(t, t.TempDir()+"/forge.db", openaitest.New(t), env), model
}

// skipIfUnconfigured skips the test when this forge build does not register
// the anthropic provider from the environment: the agent is refused, or its
// turn errors, with "provider "anthropic" is not configured".
func skipIfUnconfigured(t *testing.T, status int, body obj) {
	t.Helper()
	b, _ := json.Marshal(body)
	if (status == 400 || body["status"] == "errored") && strings.Contains(string(b), "not configured") {
		t.Skipf("the anthropic provider is not registered by provider.FromEnv yet: %s", b)
	}
}

// anthropicAgent creates an agent on anthropic/<model> and skips the test
// if the provider is not configured.
func anthropicAgent(t *testing.T, s *server, body obj) {
	t.Helper()
	status, out := s.call("POST", "/v1/agents", body)
	skipIfUnconfigured(t, status, out)
	if status != 201 {
		t.Fatalf("POST /v1/agents: %d %v", status, out)
	}
}

// TestAnthropicToolRoundTrip runs a turn whose first model step thinks and
// calls the built-in echo tool, and whose second answers, through a real
// forge serve: the thinking block goes back with its signature unchanged,
// before the tool_use, and the tool result follows in the next user message.
func TestAnthropicToolRoundTrip(t *testing.T) {
	t.Parallel()
	s, model := startAnthropic(t)
	anthropicAgent(t, s, obj{"name": "a", "model": "anthropic/claude-sonnet-4-5", "instructions": "be brief",
		"tools": []any{"echo"}, "model_params": obj{"reasoning_effort": "low"}})
	sid := s.session("a")
	model.Enqueue(
		anthropictest.Thinking("The user wants ", "an echo.").Text("Echoing.").
			ToolUse(anthropictest.Call{ID: "toolu_01E2E", Name: "echo", Input: `{"text":"hi there"}`}).Usage(120, 30),
		anthropictest.Text("It said: ", "hi there").Usage(180, 8),
	)
	status, turn := s.call("POST", "/v1/sessions/"+sid+"/turns", message("echo hi there"))
	skipIfUnconfigured(t, status, turn)
	if status != 200 || turn["status"] != "done" || turn["output"].(obj)["text"] != "It said: hi there" {
		t.Fatalf("turn: %d %v", status, turn)
	}
	if u := turn["usage"].(obj); u["input_tokens"] != 300.0 || u["output_tokens"] != 38.0 {
		t.Fatalf("usage %v", u)
	}

	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	first := reqs[0]
	if first.Model != "claude-sonnet-4-5" || first.System != "be brief" || !first.Stream || first.Header.Get("x-api-key") != anthropicKey ||
		first.Thinking == nil || first.Thinking.Type != "enabled" || first.Thinking.BudgetTokens != 1024 ||
		len(first.Tools) != 1 || first.Tools[0].Name != "echo" || len(first.Messages) != 1 || first.Messages[0].Text != "echo hi there" {
		t.Fatalf("first request %+v", first)
	}
	m := reqs[1].Messages
	if len(m) != 3 || m[1].Role != "assistant" || m[2].Role != "user" || len(m[1].Content) != 3 || len(m[2].Content) != 1 {
		t.Fatalf("second request messages %+v", m)
	}
	think, text, use := m[1].Content[0], m[1].Content[1], m[1].Content[2]
	if think.Type != "thinking" || *think.Thinking != "The user wants an echo." || *think.Signature != anthropictest.Sign("The user wants an echo.") {
		t.Fatalf("thinking block sent back %+v", think)
	}
	if text.Text != "Echoing." || use.Type != "tool_use" || use.Name != "echo" || string(use.Input) != `{"text":"hi there"}` {
		t.Fatalf("assistant blocks %+v %+v", text, use)
	}
	res := m[2].Content[0]
	if res.Type != "tool_result" || res.ToolUseID != use.ID || res.Content != "hi there" || res.IsError != nil {
		t.Fatalf("tool result %+v for tool_use %q", res, use.ID)
	}
	// The thinking of the stored reply has the text it streamed.
	msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
	b, _ := json.Marshal(msgs)
	if !strings.Contains(string(b), "The user wants an echo.") {
		t.Fatalf("stored messages lack the reasoning: %s", b)
	}
}

// TestAnthropicStreamedAnswer streams a turn and checks that every text
// delta of the model reaches the client, in order, and that the turn ends
// with the whole text and the usage.
func TestAnthropicStreamedAnswer(t *testing.T) {
	t.Parallel()
	s, model := startAnthropic(t)
	anthropicAgent(t, s, obj{"name": "a", "model": "anthropic/claude-haiku-4-5"})
	sid := s.session("a")
	pieces := []string{"Stream", "ing ", "from ", "Claude", "."}
	model.Enqueue(anthropictest.Text(pieces...).Usage(21, 6).DelayBetweenChunks(10 * time.Millisecond))
	ch, cancel := s.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "stream"}}, "stream": true})
	defer cancel()
	evs := collect(t, ch)
	last := evs[len(evs)-1]
	if last.Type == "turn.done" {
		skipIfUnconfigured(t, 200, last.Data["data"].(obj))
	}
	assertIncreasing(t, evs)
	if evs[0].Type != "turn.created" || last.Type != "turn.done" {
		t.Fatalf("stream from %s to %s", evs[0].Type, last.Type)
	}
	deltas := 0
	for _, ev := range evs {
		if ev.Type == "model.message.delta" {
			deltas++
		}
	}
	if got := deltaText(evs); got != strings.Join(pieces, "") || deltas != len(pieces) {
		t.Fatalf("%d deltas %q", deltas, got)
	}
	final := last.Data["data"].(obj)
	if final["status"] != "done" || final["output"].(obj)["text"] != "Streaming from Claude." {
		t.Fatalf("turn.done %v", final)
	}
	if u := final["usage"].(obj); u["input_tokens"] != 21.0 || u["output_tokens"] != 6.0 {
		t.Fatalf("usage %v", u)
	}
	r, _ := model.LastRequest()
	if r.Model != "claude-haiku-4-5" || r.Thinking != nil || *r.MaxTokens != 16384 || r.Temperature != nil {
		t.Fatalf("request %+v", r)
	}
}
