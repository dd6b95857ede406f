package storetest

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// tree is a session with a fork: A <- B and A <- C, then a new root D.
type tree struct {
	ses                *forge.Session
	a, b, c, d         *forge.Turn
	a1, a2, a3, b1, b2 *forge.Message
	c1, d1             *forge.Message
}

const childThread = "thr_child"

func (f *fixture) buildTree() *tree {
	f.Helper()
	tr := &tree{ses: f.newSession(tenantA)}
	ses := tr.ses
	main := ses.MainThreadID

	// A: the user asks, the assistant calls a subagent whose child thread
	// writes a3; the assistant's parts arrive out of id order.
	sa := f.start(ses, nil, "question")
	tr.a, tr.a1 = sa.turn, sa.msg
	tr.a2 = f.message(tr.a, main, forge.RoleAssistant)
	p1 := f.textPart(tr.a2, "Let me check.", forge.StateCompleted)
	p2 := f.textPart(tr.a2, "", forge.StateCompleted)
	p2.Type, p2.Text, p2.CallID, p2.Tool = forge.PartTool, "", "call_1", "researcher"
	p2.Arguments, p2.Output = json.RawMessage(`{"q": "order 42"}`), ptr("shipped")
	p3 := f.textPart(tr.a2, "Done.", forge.StateCompleted)
	tr.a3 = f.message(tr.a, childThread, forge.RoleAssistant, "child says shipped")
	f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: tr.a.ID,
		Messages: []*forge.Message{tr.a2, tr.a3},
		Parts:    []*forge.Part{p3, tr.a3.Parts[0], p1, p2}}), "Commit A")
	tr.a2.Parts = []*forge.Part{p1, p2, p3}
	f.end(ses, tr.a)

	sb := f.start(ses, &tr.a.ID, "follow-up on B")
	tr.b, tr.b1 = sb.turn, sb.msg
	tr.b2 = f.message(tr.b, main, forge.RoleAssistant, "answer on B")
	f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: tr.b.ID,
		Messages: []*forge.Message{tr.b2}, Parts: tr.b2.Parts}), "Commit B")
	f.end(ses, tr.b)

	sc := f.start(ses, &tr.a.ID, "fork from A")
	tr.c, tr.c1 = sc.turn, sc.msg
	f.end(ses, tr.c)

	sd := f.start(ses, nil, "new root")
	tr.d, tr.d1 = sd.turn, sd.msg
	f.end(ses, tr.d)
	return tr
}

func (f *fixture) branchPages(ses *forge.Session, tip, thread string, limit int) [][]string {
	f.Helper()
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.Message, string, error) {
		return f.s.ListMessages(f.ctx, ses.Tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: tip,
			ThreadID: thread, ListOptions: o})
	}, func(m *forge.Message) string { return m.ID })
}

var messageTests = []test{
	{name: "BranchFollowsTheTurnChain", run: func(f *fixture) {
		tr := f.buildTree()
		f.sameJSON(f.mustBranch(tr.ses, tr.c.ID), []*forge.Message{tr.a1, tr.a2, tr.a3, tr.c1}, "branch ending at C")
		f.sameJSON(f.mustBranch(tr.ses, tr.b.ID), []*forge.Message{tr.a1, tr.a2, tr.a3, tr.b1, tr.b2}, "branch ending at B")
		f.sameJSON(f.mustBranch(tr.ses, tr.a.ID), []*forge.Message{tr.a1, tr.a2, tr.a3}, "branch ending at A")
		f.sameJSON(f.mustBranch(tr.ses, tr.d.ID), []*forge.Message{tr.d1}, "new root")
		eq(f, f.tip(tr.ses), tr.d.ID, "tip")
	}},
	{name: "PartsComeInIDOrder", run: func(f *fixture) {
		tr := f.buildTree()
		ms := f.mustBranch(tr.ses, tr.a.ID)
		f.sameJSON(idsOf(ms[1].Parts, func(p *forge.Part) string { return p.ID }),
			idsOf(tr.a2.Parts, func(p *forge.Part) string { return p.ID }), "part order")
	}},
	{name: "ThreadFilter", run: func(f *fixture) {
		tr := f.buildTree()
		f.sameJSON(msgIDs(first(f.branch(tr.ses, tr.c.ID, childThread, 0, ""))), []string{tr.a3.ID}, "child thread")
		f.sameJSON(msgIDs(first(f.branch(tr.ses, tr.c.ID, tr.ses.MainThreadID, 0, ""))),
			[]string{tr.a1.ID, tr.a2.ID, tr.c1.ID}, "main thread")
		f.sameJSON(f.branchPages(tr.ses, tr.b.ID, tr.ses.MainThreadID, 2),
			[][]string{{tr.a1.ID, tr.a2.ID}, {tr.b1.ID, tr.b2.ID}}, "main thread pages")
	}},
	{name: "Paginates", run: func(f *fixture) {
		tr := f.buildTree()
		f.sameJSON(f.branchPages(tr.ses, tr.b.ID, "", 2),
			[][]string{{tr.a1.ID, tr.a2.ID}, {tr.a3.ID, tr.b1.ID}, {tr.b2.ID}}, "pages of 2 to B")
		f.sameJSON(f.branchPages(tr.ses, tr.c.ID, "", 2),
			[][]string{{tr.a1.ID, tr.a2.ID}, {tr.a3.ID, tr.c1.ID}}, "pages of 2 to C")
		ms, next := f.branch(tr.ses, tr.b.ID, "", 3, "")
		f.sameJSON(ms, []*forge.Message{tr.a1, tr.a2, tr.a3}, "first page with parts")
		ms, _ = f.branch(tr.ses, tr.b.ID, "", 3, next)
		f.sameJSON(ms, []*forge.Message{tr.b1, tr.b2}, "second page with parts")
	}},
	{name: "EmptyAndUnknownTips", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		ms, next := f.branch(ses, "", "", 0, "")
		eq(f, len(ms), 0, "messages without a tip")
		eq(f, next, "", "next cursor")
		_, _, err := f.s.ListMessages(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: "turn_ghost"})
		f.is(err, forge.ErrNotFound, "ListMessages from an unknown tip")
		_, _, err = f.s.ListMessages(f.ctx, tenantA, forge.MessageQuery{SessionID: "ses_ghost"})
		f.is(err, forge.ErrNotFound, "ListMessages of an unknown session")
	}},
	{name: "TurnMessages", run: func(f *fixture) {
		tr := f.buildTree()
		ms, err := f.s.TurnMessages(f.ctx, tenantA, tr.a.ID)
		f.ok(err, "TurnMessages A")
		f.sameJSON(ms, []*forge.Message{tr.a1, tr.a2, tr.a3}, "A's messages")
		ms, err = f.s.TurnMessages(f.ctx, tenantA, tr.b.ID)
		f.ok(err, "TurnMessages B")
		f.sameJSON(ms, []*forge.Message{tr.b1, tr.b2}, "B's messages")
		_, err = f.s.TurnMessages(f.ctx, tenantA, "turn_ghost")
		f.is(err, forge.ErrNotFound, "TurnMessages unknown")
		ses := f.newSession(tenantA)
		bare := f.newTurn(ses, nil)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: bare}), "BeginTurn without messages")
		ms, err = f.s.TurnMessages(f.ctx, tenantA, bare.ID)
		f.ok(err, "TurnMessages of a turn without messages")
		eq(f, len(ms), 0, "messages")
	}},
}

func first[A, B any](a A, _ B) A { return a }

var eventTests = []test{
	{name: "SeqOrderAndFilters", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		s1 := f.start(ses, nil, "one") // seqs 1, 2
		f.end(ses, s1.turn)            // 3
		t2 := f.newTurn(ses, &s1.turn.ID)
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t2}), "BeginTurn 2")
		seq := f.seqs(ses, 5) // 4..8; 4 and 6 stay unused, as after a crash
		eq(f, seq[0], int64(4), "first reserved seq")
		// Written out of order within the batch: the log is in seq order.
		var batch []forge.Event
		for _, s := range []int64{8, 5, 7} {
			batch = append(batch, f.event(t2, s, forge.EventStepStarted, t2.ID, map[string]int64{"step": s}))
		}
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t2.ID, Events: batch}), "Commit")

		all := f.events(ses, forge.EventQuery{})
		f.sameJSON(seqsOf(all), []int64{1, 2, 3, 5, 7, 8}, "all")
		f.sameJSON(all[3:], []forge.Event{batch[1], batch[2], batch[0]}, "stored events")
		for _, c := range []struct {
			name string
			q    forge.EventQuery
			want []int64
		}{
			{"turn 1", forge.EventQuery{TurnID: s1.turn.ID}, []int64{1, 2, 3}},
			{"turn 2", forge.EventQuery{TurnID: t2.ID}, []int64{5, 7, 8}},
			{"after 3", forge.EventQuery{After: 3}, []int64{5, 7, 8}},
			{"after an unstored seq", forge.EventQuery{After: 6}, []int64{7, 8}},
			{"before 7", forge.EventQuery{Before: 7}, []int64{1, 2, 3, 5}},
			{"after 2 before 8 of turn 2", forge.EventQuery{After: 2, Before: 8, TurnID: t2.ID}, []int64{5, 7}},
			{"limit 2", forge.EventQuery{Limit: 2}, []int64{1, 2}},
			{"limit 2 after 2", forge.EventQuery{Limit: 2, After: 2}, []int64{3, 5}},
			{"after the end", forge.EventQuery{After: 8}, []int64{}},
		} {
			f.sameJSON(seqsOf(f.events(ses, c.q)), c.want, c.name)
		}
	}},
	{name: "EnvelopeRoundTrips", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		st := f.start(ses, nil, "hi")
		seq := f.seqs(ses, 1)[0]
		e := f.event(st.turn, seq, forge.EventMCPInitialized, "everything",
			map[string]any{"server": "everything", "tools": []string{"echo"}})
		e.ThreadID = nil
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: st.turn.ID,
			Events: []forge.Event{e}}), "Commit")
		got := f.events(ses, forge.EventQuery{After: seq - 1})
		f.sameJSON(got, []forge.Event{e}, "event")
	}},
	{name: "UnknownSessionIsNotFound", run: func(f *fixture) {
		_, err := f.s.ListEvents(f.ctx, tenantA, forge.EventQuery{SessionID: "ses_ghost"})
		f.is(err, forge.ErrNotFound, "ListEvents")
	}},
}
