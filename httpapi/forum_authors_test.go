package httpapi_test

import (
	"testing"

	"github.com/forge-runtime/forge"
)

// TestForumHumanIDsCannotBreakALine: a human's id is how the model sees
// the author of their posts (human:<id>): an id with ':' (another kind
// or id), a control character or a Unicode line or paragraph separator
// (a forged speaker line) is 400 invalid_request. An id that is an
// agent's name is allowed: the model sees human:support, not
// agent:support.
func TestForumHumanIDsCannotBreakALine(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("support")
	var f struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &f)
	members := "/v1/forums/" + f.ID + "/members"
	for _, id := range []string{"a:b", "agent:support", "line\nbreak", "cr\rx", "tab\tx", "esc\x1bx", "nel\u0085x", "ls\u2028x", "ps\u2029x", "del\x7fx", "bad\xffutf8"} {
		a := s.do(req{method: "POST", path: members, body: map[string]any{"actor": map[string]any{"type": "human", "id": id}}})
		if a.status != 400 || a.errCode() != "invalid_request" {
			t.Errorf("human id %q: %s, want 400 invalid_request", id, a)
		}
	}
	var p forge.Participant
	s.call("POST", members, map[string]any{"actor": map[string]any{"type": "human", "id": "support"}}, 201, &p)
	var agent forge.Participant
	s.call("POST", members, map[string]any{"actor": map[string]any{"type": "agent", "agent": "support"}}, 201, &agent)
	if p.ActorID != "human:support" || agent.ActorID != "agent:support" {
		t.Fatalf("actor ids %q and %q", p.ActorID, agent.ActorID)
	}
	s.call("POST", members, map[string]any{"actor": map[string]any{"type": "human", "id": "Zoë Müller (billing) 😀"}}, 201, nil)
}
