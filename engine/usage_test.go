package engine_test

import (
	"testing"

	"github.com/forge-runtime/forge"
)

// TestUsageIsEstimatedWhenTheProviderReportsNone: a step cancelled, cut or
// failed after output used tokens the provider never reported: the turn's
// usage is estimated from the request and the streamed text, and says so.
// A call refused before any output reports nothing.
func TestUsageIsEstimatedWhenTheProviderReportsNone(t *testing.T) {
	t.Parallel()
	boom := &forge.ModelError{Provider: "test", StatusCode: 500, Message: "boom"}
	cases := []struct {
		name      string
		reply     reply
		cancel    bool
		status    string
		estimated bool
		output    int64
	}{
		{"cancelled", reply{deltas: []string{"twelve chars"}, block: make(chan struct{})}, true, forge.TurnCancelled, true, 3},
		{"cut", reply{deltas: []string{"twelve chars", "!"}, cut: true}, false, forge.TurnDone, true, 4},
		{"error after output", reply{deltas: []string{"partial"}, err: boom}, false, forge.TurnErrored, true, 2},
		{"refused before output", reply{err: &forge.ModelError{Provider: "test", StatusCode: 429, Message: "slow down"}}, false, forge.TurnErrored, false, 0},
		{"reported", reply{deltas: []string{"fine"}, usage: forge.Usage{InputTokens: 7, OutputTokens: 1}}, false, forge.TurnDone, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.agent("a", nil)
			s := h.session("a")
			h.model.push(tc.reply)
			turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("count the tokens of this prompt"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.cancel {
				waitForEvent(t, h, s.ID, forge.EventModelDelta)
				if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s.ID, ""); err != nil {
					t.Fatal(err)
				}
			}
			got := h.wait(s.ID, turn.ID)
			u := got.Usage
			if got.Status != tc.status || u.Estimated != tc.estimated || u.OutputTokens != tc.output {
				t.Fatalf("status %s usage %+v; want %s, estimated %v, %d output tokens", got.Status, u, tc.status, tc.estimated, tc.output)
			}
			if tc.estimated && u.InputTokens <= 0 {
				t.Fatalf("estimated input tokens %d", u.InputTokens)
			}
			if !tc.estimated && tc.reply.usage == (forge.Usage{}) && u != (forge.Usage{}) {
				t.Fatalf("usage %+v for a call that reported none and produced nothing", u)
			}
			// The step's assistant message carries the same usage.
			msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
			if m := msgs[len(msgs)-1]; tc.estimated && (m.Usage == nil || *m.Usage != u) {
				t.Fatalf("message usage %+v, turn usage %+v", m.Usage, u)
			}
			sess, _ := h.store.GetSession(h.ctx, forge.DefaultTenant, s.ID)
			if sess.Usage.InputTokens != u.InputTokens || sess.Usage.OutputTokens != u.OutputTokens {
				t.Fatalf("session usage %+v", sess.Usage)
			}
		})
	}
}
