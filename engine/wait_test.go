package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// TestWaitTurnAnswersTheTurnAsStored: WaitTurn answers a turn that ended
// in this engine without reading it back, with what the store holds: the
// same JSON as a read, whatever the turn's end (output and usage, required
// actions, an error, a cancel with its reason and text); another tenant
// gets not found.
func TestWaitTurnAnswersTheTurnAsStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "ask_user", Client: true, InputSchema: json.RawMessage(`{"type":"object"}`)}}
	})
	s := h.session("a")
	block := make(chan struct{})
	cases := []struct {
		name   string
		reply  reply
		cancel bool
	}{
		{"done", reply{deltas: []string{"hello"}, usage: forge.Usage{InputTokens: 7, OutputTokens: 2}}, false},
		{"required actions", reply{calls: []forge.ToolCall{call("ask_user", `{"q":1}`)}}, false},
		{"errored", reply{deltas: []string{"partial"}, err: &forge.ModelError{Provider: "test", Message: "boom"}}, false},
		{"cancelled", reply{deltas: []string{"thinking"}, block: block}, true},
	}
	var prev *forge.Turn
	for _, tc := range cases {
		h.model.push(tc.reply)
		req := msg("go")
		if prev != nil && len(prev.RequiredActions) > 0 {
			// The turn before paused on a client tool: resolve it.
			req = engine.TurnRequest{Input: []forge.Input{toolResult(prev.RequiredActions[0].CallID, "yes")}}
		}
		turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.cancel {
			waitForEvent(t, h, s.ID, forge.EventModelDelta)
			if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s.ID, "stop"); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
		got, err := h.eng.WaitTurn(ctx, forge.DefaultTenant, s.ID, turn.ID)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		stored, err := h.store.GetTurn(h.ctx, forge.DefaultTenant, s.ID, turn.ID)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(stored)
		prev = got
		if string(a) != string(b) || !got.Ended() {
			t.Fatalf("%s: WaitTurn answered\n%s\nthe store holds\n%s", tc.name, a, b)
		}
		if _, err := h.eng.WaitTurn(h.ctx, "other-tenant", s.ID, turn.ID); !errors.Is(err, forge.ErrNotFound) {
			t.Fatalf("%s: another tenant's wait: %v", tc.name, err)
		}
	}
}
