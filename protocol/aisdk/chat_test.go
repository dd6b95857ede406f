package aisdk

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/forge-runtime/forge"
)

func turn(id, prev string, in ...forge.Input) *forge.Turn {
	t := &forge.Turn{ID: id, Status: forge.TurnDone, Input: in}
	if prev != "" {
		t.PreviousTurnID = &prev
	}
	return t
}

func msg(text string) forge.Input { return forge.Input{Type: forge.InputMessage, Text: text} }

func user(id, text string) uiMessage {
	return uiMessage{ID: id, Role: "user", Parts: []uiPart{{Type: "text", Text: text}}}
}

func assistant(id string, parts ...uiPart) uiMessage {
	return uiMessage{ID: id, Role: "assistant", Parts: parts}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	t1 := turn("turn_1", "", msg("one"))
	t2 := turn("turn_2", "turn_1", msg("two"))
	t2.RequiredActions = []forge.RequiredAction{
		{Type: forge.ActionApproval, CallID: "call_a", Tool: "echo"},
		{Type: forge.ActionClientTool, CallID: "call_c", Tool: "lookup"},
	}
	branch := []*exchange{{text: "one", turns: []*forge.Turn{t1}}, {text: "two", turns: []*forge.Turn{t2}}}
	yes := true
	approved := uiPart{Type: "tool-echo", ToolCallID: "call_a", State: "approval-responded"}
	approved.Approval = &struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	}{ID: "call_a", Approved: &yes}
	output := uiPart{Type: "tool-lookup", ToolCallID: "call_c", State: "output-available", Output: json.RawMessage(`{"city":"Paris"}`)}

	for _, tc := range []struct {
		name     string
		messages []uiMessage
		branch   []*exchange
		want     string // previous turn, "root", or "" for none
		input    string
		msgID    string
		err      error
	}{
		{name: "first message", messages: []uiMessage{user("u1", "one")}, want: "", input: "message:one"},
		{name: "chain", messages: []uiMessage{user("u1", "one"), assistant("turn_1"), user("u2", "two")},
			branch: branch[:1], want: "turn_1", input: "message:two"},
		{name: "regenerate the last answer forks before it", messages: []uiMessage{user("u1", "one"), assistant("turn_1"), user("u2", "two")},
			branch: branch, want: "turn_1", input: "message:two"},
		{name: "edit the first message forks from no history", messages: []uiMessage{user("u1", "uno")},
			branch: branch, want: "root", input: "message:uno"},
		{name: "resolutions continue the last message", messages: []uiMessage{user("u1", "one"), assistant("turn_1"), user("u2", "two"),
			assistant("turn_2", uiPart{Type: "text", Text: "x"}, approved, output)},
			branch: branch, want: "turn_2", input: "approval:call_a,tool_result:call_c={\"city\":\"Paris\"}", msgID: "turn_2"},
		{name: "an assistant message answering nothing", messages: []uiMessage{user("u1", "one"), assistant("turn_1"), user("u2", "two"), assistant("turn_2")},
			branch: branch, err: forge.ErrInvalid},
		{name: "a diverged history", messages: []uiMessage{user("u1", "eins"), assistant("turn_1"), user("u2", "two")},
			branch: branch, err: forge.ErrConflict},
		{name: "an unknown assistant message", messages: []uiMessage{user("u1", "one"), assistant("turn_x"), user("u2", "two")},
			branch: branch, err: forge.ErrConflict},
		{name: "messages Forge never had", messages: []uiMessage{user("u1", "one"), user("u2", "two"), user("u3", "three"), user("u4", "four")},
			branch: branch[:1], err: forge.ErrConflict},
		{name: "a stale assistant message", messages: []uiMessage{user("u1", "one"), assistant("turn_1", approved)},
			branch: branch, err: forge.ErrConflict},
		{name: "no user message", messages: []uiMessage{assistant("turn_1")}, err: forge.ErrInvalid},
		{name: "a blank message", messages: []uiMessage{user("u1", "  ")}, err: forge.ErrInvalid},
		{name: "a bad role", messages: []uiMessage{{ID: "x", Role: "tool"}}, err: forge.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := diff(&chatBody{ID: "c", Messages: tc.messages}, tc.branch)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			prev := ""
			switch {
			case p.req.NewRoot:
				prev = "root"
			case p.req.PreviousTurnID != nil:
				prev = *p.req.PreviousTurnID
			}
			if prev != tc.want {
				t.Fatalf("previous %q, want %q", prev, tc.want)
			}
			var in string
			for i, x := range p.req.Input {
				if i > 0 {
					in += ","
				}
				switch x.Type {
				case forge.InputMessage:
					in += "message:" + x.Text
				case forge.InputApproval:
					in += "approval:" + x.CallID
				case forge.InputToolResult:
					in += "tool_result:" + x.CallID + "=" + *x.Output
				}
			}
			if in != tc.input || p.messageID != tc.msgID {
				t.Fatalf("input %q message %q, want %q %q", in, p.messageID, tc.input, tc.msgID)
			}
		})
	}
}

func TestSessionIDs(t *testing.T) {
	t.Parallel()
	a := sessionID("acme", "bot", "chat-1")
	if a != sessionID("acme", "bot", "chat-1") || a == sessionID("globex", "bot", "chat-1") || a == sessionID("acme", "other", "chat-1") {
		t.Fatalf("chat ids map to sessions by tenant, agent and chat: %s", a)
	}
	if sessionID("acme", "bot", "ses_123") != "ses_123" {
		t.Fatal("a session id is its own chat id")
	}
}

func TestValidEscapesAndDepth(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		`"a\ud83d\ude00b"`: true, `"\ud83d"`: false, `"\ude00"`: false, `"\\ud800"`: true, `"\n\u0041"`: true, `"\ud83dx"`: false,
	} {
		if got := validEscapes([]byte(s)); got != want {
			t.Errorf("validEscapes(%s) = %v", s, got)
		}
	}
	if d := depth([]byte(`{"a":[{"b":"[[[["}]}`)); d != 3 {
		t.Fatalf("depth %d", d)
	}
}
