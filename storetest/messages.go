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

// longTree is a session of 10,000 messages on one chain of 200 turns of 50
// (every tenth message on a child thread), then a fork F1 <- F2 from the
// 100th turn, G chained from the last turn of the chain once the tip had
// moved to F2 (so G forks too, from a turn that is no longer the tip), H
// chained from G, and a new root R.
type longTree struct {
	ses        *forge.Session
	chain      []*forge.Turn
	f2, g, h   *forge.Turn
	chainMsgs  []string // the chain's messages, in order
	fMsgs      []string // F1's and F2's
	gMsgs      []string // G's and H's
	mainThread []string // the chain's messages on the main thread
}

const longTurns, perLongTurn = 200, 50

func (f *fixture) buildLongTree() *longTree {
	f.Helper()
	lt := &longTree{ses: f.newSession(tenantA)}
	ses := lt.ses
	// turn begins a done turn chained from prev with n messages.
	turn := func(prev *forge.Turn, n int) (*forge.Turn, []string) {
		var prevID *string
		if prev != nil {
			prevID = &prev.ID
		}
		t := f.newTurn(ses, prevID)
		t.Status = forge.TurnDone
		var msgs []*forge.Message
		var ids []string
		for i := range n {
			thread, role := ses.MainThreadID, forge.RoleAssistant
			switch {
			case i == 0:
				role = forge.RoleUser
			case i%10 == 5:
				thread = childThread
			}
			m := f.message(t, thread, role, "text")
			msgs = append(msgs, m)
			ids = append(ids, m.ID)
		}
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t, Messages: msgs}), "BeginTurn")
		return t, ids
	}
	var prev *forge.Turn
	for range longTurns {
		t, ids := turn(prev, perLongTurn)
		lt.chain = append(lt.chain, t)
		lt.chainMsgs = append(lt.chainMsgs, ids...)
		prev = t
	}
	for i, id := range lt.chainMsgs {
		if i%perLongTurn%10 != 5 {
			lt.mainThread = append(lt.mainThread, id)
		}
	}
	f1, ids := turn(lt.chain[99], 30)
	lt.fMsgs = append(lt.fMsgs, ids...)
	lt.f2, ids = turn(f1, 30)
	lt.fMsgs = append(lt.fMsgs, ids...)
	lt.g, ids = turn(lt.chain[longTurns-1], 20)
	lt.gMsgs = append(lt.gMsgs, ids...)
	lt.h, ids = turn(lt.g, 20)
	lt.gMsgs = append(lt.gMsgs, ids...)
	turn(nil, 3)
	return lt
}

func flatten(pages [][]string) []string {
	out := []string{}
	for _, p := range pages {
		out = append(out, p...)
	}
	return out
}

func concat(lists ...[]string) []string {
	out := []string{}
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var longBranchTests = []test{
	{name: "LongBranchPagesAndCursorsAcrossForks", run: func(f *fixture) {
		lt := f.buildLongTree()
		ses, last := lt.ses, lt.chain[longTurns-1]
		// The largest page holds the whole 10,000-message chain; exactly
		// full, it is the last.
		ms, next := f.branch(ses, last.ID, "", storeMaxLimit, "")
		f.sameJSON(msgIDs(ms), lt.chainMsgs, "the chain in one page of 10000")
		eq(f, next, "", "cursor after a full last page")
		eq(f, len(ms[0].Parts), 1, "parts of the first message")
		eq(f, ms[len(ms)-1].Parts[0].Text, "text", "part of the last message")
		// Default pages: 100 of 100.
		pp := f.branchPages(ses, last.ID, "", 0)
		eq(f, len(pp), 100, "default pages of the chain")
		f.sameJSON(flatten(pp), lt.chainMsgs, "the chain in default pages")
		// A branch longer than the largest page: a second page.
		want := concat(lt.chainMsgs, lt.gMsgs)
		ms, next = f.branch(ses, lt.h.ID, "", storeMaxLimit, "")
		f.sameJSON(msgIDs(ms), want[:storeMaxLimit], "first page of 10000 to H")
		ms, next = f.branch(ses, lt.h.ID, "", storeMaxLimit, next)
		f.sameJSON(msgIDs(ms), want[storeMaxLimit:], "second page of 10000 to H")
		eq(f, next, "", "cursor after the last page")
		// Pages that do not divide the branch, to H and to F2.
		f.sameJSON(flatten(f.branchPages(ses, lt.h.ID, "", 777)), want, "pages of 777 to H")
		f.sameJSON(flatten(f.branchPages(ses, lt.f2.ID, "", 0)), concat(lt.chainMsgs[:100*perLongTurn], lt.fMsgs),
			"default pages to F2")
		// The thread filter over the long branch.
		f.sameJSON(flatten(f.branchPages(ses, last.ID, ses.MainThreadID, 1000)), lt.mainThread, "main thread pages")

		// Cursors across forks.
		fork := 100 * perLongTurn // F1 chains from the turn that ends here
		read := func(tip, cursor string) []string {
			ms, _ := f.branch(ses, tip, "", storeMaxLimit, cursor)
			return msgIDs(ms)
		}
		// A cursor in the part shared with F2's branch continues there
		// along F2's branch.
		at := lt.chainMsgs[fork-1234]
		f.sameJSON(read(lt.f2.ID, at), concat(lt.chainMsgs[fork-1233:fork], lt.fMsgs), "F2's branch after a shared cursor")
		f.sameJSON(read(lt.h.ID, at), concat(lt.chainMsgs[fork-1233:], lt.gMsgs), "H's branch after the same cursor")
		// The last message before the fork as the cursor: the forked turns
		// follow.
		f.sameJSON(read(lt.f2.ID, lt.chainMsgs[fork-1]), lt.fMsgs, "F2's branch after the fork point")
		// A cursor from past the fork on another branch: the cursor is a
		// position in id order, so what follows it on this branch (F1 and
		// F2 are newer than the whole chain).
		f.sameJSON(read(lt.f2.ID, lt.chainMsgs[fork+10]), lt.fMsgs, "F2's branch after a cursor of the chain past the fork")
		f.sameJSON(read(lt.chain[longTurns-1].ID, lt.fMsgs[3]), []string{}, "the chain after a cursor of F1")
		f.sameJSON(read(lt.h.ID, lt.fMsgs[3]), lt.gMsgs, "H's branch after a cursor of F1")
		// Branches ending inside the chain.
		f.sameJSON(read(lt.chain[9].ID, lt.chainMsgs[99]), lt.chainMsgs[100:10*perLongTurn], "the branch ending at the 10th turn")
		f.sameJSON(read(lt.chain[0].ID, ""), lt.chainMsgs[:perLongTurn], "the branch of the first turn")
	}},
	{name: "LatestCompactionIgnoresSiblingBranches", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		s1 := f.start(ses, nil, "u1")
		f.end(ses, s1.turn)
		s2 := f.start(ses, &s1.turn.ID, "u2")
		c2, sum2 := f.compactIn(ses, s2.turn, s2.msg, s2.msg.ID, forge.FinishStop)
		f.end(ses, s2.turn)
		s3 := f.start(ses, &s2.turn.ID, "u3")
		f.end(ses, s3.turn)
		// A newer compaction on a fork from T1 is not T3's.
		s4 := f.start(ses, &s1.turn.ID, "u4")
		c4, sum4 := f.compactIn(ses, s4.turn, s4.msg, s4.msg.ID, forge.FinishStop)
		f.end(ses, s4.turn)
		f.sameJSON(f.latest(ses, s3.turn.ID, ses.MainThreadID),
			&forge.CompactionBoundary{RequestID: c2.ID, SummaryID: sum2.ID, TailStartID: s2.msg.ID}, "T3's boundary")
		f.sameJSON(f.latest(ses, s4.turn.ID, ses.MainThreadID),
			&forge.CompactionBoundary{RequestID: c4.ID, SummaryID: sum4.ID, TailStartID: s4.msg.ID}, "T4's boundary")
		// Chained from T3 after the tip moved to T4: T3's boundary still.
		s5 := f.start(ses, &s3.turn.ID, "u5")
		f.end(ses, s5.turn)
		f.sameJSON(f.latest(ses, s5.turn.ID, ses.MainThreadID),
			&forge.CompactionBoundary{RequestID: c2.ID, SummaryID: sum2.ID, TailStartID: s2.msg.ID}, "T5's boundary")
		f.sameJSON(f.branchPages(ses, s5.turn.ID, "", 0),
			[][]string{{s1.msg.ID, s2.msg.ID, c2.ID, sum2.ID, s3.msg.ID, s5.msg.ID}}, "T5's branch")
	}},
}

// storeMaxLimit is the largest page a store returns.
const storeMaxLimit = 10000
