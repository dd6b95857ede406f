package postgres_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// TestDeliveryHookRunsAfterWritesThatQueuedOne: the func NotifyDeliveries
// sets (the server's wake of its webhook dispatcher) runs after a
// committed write that queued a delivery, and not after one that queued
// none (a tenant without endpoints, an event nobody subscribes to) or one
// that was refused.
func TestDeliveryHookRunsAfterWritesThatQueuedOne(t *testing.T) {
	admin := pgtest.NewDatabase(t)
	t.Parallel()
	s := open(t, admin, testOpts)
	var calls atomic.Int32
	s.NotifyDeliveries(func() { calls.Add(1) })

	// acme's endpoint takes action.required, which seed's second write
	// emits (its first, the turn's begin, emits turn.created only).
	seed(t, s, "acme", false)
	if n := calls.Load(); n != 1 {
		t.Fatalf("after acme's turn: %d calls, want 1 (its action.required)", n)
	}

	// initech has no endpoint at first: its turn.done queues nothing.
	if err := s.CreateAgent(ctx, &forge.Agent{Tenant: "initech", Name: "support", Model: "openai/gpt-4.1-mini"}); err != nil {
		t.Fatal(err)
	}
	ids := forge.NewULIDGen(nil)
	// turn runs a turn of a new session of initech to its end and
	// returns its terminal batch.
	turn := func() *forge.Batch {
		t.Helper()
		ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: "initech", Agent: "support", MainThreadID: ids.New(forge.PrefixThread)}
		if err := s.CreateSession(ctx, ses); err != nil {
			t.Fatal(err)
		}
		turnID := ids.New(forge.PrefixTurn)
		if err := s.BeginTurn(ctx, &forge.BeginTurn{
			Turn:   &forge.Turn{ID: turnID, Tenant: "initech", SessionID: ses.ID, AgentID: "ag_1", AgentVersion: 1},
			Events: []forge.Event{{Seq: 1, ID: turnID, Type: forge.EventTurnCreated, SessionID: ses.ID, Data: []byte(`{}`)}},
			Lease:  &forge.Lease{Owner: "replica-initech", TTL: time.Hour},
		}); err != nil {
			t.Fatal(err)
		}
		end := &forge.Batch{Tenant: "initech", SessionID: ses.ID, TurnID: turnID, Turn: &forge.Turn{Status: forge.TurnDone},
			Events: []forge.Event{{Seq: 2, ID: turnID, Type: forge.EventTurnDone, SessionID: ses.ID, TurnID: &turnID, Data: []byte(`{}`)}}}
		if err := s.Commit(ctx, end); err != nil {
			t.Fatal(err)
		}
		return end
	}
	ended := turn()
	if n := calls.Load(); n != 1 {
		t.Fatalf("after initech's turn: %d calls, want still 1 (no endpoint)", n)
	}

	// With an endpoint for turn.done, the next turn's end queues one; a
	// terminal write of an ended turn is refused and queues nothing.
	if err := s.CreateWebhook(ctx, &forge.Webhook{Tenant: "initech", URL: "https://hooks.example.com/initech",
		Events: []string{forge.EventTurnDone}}); err != nil {
		t.Fatal(err)
	}
	turn()
	if n := calls.Load(); n != 2 {
		t.Fatalf("after initech's turn with an endpoint: %d calls, want 2", n)
	}
	ended.Events[0].Seq = 3
	if err := s.Commit(ctx, ended); !errors.Is(err, forge.ErrTurnEnded) {
		t.Fatalf("a second terminal write: %v, want ErrTurnEnded", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("after a refused write: %d calls, want still 2", n)
	}
}
