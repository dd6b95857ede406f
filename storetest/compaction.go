package storetest

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// compactionPart builds the compaction part of a compaction request.
func (f *fixture) compactionPart(m *forge.Message, tailStart string) *forge.Part {
	p := f.textPart(m, "", forge.StateCompleted)
	p.Type = forge.PartCompaction
	p.Data, _ = json.Marshal(forge.CompactionData{TailStartID: tailStart, Auto: true, Reason: "threshold"})
	return p
}

// compactIn writes, in running turn t, a compaction request pointing at
// tailStart and its summary finished with finish; it returns both.
func (f *fixture) compactIn(ses *forge.Session, t *forge.Turn, after *forge.Message, tailStart, finish string) (req, sum *forge.Message) {
	f.Helper()
	req = f.message(t, ses.MainThreadID, forge.RoleUser, "summarize")
	req.ParentID = &after.ID
	req.Parts = append([]*forge.Part{f.compactionPart(req, tailStart)}, req.Parts...)
	sum = f.message(t, ses.MainThreadID, forge.RoleAssistant, "the summary")
	sum.ParentID, sum.Summary, sum.Finish = &req.ID, true, finish
	f.commitMessages(ses, t, req, sum)
	return req, sum
}

func (f *fixture) commitMessages(ses *forge.Session, t *forge.Turn, ms ...*forge.Message) {
	f.Helper()
	b := &forge.Batch{Tenant: ses.Tenant, SessionID: ses.ID, TurnID: t.ID}
	for _, m := range ms {
		b.Messages = append(b.Messages, m)
		b.Parts = append(b.Parts, m.Parts...)
	}
	f.ok(f.s.Commit(f.ctx, b), "Commit messages")
}

func (f *fixture) latest(ses *forge.Session, tip, thread string) *forge.CompactionBoundary {
	f.Helper()
	b, err := f.s.LatestCompaction(f.ctx, ses.Tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: tip, ThreadID: thread})
	f.ok(err, "LatestCompaction")
	return b
}

func (f *fixture) from(ses *forge.Session, tip, from string, limit int) [][]string {
	f.Helper()
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.Message, string, error) {
		return f.s.ListMessages(f.ctx, ses.Tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: tip,
			ThreadID: ses.MainThreadID, From: from, ListOptions: o})
	}, func(m *forge.Message) string { return m.ID })
}

var compactionTests = []test{
	{name: "LatestCompactionAlongTheBranch", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		main := ses.MainThreadID
		s1 := f.start(ses, nil, "u1")
		x1 := f.message(s1.turn, main, forge.RoleAssistant, "x1")
		f.commitMessages(ses, s1.turn, x1)
		f.end(ses, s1.turn)

		// T2 compacts with u2 as its tail's start.
		s2 := f.start(ses, &s1.turn.ID, "u2")
		x2 := f.message(s2.turn, main, forge.RoleAssistant, "x2")
		f.commitMessages(ses, s2.turn, x2)
		c, s := f.compactIn(ses, s2.turn, x2, s2.msg.ID, forge.FinishStop)
		f.end(ses, s2.turn)
		want := &forge.CompactionBoundary{RequestID: c.ID, SummaryID: s.ID, TailStartID: s2.msg.ID}

		// T3 follows; a summary whose parent carries no compaction part is
		// no boundary.
		s3 := f.start(ses, &s2.turn.ID, "u3")
		x3 := f.message(s3.turn, main, forge.RoleAssistant, "x3")
		odd := f.message(s3.turn, main, forge.RoleAssistant, "not a boundary")
		odd.ParentID, odd.Summary, odd.Finish = &x3.ID, true, forge.FinishStop
		f.commitMessages(ses, s3.turn, x3, odd)
		f.end(ses, s3.turn)

		// T4 forks from T1: no boundary on its branch.
		s4 := f.start(ses, &s1.turn.ID, "u4")
		f.end(ses, s4.turn)

		// T5 follows T3 with a failed summary: no boundary either.
		s5 := f.start(ses, &s3.turn.ID, "u5")
		f.compactIn(ses, s5.turn, s5.msg, s5.msg.ID, forge.FinishError)
		f.end(ses, s5.turn)

		f.sameJSON(f.latest(ses, s2.turn.ID, ""), want, "boundary at its own turn")
		f.sameJSON(f.latest(ses, s3.turn.ID, main), want, "boundary seen from a later turn")
		f.sameJSON(f.latest(ses, s5.turn.ID, main), want, "failed summary is skipped")
		if b := f.latest(ses, s4.turn.ID, main); b != nil {
			f.Fatalf("fork without compaction: boundary %+v", b)
		}
		if b := f.latest(ses, s1.turn.ID, main); b != nil {
			f.Fatalf("before the compaction: boundary %+v", b)
		}
		if b := f.latest(ses, s3.turn.ID, childThread); b != nil {
			f.Fatalf("other thread: boundary %+v", b)
		}

		// A newer compaction wins; its tail may start in its own turn.
		s6 := f.start(ses, &s5.turn.ID, "u6")
		c6, sum6 := f.compactIn(ses, s6.turn, s6.msg, s6.msg.ID, forge.FinishStop)
		f.end(ses, s6.turn)
		f.sameJSON(f.latest(ses, s6.turn.ID, main), &forge.CompactionBoundary{RequestID: c6.ID, SummaryID: sum6.ID, TailStartID: s6.msg.ID}, "newest boundary")

		// Reading from the tail's start: exactly the messages from it on,
		// paginated, whatever lies before.
		f.sameJSON(f.from(ses, s3.turn.ID, s2.msg.ID, 2), [][]string{{s2.msg.ID, x2.ID}, {c.ID, s.ID}, {s3.msg.ID, x3.ID}, {odd.ID}},
			"branch from the tail start")
		f.sameJSON(f.from(ses, s3.turn.ID, x3.ID, 0), [][]string{{x3.ID, odd.ID}}, "from a message of the tip turn")
		_, _, err := f.s.ListMessages(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: s3.turn.ID, From: "msg_ghost"})
		f.is(err, forge.ErrNotFound, "From an unknown message")
	}},
	{name: "TurnHistoryIsItsThreeReads", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		main := ses.MainThreadID
		s1 := f.start(ses, nil, "u1")
		x1 := f.message(s1.turn, main, forge.RoleAssistant, "x1")
		f.commitMessages(ses, s1.turn, x1)
		// T1 ends with a snapshot, the later turns without.
		seq := f.seqs(ses, 1)[0]
		s1.turn.Status, s1.turn.EndedAt, s1.turn.LastSeq = forge.TurnDone, ptr(f.now()), seq
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: s1.turn.ID, Turn: s1.turn,
			Events:   []forge.Event{f.event(s1.turn, seq, forge.EventTurnDone, s1.turn.ID, s1.turn)},
			Snapshot: &forge.Snapshot{ContextTokens: 1234}}), "Commit terminal with a snapshot")
		s2 := f.start(ses, &s1.turn.ID, "u2")
		x2 := f.message(s2.turn, main, forge.RoleAssistant, "x2")
		f.commitMessages(ses, s2.turn, x2)
		f.compactIn(ses, s2.turn, x2, s2.msg.ID, forge.FinishStop)
		f.end(ses, s2.turn)
		s3 := f.start(ses, &s2.turn.ID, "u3")
		f.end(ses, s3.turn)

		for _, tip := range []string{s1.turn.ID, s2.turn.ID, s3.turn.ID} {
			for _, limit := range []int{2, 0} {
				q := forge.MessageQuery{SessionID: ses.ID, TipTurnID: tip, ThreadID: main, ListOptions: forge.ListOptions{Limit: limit}}
				got, err := f.s.TurnHistory(f.ctx, tenantA, q)
				f.ok(err, "TurnHistory")
				want := forge.TurnHistory{Boundary: f.latest(ses, tip, main)}
				want.Messages, want.Next, err = f.s.ListMessages(f.ctx, tenantA, q)
				f.ok(err, "ListMessages")
				if snap, err := f.s.GetSnapshot(f.ctx, tenantA, tip); err == nil {
					want.Snapshot = snap
				} else {
					f.is(err, forge.ErrNotFound, "GetSnapshot")
				}
				f.sameJSON(got, want, "TurnHistory at "+tip)
				// From is ignored: the page is the branch's from its start.
				q.From = x1.ID
				again, err := f.s.TurnHistory(f.ctx, tenantA, q)
				f.ok(err, "TurnHistory with From")
				f.sameJSON(again, got, "TurnHistory with From set")
				// After a cursor: the branch's messages after it.
				q.From, q.Cursor = "", x1.ID
				after, err := f.s.TurnHistory(f.ctx, tenantA, q)
				f.ok(err, "TurnHistory after a cursor")
				want.Messages, want.Next, err = f.s.ListMessages(f.ctx, tenantA, q)
				f.ok(err, "ListMessages after a cursor")
				f.sameJSON(after, want, "TurnHistory after "+x1.ID)
			}
		}
		if h, err := f.s.TurnHistory(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: s1.turn.ID}); err != nil || h.Snapshot == nil || h.Snapshot.ContextTokens != 1234 {
			f.Fatalf("TurnHistory's snapshot of T1: %+v, %v", h, err)
		}

		for _, c := range []struct {
			what   string
			tenant string
			q      forge.MessageQuery
			want   error
		}{
			{"no tip", tenantA, forge.MessageQuery{SessionID: ses.ID}, forge.ErrInvalid},
			{"unknown tip", tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: "turn_ghost"}, forge.ErrNotFound},
			{"unknown session", tenantA, forge.MessageQuery{SessionID: "ses_ghost", TipTurnID: s1.turn.ID}, forge.ErrNotFound},
			{"another tenant's session", tenantB, forge.MessageQuery{SessionID: ses.ID, TipTurnID: s1.turn.ID}, forge.ErrNotFound},
		} {
			_, err := f.s.TurnHistory(f.ctx, c.tenant, c.q)
			f.is(err, c.want, "TurnHistory, "+c.what)
		}
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		_, err := f.s.TurnHistory(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: s1.turn.ID})
		f.is(err, forge.ErrNotFound, "TurnHistory of a deleted session")
	}},
	{name: "LatestCompactionEmptyAndUnknown", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		b, err := f.s.LatestCompaction(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID})
		f.ok(err, "LatestCompaction without a tip")
		if b != nil {
			f.Fatalf("boundary without a tip: %+v", b)
		}
		_, err = f.s.LatestCompaction(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: "turn_ghost"})
		f.is(err, forge.ErrNotFound, "unknown tip")
		_, err = f.s.LatestCompaction(f.ctx, tenantA, forge.MessageQuery{SessionID: "ses_ghost", TipTurnID: "turn_ghost"})
		f.is(err, forge.ErrNotFound, "unknown session")
		_, err = f.s.LatestCompaction(f.ctx, tenantB, forge.MessageQuery{SessionID: ses.ID})
		f.is(err, forge.ErrNotFound, "another tenant's session")
	}},
}
