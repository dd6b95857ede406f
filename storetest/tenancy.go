package storetest

import (
	"github.com/forge-runtime/forge"
)

var tenancyTests = []test{
	{name: "OtherTenantSeesNothing", run: func(f *fixture) {
		// Everything below belongs to tenant A; tenant B asks for it by id.
		agent := f.createAgent(tenantA, "support")
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "secret question")
		key := "key-a"
		t2 := f.newTurn(ses, &st.turn.ID)
		t2.IdempotencyKey = key
		f.end(ses, st.turn)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t2}), "BeginTurn")
		t2.Status, t2.EndedAt = forge.TurnDone, ptr(f.now())
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t2.ID, Turn: t2,
			Snapshot: &forge.Snapshot{ContextTokens: 1}}), "Commit")
		_, err := f.s.PutIdempotency(f.ctx, tenantA, &forge.IdempotencyRecord{Key: key, Scope: "s", Status: 200, CreatedAt: f.now()})
		f.ok(err, "PutIdempotency")

		b := tenantB
		_, err = f.s.GetAgent(f.ctx, b, "support")
		f.is(err, forge.ErrNotFound, "GetAgent")
		_, err = f.s.GetAgentVersion(f.ctx, b, agent.ID, 1)
		f.is(err, forge.ErrNotFound, "GetAgentVersion")
		f.is(f.s.UpdateAgent(f.ctx, sampleAgent(b, "support")), forge.ErrNotFound, "UpdateAgent")
		f.is(f.s.DeleteAgent(f.ctx, b, "support"), forge.ErrNotFound, "DeleteAgent")
		agents, next, err := f.s.ListAgents(f.ctx, b, forge.ListOptions{})
		f.ok(err, "ListAgents")
		eq(f, len(agents), 0, "agents listed")
		eq(f, next, "", "agents next cursor")

		_, err = f.s.GetSession(f.ctx, b, ses.ID)
		f.is(err, forge.ErrNotFound, "GetSession")
		sessions, _, err := f.s.ListSessions(f.ctx, b, forge.SessionQuery{})
		f.ok(err, "ListSessions")
		eq(f, len(sessions), 0, "sessions listed")
		f.is(f.s.DeleteSession(f.ctx, b, ses.ID), forge.ErrNotFound, "DeleteSession")
		_, err = f.s.ReserveSeqs(f.ctx, b, ses.ID, 1)
		f.is(err, forge.ErrNotFound, "ReserveSeqs")

		foreign := f.newTurn(&forge.Session{ID: ses.ID, Tenant: b}, &t2.ID)
		f.is(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: foreign}), forge.ErrNotFound, "BeginTurn")
		f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: b, SessionID: ses.ID, TurnID: st.turn.ID}), forge.ErrNotFound, "Commit")
		_, err = f.s.GetTurn(f.ctx, b, ses.ID, st.turn.ID)
		f.is(err, forge.ErrNotFound, "GetTurn")
		_, err = f.s.TurnByIdempotencyKey(f.ctx, b, ses.ID, key)
		f.is(err, forge.ErrNotFound, "TurnByIdempotencyKey")
		_, _, err = f.s.ListTurns(f.ctx, b, ses.ID, forge.ListOptions{})
		f.is(err, forge.ErrNotFound, "ListTurns")
		_, err = f.s.GetSnapshot(f.ctx, b, t2.ID)
		f.is(err, forge.ErrNotFound, "GetSnapshot")
		_, _, err = f.s.ListMessages(f.ctx, b, forge.MessageQuery{SessionID: ses.ID, TipTurnID: st.turn.ID})
		f.is(err, forge.ErrNotFound, "ListMessages")
		_, err = f.s.TurnMessages(f.ctx, b, st.turn.ID)
		f.is(err, forge.ErrNotFound, "TurnMessages")
		_, err = f.s.ListEvents(f.ctx, b, forge.EventQuery{SessionID: ses.ID})
		f.is(err, forge.ErrNotFound, "ListEvents")
		_, err = f.s.GetIdempotency(f.ctx, b, "s", key)
		f.is(err, forge.ErrNotFound, "GetIdempotency")
		rec, err := f.s.PutIdempotency(f.ctx, b, &forge.IdempotencyRecord{Key: key, Scope: "s", Status: 201, CreatedAt: f.now()})
		f.ok(err, "PutIdempotency for B")
		eq(f, rec.Status, 201, "B's own record")

		// Tenant A still has everything; B's attempts changed nothing.
		_, err = f.s.GetAgent(f.ctx, tenantA, "support")
		f.ok(err, "GetAgent as A")
		eq(f, f.tip(ses), t2.ID, "tip as A")
		eq(f, len(f.events(ses, forge.EventQuery{})), 3, "A's events")
		rec, err = f.s.GetIdempotency(f.ctx, tenantA, "s", key)
		f.ok(err, "GetIdempotency as A")
		eq(f, rec.Status, 200, "A's record")
	}},
}

var durabilityTests = []test{
	{name: "EverythingSurvivesReopen", reopen: true, run: func(f *fixture) {
		agent := f.createAgent(tenantA, "support")
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		done := f.end(ses, st.turn)
		running := f.start(ses, &st.turn.ID, "still running")
		rec := &forge.IdempotencyRecord{Key: "k", Scope: "s", Status: 200, Body: []byte(`{}`), CreatedAt: f.now()}
		_, err := f.s.PutIdempotency(f.ctx, tenantA, rec)
		f.ok(err, "PutIdempotency")

		f.reopen()

		got, err := f.s.GetAgent(f.ctx, tenantA, "support")
		f.ok(err, "GetAgent")
		f.sameJSON(agentBody(got), agentBody(agent), "agent")
		gs, err := f.s.GetSession(f.ctx, tenantA, ses.ID)
		f.ok(err, "GetSession")
		eq(f, *gs.TipTurnID, running.turn.ID, "tip")
		f.sameJSON(f.getTurn(st.turn), st.turn, "ended turn")
		f.sameJSON(f.mustBranch(ses, running.turn.ID), []*forge.Message{st.msg, running.msg}, "branch")
		want := append(append(append([]forge.Event{}, st.events...), done), running.events...)
		f.sameJSON(f.events(ses, forge.EventQuery{}), want, "events")
		r, err := f.s.GetIdempotency(f.ctx, tenantA, "s", "k")
		f.ok(err, "GetIdempotency")
		f.sameJSON(r, rec, "idempotency record")

		// The running turn is still running, and still the only one.
		rt, err := f.s.RunningTurns(f.ctx)
		f.ok(err, "RunningTurns")
		f.sameJSON(idsOf(rt, func(t *forge.Turn) string { return t.ID }), []string{running.turn.ID}, "running turns")
		b, nothingWritten := f.refusedBegin(ses, &running.turn.ID)
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrTurnInProgress, "BeginTurn after reopen")
		nothingWritten("after reopen")
		// Seqs continue above everything reserved before the reopen.
		bound, err := f.s.ReserveSeqs(f.ctx, tenantA, ses.ID, 1)
		f.ok(err, "ReserveSeqs")
		eq(f, bound, b.Events[0].Seq+1, "seq bound")
	}},
}
