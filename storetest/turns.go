package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/forge-runtime/forge"
)

func (f *fixture) getTurn(t *forge.Turn) *forge.Turn {
	f.Helper()
	got, err := f.s.GetTurn(f.ctx, t.Tenant, t.SessionID, t.ID)
	f.ok(err, "GetTurn")
	return got
}

func (f *fixture) tip(s *forge.Session) string {
	f.Helper()
	got, err := f.s.GetSession(f.ctx, s.Tenant, s.ID)
	f.ok(err, "GetSession")
	if got.TipTurnID == nil {
		return ""
	}
	return *got.TipTurnID
}

// refusedBegin builds a BeginTurn with a message and an event, for calls
// that must fail, and returns a check that nothing of it was written.
func (f *fixture) refusedBegin(ses *forge.Session, prev *string) (*forge.BeginTurn, func(what string)) {
	t := f.newTurn(ses, prev)
	m := f.message(t, ses.MainThreadID, forge.RoleUser, "refused")
	seq := f.seqs(ses, 1)[0]
	b := &forge.BeginTurn{Turn: t, Messages: []*forge.Message{m},
		Events: []forge.Event{f.event(t, seq, forge.EventTurnCreated, t.ID, t)}}
	tipBefore := f.tip(ses)
	return b, func(what string) {
		f.Helper()
		_, err := f.s.GetTurn(f.ctx, ses.Tenant, ses.ID, t.ID)
		f.is(err, forge.ErrNotFound, what+": GetTurn of the refused turn")
		_, err = f.s.TurnMessages(f.ctx, ses.Tenant, t.ID)
		f.is(err, forge.ErrNotFound, what+": TurnMessages of the refused turn")
		for _, e := range f.events(ses, forge.EventQuery{}) {
			if e.Seq == seq {
				f.Fatalf("%s: the refused turn's event %d was stored", what, seq)
			}
		}
		eq(f, f.tip(ses), tipBefore, what+": tip")
		if tipBefore != "" {
			for _, m2 := range f.mustBranch(ses, tipBefore) {
				if m2.ID == m.ID {
					f.Fatalf("%s: the refused turn's message is on the branch", what)
				}
			}
		}
	}
}

func (f *fixture) mustBranch(ses *forge.Session, tip string) []*forge.Message {
	f.Helper()
	ms, _ := f.branch(ses, tip, "", 0, "")
	return ms
}

var beginTurnTests = []test{
	{name: "WritesTurnMessagesEventsAndMovesTip", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "Where is order 42?")
		got := f.getTurn(st.turn)
		f.sameJSON(got, st.turn, "turn")
		eq(f, got.Tenant, tenantA, "turn Tenant")
		eq(f, f.tip(ses), st.turn.ID, "tip")
		ms, err := f.s.TurnMessages(f.ctx, tenantA, st.turn.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg}, "turn messages")
		eq(f, ms[0].Tenant, tenantA, "message Tenant")
		f.sameJSON(f.events(ses, forge.EventQuery{}), st.events, "events")
		f.sameJSON(f.mustBranch(ses, st.turn.ID), []*forge.Message{st.msg}, "branch")
	}},
	{name: "RunningTurnRefusesAnother", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		first := f.start(ses, nil, "first")
		b, nothingWritten := f.refusedBegin(ses, &first.turn.ID)
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrTurnInProgress, "BeginTurn while running")
		nothingWritten("turn in progress")
		// A new root does not get around it either.
		b2, nothingWritten2 := f.refusedBegin(ses, nil)
		f.is(f.s.BeginTurn(f.ctx, b2), forge.ErrTurnInProgress, "BeginTurn new root while running")
		nothingWritten2("turn in progress, new root")
		// Once the first turn ended, the next one starts.
		f.end(ses, first.turn)
		second := f.start(ses, &first.turn.ID, "second")
		eq(f, f.tip(ses), second.turn.ID, "tip")
	}},
	{name: "ExpectTipGuardsTheTip", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		b, nothingWritten := f.refusedBegin(ses, nil)
		b.ExpectTip = ptr("turn_elsewhere")
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrConflict, "BeginTurn with a wrong tip")
		nothingWritten("wrong tip")

		t1 := f.newTurn(ses, nil)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t1, ExpectTip: ptr("")}), "BeginTurn expecting no tip")
		f.end(ses, t1)

		b, nothingWritten = f.refusedBegin(ses, nil)
		b.ExpectTip = ptr("")
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrConflict, "BeginTurn expecting no tip when there is one")
		nothingWritten("tip moved")

		t2 := f.newTurn(ses, &t1.ID)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t2, ExpectTip: ptr(t1.ID)}), "BeginTurn expecting the tip")
		eq(f, f.tip(ses), t2.ID, "tip")
	}},
	{name: "AgentNameGuardsTheAgentVersion", run: func(f *fixture) {
		// A turn prepared from an agent version that is no longer the live
		// agent's current one (a cached row: AgentForTurn) is refused.
		a := f.createAgent(tenantA, "support")
		got, err := f.s.AgentForTurn(f.ctx, tenantA, "support")
		f.ok(err, "AgentForTurn")
		want, err := f.s.GetAgent(f.ctx, tenantA, "support")
		f.ok(err, "GetAgent")
		f.sameJSON(got, want, "AgentForTurn")
		ses := f.newSession(tenantA)
		prepared := func(b *forge.BeginTurn) *forge.BeginTurn {
			b.AgentName, b.Turn.AgentID, b.Turn.AgentVersion = "support", got.ID, got.Version
			return b
		}
		t1 := prepared(&forge.BeginTurn{Turn: f.newTurn(ses, nil)})
		f.ok(f.s.BeginTurn(f.ctx, t1), "BeginTurn with the current version")
		f.end(ses, t1.Turn)

		update := *a
		update.Instructions = "version two"
		f.ok(f.s.UpdateAgent(f.ctx, &update), "UpdateAgent")
		b, nothingWritten := f.refusedBegin(ses, &t1.Turn.ID)
		f.is(f.s.BeginTurn(f.ctx, prepared(b)), forge.ErrConflict, "BeginTurn with a replaced version")
		nothingWritten("replaced agent version")
		got, err = f.s.AgentForTurn(f.ctx, tenantA, "support")
		f.ok(err, "AgentForTurn after the update")
		eq(f, got.Version, 2, "AgentForTurn version after the update")
		eq(f, got.Instructions, "version two", "AgentForTurn instructions after the update")
		t2 := prepared(&forge.BeginTurn{Turn: f.newTurn(ses, &t1.Turn.ID)})
		f.ok(f.s.BeginTurn(f.ctx, t2), "BeginTurn with the new version")
		f.end(ses, t2.Turn)

		f.ok(f.s.DeleteAgent(f.ctx, tenantA, "support"), "DeleteAgent")
		b, nothingWritten = f.refusedBegin(ses, &t2.Turn.ID)
		f.is(f.s.BeginTurn(f.ctx, prepared(b)), forge.ErrConflict, "BeginTurn with a deleted agent")
		nothingWritten("deleted agent")
		_, err = f.s.AgentForTurn(f.ctx, tenantA, "support")
		f.is(err, forge.ErrNotFound, "AgentForTurn of a deleted agent")
		// Without AgentName, nothing is checked (a deleted agent's last
		// version still runs its sessions).
		t3 := f.newTurn(ses, &t2.Turn.ID)
		t3.AgentID, t3.AgentVersion = got.ID, 2
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t3}), "BeginTurn without AgentName")
	}},
	{name: "SessionForTurnIsFencedByBeginTurn", run: func(f *fixture) {
		// SessionForTurn returns the session as GetSession does; whatever
		// it kept, BeginTurn's ExpectTip refuses a stale tip and it reads
		// the tip afresh afterwards.
		ses := f.newSession(tenantA)
		got, err := f.s.SessionForTurn(f.ctx, tenantA, ses.ID)
		f.ok(err, "SessionForTurn")
		want, err := f.s.GetSession(f.ctx, tenantA, ses.ID)
		f.ok(err, "GetSession")
		f.sameJSON(got, want, "SessionForTurn")
		t1 := f.newTurn(ses, nil)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t1, ExpectTip: ptr("")}), "BeginTurn")
		f.end(ses, t1)
		got, err = f.s.SessionForTurn(f.ctx, tenantA, ses.ID)
		f.ok(err, "SessionForTurn after a turn")
		if got.TipTurnID == nil || *got.TipTurnID != t1.ID {
			f.Fatalf("SessionForTurn tip %v after this store's turn, want %s", got.TipTurnID, t1.ID)
		}
		b, nothingWritten := f.refusedBegin(ses, nil)
		b.ExpectTip = ptr("")
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrConflict, "BeginTurn from an old tip")
		nothingWritten("old tip")
		got, err = f.s.SessionForTurn(f.ctx, tenantA, ses.ID)
		f.ok(err, "SessionForTurn after a refusal")
		eq(f, *got.TipTurnID, t1.ID, "SessionForTurn tip after a refusal")
		_, err = f.s.SessionForTurn(f.ctx, tenantB, ses.ID)
		f.is(err, forge.ErrNotFound, "SessionForTurn of another tenant's session")
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		_, err = f.s.SessionForTurn(f.ctx, tenantA, ses.ID)
		f.is(err, forge.ErrNotFound, "SessionForTurn of a deleted session")
	}},
	{name: "IdempotencyKeyIsUsedOnce", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.newTurn(ses, nil)
		t1.IdempotencyKey = "key-1"
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t1}), "BeginTurn with a key")
		f.end(ses, t1)

		b, nothingWritten := f.refusedBegin(ses, &t1.ID)
		b.Turn.IdempotencyKey = "key-1"
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrConflict, "BeginTurn reusing the key")
		nothingWritten("reused key")

		got, err := f.s.TurnByIdempotencyKey(f.ctx, tenantA, ses.ID, "key-1")
		f.ok(err, "TurnByIdempotencyKey")
		eq(f, got.ID, t1.ID, "turn found by key")
		eq(f, got.IdempotencyKey, "key-1", "IdempotencyKey")
		_, err = f.s.TurnByIdempotencyKey(f.ctx, tenantA, ses.ID, "key-2")
		f.is(err, forge.ErrNotFound, "unknown key")

		// Keys are per session.
		other := f.newSession(tenantA)
		t3 := f.newTurn(other, nil)
		t3.IdempotencyKey = "key-1"
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t3}), "same key in another session")
		_, err = f.s.TurnByIdempotencyKey(f.ctx, tenantA, other.ID, "key-1")
		f.ok(err, "TurnByIdempotencyKey in the other session")
	}},
	{name: "UnknownOrDeletedSessionIsNotFound", run: func(f *fixture) {
		ghost := &forge.Session{ID: "ses_ghost", Tenant: tenantA}
		f.is(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: f.newTurn(ghost, nil)}), forge.ErrNotFound, "unknown session")
		ses := f.newSession(tenantA)
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		f.is(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: f.newTurn(ses, nil)}), forge.ErrNotFound, "deleted session")
	}},
	{name: "DeleteSessionWithARunningTurnIsRefused", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.start(ses, nil, "first").turn
		f.is(f.s.DeleteSession(f.ctx, tenantA, ses.ID), forge.ErrTurnInProgress, "DeleteSession while a turn runs")
		eq(f, f.tip(ses), t1.ID, "the session is still there, tip unchanged")
		eq(f, f.getTurn(t1).Status, forge.TurnRunning, "the turn still runs")
		f.end(ses, t1)
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession once the turn ended")
		f.is(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: f.newTurn(ses, &t1.ID)}), forge.ErrNotFound, "BeginTurn in the deleted session")
	}},
	{name: "DeleteSessionRacingBeginTurnLeavesNoRunningTurn", run: func(f *fixture) {
		// Exactly one wins: the turn begins and the delete is refused, or
		// the session is deleted and the turn is refused. Never both.
		for round := range 20 {
			ses := f.newSession(tenantA)
			t := f.newTurn(ses, nil)
			start := make(chan struct{})
			var beginErr, deleteErr error
			var wg sync.WaitGroup
			wg.Go(func() { <-start; beginErr = f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t}) })
			wg.Go(func() { <-start; deleteErr = f.s.DeleteSession(f.ctx, tenantA, ses.ID) })
			close(start)
			wg.Wait()
			switch {
			case beginErr == nil && errors.Is(deleteErr, forge.ErrTurnInProgress):
				eq(f, f.getTurn(t).Status, forge.TurnRunning, fmt.Sprintf("round %d: the turn that won", round))
			case deleteErr == nil && errors.Is(beginErr, forge.ErrNotFound):
				_, err := f.s.GetSession(f.ctx, tenantA, ses.ID)
				f.is(err, forge.ErrNotFound, fmt.Sprintf("round %d: the deleted session", round))
			default:
				f.Fatalf("round %d: BeginTurn: %v, DeleteSession: %v; want exactly one to win", round, beginErr, deleteErr)
			}
		}
	}},
	{name: "RefusalsRank", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.start(ses, nil, "first").turn
		// A running turn wins over a moved tip (it is what moved it).
		b, nothingWritten := f.refusedBegin(ses, &t1.ID)
		b.ExpectTip = ptr("turn_elsewhere")
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrTurnInProgress, "BeginTurn while running, expecting another tip")
		nothingWritten("running turn and a moved tip")
		f.end(ses, t1)
		// An unknown previous turn wins over a moved tip.
		b, nothingWritten = f.refusedBegin(ses, ptr("turn_ghost"))
		b.ExpectTip = ptr("turn_elsewhere")
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrNotFound, "BeginTurn after an unknown turn, expecting another tip")
		nothingWritten("unknown previous turn and a moved tip")
		// A previous turn other than the tip is fine when it is one of the
		// session's turns (a branch).
		t2 := f.newTurn(ses, &t1.ID)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t2, ExpectTip: ptr(t1.ID)}), "BeginTurn after the tip")
		f.end(ses, t2)
		t3 := f.newTurn(ses, &t1.ID)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t3, ExpectTip: ptr(t2.ID)}), "BeginTurn branching from an older turn")
		eq(f, f.tip(ses), t3.ID, "tip after the branch")
		f.end(ses, t3)
		// And without ExpectTip.
		t4 := f.newTurn(ses, &t2.ID)
		t4.IdempotencyKey = "key-4"
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t4}), "BeginTurn with a key, no expected tip")
		eq(f, f.tip(ses), t4.ID, "tip")
	}},
	{name: "PreviousTurnMustBeInTheSession", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		b, nothingWritten := f.refusedBegin(ses, ptr("turn_ghost"))
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrNotFound, "BeginTurn after an unknown turn")
		nothingWritten("unknown previous turn")
		other := f.newSession(tenantA)
		elsewhere := f.start(other, nil, "elsewhere").turn
		b, nothingWritten = f.refusedBegin(ses, &elsewhere.ID)
		f.is(f.s.BeginTurn(f.ctx, b), forge.ErrNotFound, "BeginTurn after another session's turn")
		nothingWritten("previous turn in another session")
	}},
}

var commitTests = []test{
	{name: "ConcurrentCheckpointsLandEachOnItsOwn", run: func(f *fixture) {
		// Checkpoints (part rows alone) of many running turns at once, of
		// two tenants: a store may write them together (PostgreSQL groups
		// them), yet each lands or fails on its own fence and tenant.
		type streaming struct {
			ses   *forge.Session
			turn  *forge.Turn
			part  *forge.Part
			ended bool
		}
		var all []*streaming
		for i := range 12 {
			tenant := tenantA
			if i%2 == 1 {
				tenant = tenantB
			}
			ses := f.newSession(tenant)
			st := f.start(ses, nil, "hi")
			reply := f.message(st.turn, ses.MainThreadID, forge.RoleAssistant)
			reply.ParentID = ptr(st.msg.ID)
			part := f.textPart(reply, "", forge.StateStreaming)
			seq := f.seqs(ses, 2)
			f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenant, SessionID: ses.ID, TurnID: st.turn.ID,
				Messages: []*forge.Message{reply}, Parts: []*forge.Part{part},
				Events: []forge.Event{f.event(st.turn, seq[0], forge.EventMessageCreated, reply.ID, reply),
					f.event(st.turn, seq[1], forge.EventModelMessage, part.ID, part)}}), "Commit")
			all = append(all, &streaming{ses: ses, turn: st.turn, part: part})
		}
		for _, i := range []int{3, 8} { // these turns end: their checkpoints are fenced out
			f.end(all[i].ses, all[i].turn)
			all[i].ended = true
		}
		const rounds = 5
		var wg sync.WaitGroup
		errs := make([][]error, len(all))
		foreign := make([]error, len(all))
		for i, st := range all {
			errs[i] = make([]error, rounds)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					row := st.part.Clone()
					row.Text = fmt.Sprintf("so far %d", r)
					errs[i][r] = f.s.Commit(f.ctx, &forge.Batch{Tenant: st.ses.Tenant, SessionID: st.ses.ID,
						TurnID: st.turn.ID, Parts: []*forge.Part{row}})
				}
				// The same checkpoint under the other tenant finds no turn.
				other := tenantA
				if st.ses.Tenant == tenantA {
					other = tenantB
				}
				row := st.part.Clone()
				row.Text = "foreign"
				foreign[i] = f.s.Commit(f.ctx, &forge.Batch{Tenant: other, SessionID: st.ses.ID, TurnID: st.turn.ID,
					Parts: []*forge.Part{row}})
			}()
		}
		wg.Wait()
		for i, st := range all {
			for r, err := range errs[i] {
				if st.ended {
					f.is(err, forge.ErrTurnEnded, fmt.Sprintf("checkpoint %d of ended turn %d", r, i))
				} else {
					f.ok(err, fmt.Sprintf("checkpoint %d of turn %d", r, i))
				}
			}
			if foreign[i] == nil {
				f.Fatalf("turn %d: a checkpoint under another tenant landed", i)
			}
			want := fmt.Sprintf("so far %d", rounds-1)
			if st.ended {
				want = ""
			}
			ms, _ := f.branch(st.ses, st.turn.ID, st.ses.MainThreadID, 10, "")
			got := "missing"
			for _, m := range ms {
				for _, p := range m.Parts {
					if p.ID == st.part.ID {
						got = p.Text
					}
				}
			}
			eq(f, got, want, fmt.Sprintf("turn %d's part text", i))
		}
	}},
	{name: "WritesRowsAndUpsertsParts", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		t := st.turn
		// A model call starts: an assistant envelope and an empty streaming part.
		reply := f.message(t, ses.MainThreadID, forge.RoleAssistant)
		reply.ParentID = ptr(st.msg.ID)
		reply.Model = "openai/gpt-4.1-mini"
		part := f.textPart(reply, "", forge.StateStreaming)
		seq := f.seqs(ses, 2)
		e1 := f.event(t, seq[0], forge.EventMessageCreated, reply.ID, reply)
		e2 := f.event(t, seq[1], forge.EventModelMessage, part.ID, part)
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
			Messages: []*forge.Message{reply}, Parts: []*forge.Part{part}, Events: []forge.Event{e1, e2}}), "Commit 1")

		// It ends: the part is rewritten whole, the envelope gets finish and
		// usage, the turn its counters.
		part.Text, part.State, part.UpdatedAt = "Order 42 shipped.", forge.StateCompleted, f.now()
		part.Provider = json.RawMessage(`{"signature": "abc"}`)
		reply.Finish = forge.FinishStop
		reply.Usage = &forge.Usage{InputTokens: 12, OutputTokens: 5, Cost: 0.001}
		t.Iterations = 1
		t.Usage = *reply.Usage
		seq = f.seqs(ses, 2)
		e3 := f.event(t, seq[0], forge.EventModelMessage, part.ID, part)
		e4 := f.event(t, seq[1], forge.EventMessageUpdated, reply.ID, reply)
		t.LastSeq = seq[1]
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: t,
			Messages: []*forge.Message{reply}, Parts: []*forge.Part{part}, Events: []forge.Event{e3, e4}}), "Commit 2")

		reply.Parts = []*forge.Part{part}
		ms, err := f.s.TurnMessages(f.ctx, tenantA, t.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg, reply}, "turn messages")
		f.sameJSON(json.RawMessage(ms[1].Parts[0].Provider), part.Provider, "part Provider")
		f.sameJSON(f.getTurn(t), t, "turn")
		f.sameJSON(f.events(ses, forge.EventQuery{}), append(st.events, e1, e2, e3, e4), "events")
	}},
	{name: "TerminalWriteFencesTheTurn", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		t := st.turn
		reply := f.message(t, ses.MainThreadID, forge.RoleAssistant, "partial")
		reply.Parts[0].State = forge.StateStreaming
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
			Messages: []*forge.Message{reply}, Parts: reply.Parts}), "Commit part")
		done := f.end(ses, t)
		final := f.getTurn(t)
		eq(f, final.Status, forge.TurnDone, "Status")
		if final.EndedAt == nil {
			f.Fatal("EndedAt not stored")
		}

		// A late executor's batch loses and writes nothing.
		late := reply.Parts[0].Clone()
		late.Text, late.State = "partial and late", forge.StateCompleted
		seq := f.seqs(ses, 2)
		err := f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
			Messages: []*forge.Message{f.message(t, ses.MainThreadID, forge.RoleAssistant)},
			Parts:    []*forge.Part{late}, Events: []forge.Event{f.event(t, seq[0], forge.EventModelMessage, late.ID, late)},
			Snapshot: &forge.Snapshot{ContextTokens: 1}})
		f.is(err, forge.ErrTurnEnded, "Commit after the terminal write")

		// So does a second terminal write (a cancel racing the end).
		cancelled := *t
		cancelled.Status, cancelled.CancelReason = forge.TurnCancelled, ptr(forge.CancelClient)
		err = f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: &cancelled,
			Events: []forge.Event{f.event(t, seq[1], forge.EventTurnDone, t.ID, cancelled)}})
		f.is(err, forge.ErrTurnEnded, "second terminal Commit")
		f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID}),
			forge.ErrTurnEnded, "empty Commit after the end")

		f.sameJSON(f.getTurn(t), final, "turn after the losing writes")
		ms, err := f.s.TurnMessages(f.ctx, tenantA, t.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg, reply}, "messages after the losing writes")
		f.sameJSON(f.events(ses, forge.EventQuery{}), append(st.events, done), "events after the losing writes")
		_, err = f.s.GetSnapshot(f.ctx, tenantA, t.ID)
		f.is(err, forge.ErrNotFound, "snapshot of a losing write")
	}},
	{name: "FirstOfConcurrentTerminalWritesWins", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t := f.start(ses, nil, "hi").turn
		const n = 8
		seq := f.seqs(ses, n)
		batches := make([]*forge.Batch, n)
		for i := range batches {
			c := *t
			c.Status = forge.TurnErrored
			c.Error = &forge.TurnError{Code: forge.CodeInternal, Message: fmt.Sprintf("writer %d", i)}
			c.EndedAt = ptr(f.now())
			c.LastSeq = seq[i]
			batches[i] = &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: &c,
				Events: []forge.Event{f.event(t, seq[i], forge.EventTurnDone, t.ID, c)}}
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range batches {
			wg.Go(func() { errs[i] = f.s.Commit(f.ctx, batches[i]) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				f.Fatalf("writers %d and %d both won", winner, i)
			case err == nil:
				winner = i
			default:
				f.is(err, forge.ErrTurnEnded, fmt.Sprintf("writer %d", i))
			}
		}
		if winner < 0 {
			f.Fatal("no terminal write won")
		}
		eq(f, f.getTurn(t).Error.Message, fmt.Sprintf("writer %d", winner), "stored error")
		evs := f.events(ses, forge.EventQuery{After: seq[0] - 1})
		f.sameJSON(seqsOf(evs), []int64{seq[winner]}, "turn.done events stored")
	}},
	{name: "CancelledTurnKeepsReasonAndMessage", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t := f.start(ses, nil, "hi").turn
		seq := f.seqs(ses, 1)
		c := *t
		c.Status, c.CancelReason, c.CancelMessage = forge.TurnCancelled, ptr(forge.CancelClient), ptr("changed my mind")
		c.EndedAt = ptr(f.now())
		c.LastSeq = seq[0]
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: &c,
			Events: []forge.Event{f.event(t, seq[0], forge.EventTurnDone, t.ID, c)}}), "terminal Commit")
		f.sameJSON(f.getTurn(t), &c, "cancelled turn")
	}},
	{name: "ConcurrentWritesFailAlone", run: func(f *fixture) {
		// A store may commit concurrent writes together (group commit):
		// a write that fails, before or after writing rows, leaves nothing
		// behind, and the writes beside it all land.
		const n = 30
		type call struct {
			ses   *forge.Session
			st    started
			reply *forge.Message
			write func() error
			want  error
			check func(string)
			// events is the turn's log when the call wrote nothing.
			events []forge.Event
		}
		calls := make([]*call, n)
		for i := range calls {
			ses := f.newSession(tenantA)
			c := &call{ses: ses, st: f.start(ses, nil, "hi")}
			t := c.st.turn
			c.reply = f.message(t, ses.MainThreadID, forge.RoleAssistant, fmt.Sprint("reply ", i))
			seq := f.seqs(ses, 1)[0]
			switch i % 4 {
			case 1: // fenced: the turn already ended
				done := f.end(ses, t)
				c.want, c.events = forge.ErrTurnEnded, append(c.st.events, done)
			case 2: // fails late: its event reuses a seq, after its rows
				seq = c.st.events[0].Seq
				c.want, c.events = forge.ErrConflict, c.st.events
			case 3: // a second running turn is refused
				b, check := f.refusedBegin(ses, &t.ID)
				c.write = func() error { return f.s.BeginTurn(f.ctx, b) }
				c.want, c.check = forge.ErrTurnInProgress, check
			}
			if c.write == nil {
				b := &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
					Messages: []*forge.Message{c.reply}, Parts: c.reply.Parts,
					Events: []forge.Event{f.event(t, seq, forge.EventModelMessage, c.reply.ID, c.reply)}}
				c.write = func() error { return f.s.Commit(f.ctx, b) }
			}
			calls[i] = c
		}
		before := make([]*forge.Turn, n)
		for i, c := range calls {
			before[i] = f.getTurn(c.st.turn)
		}
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() {
				<-start
				errs[i] = c.write()
			})
		}
		close(start)
		wg.Wait()
		for i, c := range calls {
			what := fmt.Sprintf("call %d", i)
			if c.want == nil {
				f.ok(errs[i], what)
			} else {
				f.is(errs[i], c.want, what)
			}
			ms, err := f.s.TurnMessages(f.ctx, tenantA, c.st.turn.ID)
			f.ok(err, what+": TurnMessages")
			evs := f.events(c.ses, forge.EventQuery{TurnID: c.st.turn.ID})
			switch {
			case c.want == nil:
				f.sameJSON(ms, []*forge.Message{c.st.msg, c.reply}, what+": messages")
				eq(f, len(evs), len(c.st.events)+1, what+": events")
				eq(f, f.getTurn(c.st.turn).LastSeq, evs[len(evs)-1].Seq, what+": LastSeq")
			case c.check != nil:
				c.check(what)
				f.sameJSON(ms, []*forge.Message{c.st.msg}, what+": messages")
				f.sameJSON(f.getTurn(c.st.turn), before[i], what+": running turn")
			default:
				f.sameJSON(ms, []*forge.Message{c.st.msg}, what+": messages")
				f.sameJSON(f.getTurn(c.st.turn), before[i], what+": turn")
				f.sameJSON(evs, c.events, what+": events")
			}
		}
	}},
	{name: "LargeBatch", run: func(f *fixture) {
		// Many rows in one batch (a store may split them into several
		// statements): all land, or, with one bad row, none.
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		t := st.turn
		const n = 75
		build := func(seqs []int64) (*forge.Message, *forge.Batch) {
			m := f.message(t, ses.MainThreadID, forge.RoleAssistant)
			var evs []forge.Event
			for i := range n {
				p := f.textPart(m, fmt.Sprint("part ", i), forge.StateCompleted)
				m.Parts = append(m.Parts, p)
				evs = append(evs, f.event(t, seqs[i], forge.EventModelMessage, p.ID, p))
			}
			return m, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
				Messages: []*forge.Message{m}, Parts: m.Parts, Events: evs}
		}
		seqs := f.seqs(ses, n)
		bad := append([]int64{}, seqs...)
		bad[n-3] = st.events[0].Seq
		_, b := build(bad)
		f.is(f.s.Commit(f.ctx, b), forge.ErrConflict, "Commit with a used seq among many rows")
		ms, err := f.s.TurnMessages(f.ctx, tenantA, t.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg}, "messages after the failed batch")
		f.sameJSON(f.events(ses, forge.EventQuery{}), st.events, "events after the failed batch")

		m, b := build(seqs)
		f.ok(f.s.Commit(f.ctx, b), "Commit of many rows")
		ms, err = f.s.TurnMessages(f.ctx, tenantA, t.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg, m}, "messages")
		f.sameJSON(f.events(ses, forge.EventQuery{}), append(st.events, b.Events...), "events")
	}},
	{name: "RepeatedRowsInOneBatchLastWins", run: func(f *fixture) {
		// A batch may carry a part (or envelope) twice, say a checkpoint
		// and its end: written in order, the last one wins.
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		t := st.turn
		reply := f.message(t, ses.MainThreadID, forge.RoleAssistant, "partial")
		reply.Parts[0].State = forge.StateStreaming
		first := *reply
		final := reply.Parts[0].Clone()
		final.Text, final.State = "whole answer", forge.StateCompleted
		reply.Finish = forge.FinishStop
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
			Messages: []*forge.Message{&first, reply}, Parts: []*forge.Part{reply.Parts[0], final}}), "Commit")
		reply.Parts = []*forge.Part{final}
		ms, err := f.s.TurnMessages(f.ctx, tenantA, t.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg, reply}, "messages")
	}},
	{name: "UnknownTurnIsNotFound", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t := f.start(ses, nil, "hi").turn
		f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: "turn_ghost"}),
			forge.ErrNotFound, "Commit for an unknown turn")
		other := f.newSession(tenantA)
		f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: other.ID, TurnID: t.ID}),
			forge.ErrNotFound, "Commit naming the wrong session")
	}},
	{name: "DuplicateSeqFailsWholeBatch", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		t := st.turn
		reply := f.message(t, ses.MainThreadID, forge.RoleAssistant)
		part := f.textPart(reply, "x", forge.StateCompleted)
		used := st.events[0].Seq
		err := f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
			Messages: []*forge.Message{reply}, Parts: []*forge.Part{part},
			Events: []forge.Event{f.event(t, used, forge.EventModelMessage, part.ID, part)}})
		f.is(err, forge.ErrConflict, "Commit reusing a seq")
		ms, err := f.s.TurnMessages(f.ctx, tenantA, t.ID)
		f.ok(err, "TurnMessages")
		f.sameJSON(ms, []*forge.Message{st.msg}, "messages after the failed batch")
		f.sameJSON(f.events(ses, forge.EventQuery{}), st.events, "events after the failed batch")
	}},
	{name: "DeltasAreNotStored", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		seq := f.seqs(ses, 1)[0]
		delta := f.event(st.turn, seq, forge.EventModelDelta, "prt_x", forge.DeltaData{Delta: "Hel"})
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: st.turn.ID,
			Events: []forge.Event{delta}}), "Commit with a delta")
		f.sameJSON(f.events(ses, forge.EventQuery{}), st.events, "events")
	}},
	{name: "SnapshotRoundTrips", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t := f.start(ses, nil, "hi").turn
		_, err := f.s.GetSnapshot(f.ctx, tenantA, t.ID)
		f.is(err, forge.ErrNotFound, "GetSnapshot before any")
		snap := &forge.Snapshot{
			TurnID: t.ID,
			Threads: map[string]forge.ThreadState{
				ses.MainThreadID: {ID: ses.MainThreadID, Agent: "support", State: forge.ThreadUserInputRequired,
					OpenCall: []string{"call_1"}},
				"thr_child": {ID: "thr_child", ParentID: ptr(ses.MainThreadID), Agent: "researcher", State: forge.ThreadFinished},
			},
			ContextTokens: 1234,
			Capabilities:  map[string]json.RawMessage{"todo": json.RawMessage(`{"items": ["a"]}`)},
			Extra:         map[string]json.RawMessage{"mcp": json.RawMessage(`{"everything": {"protocol": "2025-06-18"}}`)},
		}
		t.Status, t.EndedAt = forge.TurnDone, ptr(f.now())
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: t, Snapshot: snap}),
			"Commit with snapshot")
		got, err := f.s.GetSnapshot(f.ctx, tenantA, t.ID)
		f.ok(err, "GetSnapshot")
		f.sameJSON(got, snap, "snapshot")
	}},
	{name: "SnapshotOfTheLastBatchThatCarriedOne", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t := f.start(ses, nil, "hi").turn
		for _, n := range []int64{1, 2} {
			f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
				Snapshot: &forge.Snapshot{TurnID: t.ID, ContextTokens: n}}), "checkpoint with a snapshot")
			got, err := f.s.GetSnapshot(f.ctx, tenantA, t.ID)
			f.ok(err, "GetSnapshot")
			f.sameJSON(got, &forge.Snapshot{TurnID: t.ID, ContextTokens: n}, "snapshot of the checkpoint")
		}
		// A batch without one (here the terminal write) keeps the last.
		t.Status, t.EndedAt = forge.TurnDone, ptr(f.now())
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: t}), "terminal Commit")
		got, err := f.s.GetSnapshot(f.ctx, tenantA, t.ID)
		f.ok(err, "GetSnapshot after the end")
		f.sameJSON(got, &forge.Snapshot{TurnID: t.ID, ContextTokens: 2}, "snapshot after a batch without one")
	}},
}

var turnTests = []test{
	{name: "ListPaginatesOldestFirst", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		var ids []string
		var prev *string
		for i := range 5 {
			st := f.start(ses, prev, fmt.Sprint("message ", i))
			f.end(ses, st.turn)
			ids = append(ids, st.turn.ID)
			prev = &st.turn.ID
		}
		list := func(o forge.ListOptions) ([]*forge.Turn, string, error) {
			return f.s.ListTurns(f.ctx, tenantA, ses.ID, o)
		}
		id := func(t *forge.Turn) string { return t.ID }
		f.sameJSON(pages(f, 2, list, id), [][]string{ids[0:2], ids[2:4], ids[4:]}, "pages of 2")
		f.sameJSON(pages(f, 5, list, id), [][]string{ids}, "one full page")
		f.sameJSON(pages(f, 0, list, id), [][]string{ids}, "default limit")
		_, _, err := f.s.ListTurns(f.ctx, tenantA, "ses_ghost", forge.ListOptions{})
		f.is(err, forge.ErrNotFound, "ListTurns of an unknown session")
	}},
	{name: "RunningTurnsSpansTenants", run: func(f *fixture) {
		a := f.start(f.newSession(tenantA), nil, "a").turn
		b := f.start(f.newSession(tenantB), nil, "b").turn
		sesDone := f.newSession(tenantA)
		f.end(sesDone, f.start(sesDone, nil, "c").turn)
		got, err := f.s.RunningTurns(f.ctx)
		f.ok(err, "RunningTurns")
		f.sameJSON(sorted(idsOf(got, func(t *forge.Turn) string { return t.ID })...), sorted(a.ID, b.ID), "running turns")
		for _, t := range got {
			want := map[string]string{a.ID: tenantA, b.ID: tenantB}[t.ID]
			eq(f, t.Tenant, want, "Tenant of "+t.ID)
			eq(f, t.Status, forge.TurnRunning, "Status")
		}
	}},
	{name: "GetTurnByID", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		first := f.start(ses, nil, "one").turn
		f.end(ses, first)
		second := f.start(ses, &first.ID, "two").turn
		for _, want := range []*forge.Turn{first, second} {
			got, err := f.s.GetTurnByID(f.ctx, tenantA, want.ID)
			f.ok(err, "GetTurnByID")
			f.sameJSON(got, f.getTurn(want), "GetTurnByID is GetTurn")
			eq(f, got.Tenant, tenantA, "Tenant")
		}
		_, err := f.s.GetTurnByID(f.ctx, tenantA, "turn_ghost")
		f.is(err, forge.ErrNotFound, "GetTurnByID unknown")
		_, err = f.s.GetTurnByID(f.ctx, tenantB, first.ID)
		f.is(err, forge.ErrNotFound, "GetTurnByID of another tenant's turn")
		f.end(ses, second)
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		_, err = f.s.GetTurnByID(f.ctx, tenantA, first.ID)
		f.is(err, forge.ErrNotFound, "GetTurnByID in a deleted session")
	}},
	{name: "GetTurnUnknownIsNotFound", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		_, err := f.s.GetTurn(f.ctx, tenantA, ses.ID, "turn_ghost")
		f.is(err, forge.ErrNotFound, "GetTurn unknown")
		t := f.start(ses, nil, "hi").turn
		other := f.newSession(tenantA)
		_, err = f.s.GetTurn(f.ctx, tenantA, other.ID, t.ID)
		f.is(err, forge.ErrNotFound, "GetTurn through the wrong session")
	}},
}
