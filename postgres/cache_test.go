package postgres_test

import (
	"errors"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// TestTurnStartCacheAcrossStores: two stores on one database (two
// replicas). What one keeps for turn starts may be stale after the other
// wrote; BeginTurn refuses a turn prepared from it, writing nothing, and
// the refusing store reads the rows afresh afterwards.
func TestTurnStartCacheAcrossStores(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a, b := open(t, url, testOpts), open(t, url, testOpts)
	ids := forge.NewULIDGen(nil)
	const tenant = "acme"
	agent := &forge.Agent{Tenant: tenant, Name: "support", Model: "openai/x"}
	if err := a.CreateAgent(ctx, agent); err != nil {
		t.Fatal(err)
	}
	ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Agent: "support", MainThreadID: "thr_main"}
	if err := a.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	// begin prepares a turn on s from its turn-start rows and begins it
	// (ending it at once).
	begin := func(s *postgres.Store) (*forge.Turn, error) {
		t.Helper()
		cur, err := s.SessionForTurn(ctx, tenant, ses.ID)
		if err != nil {
			return nil, err
		}
		ag, err := s.AgentForTurn(ctx, tenant, "support")
		if err != nil {
			return nil, err
		}
		tip := ""
		if cur.TipTurnID != nil {
			tip = *cur.TipTurnID
		}
		turn := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: tenant, SessionID: ses.ID, PreviousTurnID: cur.TipTurnID,
			AgentID: ag.ID, AgentVersion: ag.Version, Status: forge.TurnDone}
		return turn, s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, ExpectTip: &tip, AgentName: "support"})
	}
	if _, err := begin(a); err != nil { // a keeps the rows
		t.Fatal(err)
	}
	other, err := begin(b)
	if err != nil {
		t.Fatal(err)
	}
	// a's tip is stale: refused, then read afresh.
	if _, err := begin(a); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("a turn from a stale tip: %v, want ErrConflict", err)
	}
	got, err := begin(a)
	if err != nil || *got.PreviousTurnID != other.ID {
		t.Fatalf("the retry: %v, previous %v; want %s", err, got.PreviousTurnID, other.ID)
	}
	// b updates the agent: a's cached version is refused, then read afresh.
	if err := b.UpdateAgent(ctx, &forge.Agent{Tenant: tenant, Name: "support", Model: "openai/y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := begin(a); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("a turn from a replaced agent version: %v, want ErrConflict", err)
	}
	if got, err = begin(a); err != nil || got.AgentVersion != 2 {
		t.Fatalf("the retry: %v, agent version %d; want 2", err, got.AgentVersion)
	}
	turns, _, err := a.ListTurns(ctx, tenant, ses.ID, forge.ListOptions{})
	if err != nil || len(turns) != 4 {
		t.Fatalf("turns %d, %v; want the 4 that began", len(turns), err)
	}
	// b deletes the session: a's cached row begins nothing.
	if err := b.DeleteSession(ctx, tenant, ses.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := begin(a); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("a turn in a session deleted elsewhere: %v, want ErrNotFound", err)
	}
	if _, err := a.SessionForTurn(ctx, tenant, ses.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("SessionForTurn after the refusal: %v, want ErrNotFound", err)
	}
}
