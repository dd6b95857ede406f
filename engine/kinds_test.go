package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// TestSessionKinds: the engine knows direct sessions only; a session of
// another kind takes turns as the policy its owner registered allows
// (Config.Kinds), and none when no layer registered the kind.
func TestSessionKinds(t *testing.T) {
	var checked []string
	var ordered int
	const kind = "room"
	h := newHarness(t, func(c *engine.Config) {
		c.Kinds = map[string]engine.SessionKind{kind: {
			Check: func(sess *forge.Session, req *engine.TurnRequest) error {
				checked = append(checked, sess.ID)
				if !req.Owner {
					return forge.Errorf(forge.ErrInvalid, "only its owner starts turns here")
				}
				return nil
			},
			Order: func(msgs []*forge.Message) []*forge.Message {
				ordered++
				return slices.Clone(msgs)
			},
		}}
	})
	h.agent("a", nil)
	session := func(kind string) *forge.Session {
		s := &forge.Session{ID: idgen.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: kind, Agent: "a",
			MainThreadID: idgen.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
		if err := h.store.CreateSession(h.ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	room, unknown, direct := session(kind), session("elsewhere"), h.session("a")

	_, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, room.ID, msg("hi"))
	if !errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), "only its owner") {
		t.Fatalf("a client's turn on the kind's session: %v, want its policy's refusal", err)
	}
	h.model.push(reply{deltas: []string{"ok"}})
	req := msg("hi")
	req.Owner = true
	if tr := h.run(room.ID, req); tr.Status != forge.TurnDone {
		t.Fatalf("the owner's turn: %s", tr.Status)
	}
	if len(checked) != 2 || ordered == 0 {
		t.Fatalf("policy calls: checked %v, ordered %d times; want 2 checks and the history in the kind's order", checked, ordered)
	}
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, unknown.ID, msg("hi")); !errors.Is(err, forge.ErrInvalid) ||
		!strings.Contains(err.Error(), "takes no turns") {
		t.Fatalf("a session of a kind no layer registered: %v, want invalid", err)
	}
	req = msg("hi")
	req.Owner = true
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, direct.ID, req); !errors.Is(err, forge.ErrInvalid) {
		t.Fatalf("an owner's request on a direct session: %v, want invalid", err)
	}
}

// TestKindsCannotRedefineDirect: the engine's own kind is not a layer's.
func TestKindsCannotRedefineDirect(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("engine.New accepted a policy for direct sessions")
		}
	}()
	newHarness(t, func(c *engine.Config) { c.Kinds = map[string]engine.SessionKind{forge.KindDirect: {}} })
}
