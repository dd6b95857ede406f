package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestLooseMessagesAreFirstTurnHistory: messages imported into a direct
// session outside turns (a Chat Completions history Forge had not seen)
// are the history of its first turn, and, on its branch, of the turns
// after it; a session without them sends only the new message.
func TestLooseMessagesAreFirstTurnHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	now := time.Now().UTC()
	var imported []*forge.Message
	for _, m := range []struct{ role, text, finish string }{{forge.RoleUser, "earlier question", ""}, {forge.RoleAssistant, "earlier answer", forge.FinishStop}} {
		msg := &forge.Message{ID: idgen.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: s.ID, ThreadID: s.MainThreadID,
			Role: m.role, Finish: m.finish, Metadata: json.RawMessage(`{"imported":true}`), CreatedAt: now}
		msg.Parts = []*forge.Part{{ID: idgen.New(forge.PrefixPart), MessageID: msg.ID, SessionID: s.ID, Type: forge.PartText,
			Text: m.text, State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
		imported = append(imported, msg)
	}
	if err := h.store.AppendLoose(h.ctx, &forge.LooseAppend{Tenant: forge.DefaultTenant, SessionID: s.ID, Messages: imported}); err != nil {
		t.Fatal(err)
	}
	h.model.push(reply{deltas: []string{"one"}}, reply{deltas: []string{"two"}}, reply{deltas: []string{"three"}})
	h.run(s.ID, msg("now"))
	h.run(s.ID, msg("and then"))
	h.run(h.session("a").ID, msg("fresh"))
	texts := func(req *forge.ModelRequest) []string {
		var out []string
		for _, m := range req.Messages {
			for _, p := range m.Parts {
				out = append(out, m.Role+":"+p.Text)
			}
		}
		return out
	}
	sent := h.model.sent()
	want := [][]string{
		{"user:earlier question", "assistant:earlier answer", "user:now"},
		{"user:earlier question", "assistant:earlier answer", "user:now", "assistant:one", "user:and then"},
		{"user:fresh"},
	}
	if len(sent) != len(want) {
		t.Fatalf("%d model calls", len(sent))
	}
	for i, req := range sent {
		got := texts(req)
		if len(got) != len(want[i]) {
			t.Fatalf("call %d sent %q, want %q", i, got, want[i])
		}
		for j := range got {
			if got[j] != want[i][j] {
				t.Fatalf("call %d sent %q, want %q", i, got, want[i])
			}
		}
	}
}
