package storetest

import (
	"context"
	"errors"

	"github.com/forge-runtime/forge"
)

// failureTests: a store whose database is gone answers forge.ErrStore
// (HTTP 503 store_error), never an answer about the data such as
// ErrNotFound, and never a bare driver error (HTTP 500). The suite closes
// the store to take its database away: what each method then meets is the
// driver's "closed" error, on the same paths a lost connection or a full
// disk takes. A caller's own ended context stays a context error.
// storeCall is one store method called with plausible arguments.
type storeCall struct {
	name string
	call func(ctx context.Context) error
}

var failureTests = []test{
	{"every method answers ErrStore when the database is gone", false, func(f *fixture) {
		ses := f.newSession(tenantA)
		f.ok(f.s.Close(f.ctx), "Close")
		// Ids the store has never seen, so no cache can answer.
		sid, tid := f.id(forge.PrefixSession), f.id(forge.PrefixTurn)
		fresh := &forge.Session{ID: sid, Tenant: tenantA, Kind: forge.KindDirect, Agent: "support",
			MainThreadID: f.id(forge.PrefixThread), CreatedAt: f.now(), UpdatedAt: f.now()}
		calls := []storeCall{
			{"CreateAgent", func(ctx context.Context) error {
				return f.s.CreateAgent(ctx, &forge.Agent{ID: f.id(forge.PrefixAgent), Tenant: tenantA, Name: "fresh",
					Version: 1, Model: "scripted/echo", CreatedAt: f.now(), UpdatedAt: f.now()})
			}},
			{"GetAgent", func(ctx context.Context) error { _, err := f.s.GetAgent(ctx, tenantA, "nobody"); return err }},
			{"GetAgentVersion", func(ctx context.Context) error {
				_, err := f.s.GetAgentVersion(ctx, tenantA, "ag_nobody", 1)
				return err
			}},
			{"ListAgents", func(ctx context.Context) error {
				_, _, err := f.s.ListAgents(ctx, tenantA, forge.ListOptions{})
				return err
			}},
			{"CreateSession", func(ctx context.Context) error { return f.s.CreateSession(ctx, fresh) }},
			{"GetSession", func(ctx context.Context) error { _, err := f.s.GetSession(ctx, tenantA, sid); return err }},
			{"ListSessions", func(ctx context.Context) error {
				_, _, err := f.s.ListSessions(ctx, tenantA, forge.SessionQuery{})
				return err
			}},
			{"DeleteSession", func(ctx context.Context) error { return f.s.DeleteSession(ctx, tenantA, ses.ID) }},
			{"ReserveSeqs", func(ctx context.Context) error { _, err := f.s.ReserveSeqs(ctx, tenantA, ses.ID, 4); return err }},
			{"GetTurn", func(ctx context.Context) error { _, err := f.s.GetTurn(ctx, tenantA, ses.ID, tid); return err }},
			{"GetTurnByID", func(ctx context.Context) error { _, err := f.s.GetTurnByID(ctx, tenantA, tid); return err }},
			{"ListTurns", func(ctx context.Context) error {
				_, _, err := f.s.ListTurns(ctx, tenantA, ses.ID, forge.ListOptions{})
				return err
			}},
			{"RunningTurns", func(ctx context.Context) error { _, err := f.s.RunningTurns(ctx); return err }},
			{"GetSnapshot", func(ctx context.Context) error { _, err := f.s.GetSnapshot(ctx, tenantA, tid); return err }},
			{"ListMessages", func(ctx context.Context) error {
				_, _, err := f.s.ListMessages(ctx, tenantA, forge.MessageQuery{SessionID: ses.ID})
				return err
			}},
			{"TurnMessages", func(ctx context.Context) error { _, err := f.s.TurnMessages(ctx, tenantA, tid); return err }},
			{"ListEvents", func(ctx context.Context) error {
				_, err := f.s.ListEvents(ctx, tenantA, forge.EventQuery{SessionID: ses.ID})
				return err
			}},
			{"GetIdempotency", func(ctx context.Context) error {
				_, err := f.s.GetIdempotency(ctx, tenantA, "turns", "k1")
				return err
			}},
			{"ListParticipants", func(ctx context.Context) error {
				_, _, err := f.s.ListParticipants(ctx, tenantA, ses.ID, true, forge.ListOptions{})
				return err
			}},
			{"ListLoose", func(ctx context.Context) error {
				_, _, err := f.s.ListLoose(ctx, tenantA, ses.ID, forge.ListOptions{})
				return err
			}},
		}
		if ks, ok := f.s.(forge.KeyStore); ok {
			calls = append(calls, storeCall{"KeyByHash", func(ctx context.Context) error { _, err := ks.KeyByHash(ctx, forge.HashAPIKey("fk_x")); return err }})
		}
		for _, c := range calls {
			err := c.call(f.ctx)
			if !errors.Is(err, forge.ErrStore) || errors.Is(err, forge.ErrNotFound) {
				f.Errorf("%s on a closed store: got %v (code %s), want ErrStore", c.name, err, forge.ErrorCode(err))
			}
		}
	}},
	{"a caller's ended context is not a store failure", false, func(f *fixture) {
		ses := f.newSession(tenantA)
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		_, _, err := f.s.ListTurns(ctx, tenantA, ses.ID, forge.ListOptions{})
		if err == nil {
			return // a store may answer from memory before it looks at ctx
		}
		if errors.Is(err, forge.ErrStore) || !errors.Is(err, context.Canceled) {
			f.Fatalf("ListTurns with a cancelled context: got %v (code %s), want context.Canceled and no ErrStore",
				err, forge.ErrorCode(err))
		}
	}},
}
