package aisdk_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/aisdk"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
)

type uiMessages []struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	Parts []struct {
		Type       string          `json:"type"`
		Text       string          `json:"text"`
		State      string          `json:"state"`
		ToolCallID string          `json:"toolCallId"`
		Input      json.RawMessage `json:"input"`
		Output     any             `json:"output"`
	} `json:"parts"`
}

// TestMessagesRestoreAReloadedChat: GET .../messages answers the chat as
// UIMessages (text, steps, server tools with their outputs), and sending
// them back with a new message continues the chat instead of starting it
// over; another tenant's, or an unknown, chat is empty.
func TestMessagesRestoreAReloadedChat(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, aisdk.Protocol{})
	agent := `{"name":"bot","model":"scripted/x","tools":["echo"],"model_params":{"script":[` +
		`{"tool_calls":[{"name":"echo","arguments":{"text":"ping"}}]},{"text":"first answer"},{"text":"second answer"}]}}`
	if status, body := s.Do("POST", "/v1/agents", agent, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, body)
	}
	if status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat", chat, "Authorization", "Bearer ka"); status != 200 {
		t.Fatalf("chat: %d %s", status, body)
	}
	get := func(key, chatID string) uiMessages {
		t.Helper()
		status, body := s.Do("GET", "/aisdk/v1/agents/bot/chat/"+chatID+"/messages", "", "Authorization", "Bearer "+key)
		if status != 200 {
			t.Fatalf("messages: %d %s", status, body)
		}
		var ms uiMessages
		if err := json.Unmarshal([]byte(body), &ms); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return ms
	}
	ms := get("ka", "c1")
	if len(ms) != 2 || ms[0].Role != "user" || ms[0].Parts[0].Text != "hi" || ms[1].Role != "assistant" {
		t.Fatalf("messages after one exchange: %+v", ms)
	}
	var types []string
	var text string
	for _, p := range ms[1].Parts {
		types = append(types, p.Type)
		if p.Type == "text" {
			text += p.Text
		}
		if p.Type == "tool-echo" && (p.State != "output-available" || p.Output != "ping" || p.ToolCallID == "") {
			t.Errorf("the tool part: %+v", p)
		}
	}
	if got := strings.Join(types, " "); got != "step-start tool-echo step-start text" || text != "first answer" {
		t.Fatalf("assistant parts %q, text %q", got, text)
	}

	// The page sends back what it restored, plus a new message: the chat
	// goes on (two exchanges), the model sees the history.
	restored, _ := json.Marshal(ms)
	next := `{"id":"c1","trigger":"submit-message","messages":` + strings.TrimSuffix(string(restored), "]") +
		`,{"id":"u2","role":"user","parts":[{"type":"text","text":"and then?"}]}]}`
	if status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat", next, "Authorization", "Bearer ka"); status != 200 || !strings.Contains(body, `"delta":"second "`) {
		t.Fatalf("the next message: %d %s", status, body)
	}
	ms = get("ka", "c1")
	if len(ms) != 4 || ms[2].Parts[0].Text != "and then?" || ms[1].ID == ms[3].ID {
		t.Fatalf("after the next message the chat holds %d messages: %+v", len(ms), ms)
	}

	if got := get("kb", "c1"); len(got) != 0 {
		t.Fatalf("another tenant's chat: %+v", got)
	}
	if got := get("ka", "never-sent"); len(got) != 0 {
		t.Fatalf("an unknown chat: %+v", got)
	}
	if status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat/c1/messages", "", "Authorization", "Bearer ka"); status != 405 {
		t.Fatalf("POST messages: %d %s", status, body)
	}
}
