package storetest

import (
	"sync"

	"github.com/forge-runtime/forge"
)

func (f *fixture) sessionPages(tenant string, limit int) [][]string {
	f.Helper()
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.Session, string, error) {
		return f.s.ListSessions(f.ctx, tenant, forge.SessionQuery{ListOptions: o, Ascending: true})
	}, func(s *forge.Session) string { return s.ID })
}

var sessionTests = []test{
	{name: "CreateGetRoundTrips", run: func(f *fixture) {
		s := f.newSession(tenantA)
		got, err := f.s.GetSession(f.ctx, tenantA, s.ID)
		f.ok(err, "GetSession")
		f.sameJSON(got, s, "session")
		eq(f, got.Tenant, tenantA, "Tenant")
		if got.TipTurnID != nil {
			f.Fatalf("new session has tip %q", *got.TipTurnID)
		}
	}},
	{name: "DuplicateIDConflicts", run: func(f *fixture) {
		s := f.newSession(tenantA)
		dup := *s
		f.is(f.s.CreateSession(f.ctx, &dup), forge.ErrConflict, "CreateSession with a used id")
	}},
	{name: "ListPaginatesOldestFirst", run: func(f *fixture) {
		var ids []string
		for range 5 {
			ids = append(ids, f.newSession(tenantA).ID)
		}
		f.sameJSON(f.sessionPages(tenantA, 2), [][]string{ids[0:2], ids[2:4], ids[4:]}, "pages of 2")
		f.sameJSON(f.sessionPages(tenantA, 0), [][]string{ids}, "default limit")
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ids[4]), "DeleteSession")
		f.sameJSON(f.sessionPages(tenantA, 2), [][]string{ids[0:2], ids[2:4]}, "pages after delete")
	}},
	{name: "DeleteIsSoft", run: func(f *fixture) {
		s := f.newSession(tenantA)
		f.ok(f.s.DeleteSession(f.ctx, tenantA, s.ID), "DeleteSession")
		_, err := f.s.GetSession(f.ctx, tenantA, s.ID)
		f.is(err, forge.ErrNotFound, "GetSession after delete")
		f.is(f.s.DeleteSession(f.ctx, tenantA, s.ID), forge.ErrNotFound, "second DeleteSession")
		f.is(f.s.DeleteSession(f.ctx, tenantA, "ses_unknown"), forge.ErrNotFound, "DeleteSession unknown")
		_, err = f.s.GetSession(f.ctx, tenantA, "ses_unknown")
		f.is(err, forge.ErrNotFound, "GetSession unknown")
		f.sameJSON(f.sessionPages(tenantA, 10), [][]string{{}}, "ListSessions after delete")
		// Reads scoped to the deleted session are not found either.
		_, _, err = f.s.ListTurns(f.ctx, tenantA, s.ID, forge.ListOptions{})
		f.is(err, forge.ErrNotFound, "ListTurns of a deleted session")
		_, err = f.s.ListEvents(f.ctx, tenantA, forge.EventQuery{SessionID: s.ID})
		f.is(err, forge.ErrNotFound, "ListEvents of a deleted session")
	}},
	{name: "ReserveSeqsIsMonotonic", run: func(f *fixture) {
		s := f.newSession(tenantA)
		for _, step := range []struct{ n, want int64 }{{10, 10}, {5, 15}, {1, 16}} {
			got, err := f.s.ReserveSeqs(f.ctx, tenantA, s.ID, step.n)
			f.ok(err, "ReserveSeqs")
			eq(f, got, step.want, "bound")
		}
		_, err := f.s.ReserveSeqs(f.ctx, tenantA, "ses_unknown", 1)
		f.is(err, forge.ErrNotFound, "ReserveSeqs unknown session")
		// Sessions have their own sequences.
		other := f.newSession(tenantA)
		got, err := f.s.ReserveSeqs(f.ctx, tenantA, other.ID, 3)
		f.ok(err, "ReserveSeqs other session")
		eq(f, got, int64(3), "other session's bound")
	}},
	{name: "SessionWithTip", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		got, tip, err := f.s.SessionWithTip(f.ctx, tenantA, ses.ID)
		f.ok(err, "SessionWithTip")
		eq(f, got.ID, ses.ID, "the session")
		eq(f, tip == nil, true, "no tip before the first turn")
		t1 := f.start(ses, nil, "first").turn
		f.end(ses, t1)
		t2 := f.start(ses, &t1.ID, "second").turn
		got, tip, err = f.s.SessionWithTip(f.ctx, tenantA, ses.ID)
		f.ok(err, "SessionWithTip")
		want, err := f.s.GetTurn(f.ctx, tenantA, ses.ID, t2.ID)
		f.ok(err, "GetTurn")
		eq(f, *got.TipTurnID, t2.ID, "the session's tip")
		f.sameJSON(tip, want, "the tip turn, as GetTurn reads it")
		_, _, err = f.s.SessionWithTip(f.ctx, tenantB, ses.ID)
		f.is(err, forge.ErrNotFound, "another tenant's session")
		f.end(ses, t2)
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		_, _, err = f.s.SessionWithTip(f.ctx, tenantA, ses.ID)
		f.is(err, forge.ErrNotFound, "a deleted session")
	}},
	{name: "BeginTurnClaimsSeqs", run: func(f *fixture) {
		// forge.SeqClaim: a BeginTurn that reserves its own seqs, from
		// the bound as read; refused, writing nothing, once it moved.
		ses := f.newSession(tenantA)
		bound := f.seqs(ses, 4)[3]
		got, err := f.s.GetSession(f.ctx, tenantA, ses.ID)
		f.ok(err, "GetSession")
		if got.SeqReserved != nil && *got.SeqReserved != bound {
			f.Errorf("Session.SeqReserved %d, want %d (or nil: not known)", *got.SeqReserved, bound)
		}
		claimed := func(above, through int64, prev *string) (*forge.Turn, error) {
			t := f.newTurn(ses, prev)
			t.LastSeq = above + 1
			ev := f.event(t, above+1, forge.EventTurnCreated, t.ID, t)
			return t, f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t, Events: []forge.Event{ev},
				Claim: &forge.SeqClaim{Above: above, Through: above + 10}})
		}
		t1, err := claimed(bound, bound+10, nil)
		f.ok(err, "BeginTurn with a claim on the bound")
		eq(f, f.tip(ses), t1.ID, "the turn began")
		eq(f, f.seqs(ses, 1)[0], bound+11, "the next reservation is above the claim")

		f.end(ses, t1) // seq bound+12
		t2, err := claimed(bound, bound+10, &t1.ID)
		f.is(err, forge.ErrSeqClaimLost, "BeginTurn with a claim on a bound that moved")
		f.is(err, forge.ErrConflict, "a lost claim is a conflict")
		eq(f, f.tip(ses), t1.ID, "the tip did not move")
		_, err = f.s.GetTurn(f.ctx, tenantA, ses.ID, t2.ID)
		f.is(err, forge.ErrNotFound, "the refused turn")
		eq(f, f.seqs(ses, 1)[0], bound+13, "the bound did not move")
	}},
	{name: "ReserveSeqsConcurrentRangesAreDisjoint", run: func(f *fixture) {
		s := f.newSession(tenantA)
		const workers, each, n = 4, 25, 3
		var (
			mu     sync.Mutex
			bounds = map[int64]bool{}
			wg     sync.WaitGroup
			errs   = make(chan error, workers*each)
		)
		for range workers {
			wg.Go(func() {
				for range each {
					b, err := f.s.ReserveSeqs(f.ctx, tenantA, s.ID, n)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					bounds[b] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			f.ok(err, "concurrent ReserveSeqs")
		}
		// Every reservation got its own range: the bounds are exactly
		// n, 2n, ..., workers*each*n.
		eq(f, len(bounds), workers*each, "distinct bounds")
		for i := int64(1); i <= workers*each; i++ {
			if !bounds[i*n] {
				f.Fatalf("bound %d missing: ranges overlap", i*n)
			}
		}
	}},
	{name: "ReserveSeqsSurvivesReopen", reopen: true, run: func(f *fixture) {
		s := f.newSession(tenantA)
		_, err := f.s.ReserveSeqs(f.ctx, tenantA, s.ID, 7)
		f.ok(err, "ReserveSeqs")
		f.reopen()
		got, err := f.s.ReserveSeqs(f.ctx, tenantA, s.ID, 1)
		f.ok(err, "ReserveSeqs after reopen")
		eq(f, got, int64(8), "bound after reopen")
	}},
}
