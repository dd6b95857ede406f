package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
)

// eventLogTests check that the stored log reads back byte for byte as it
// was written, whatever happened to the rows its events announce since: a
// store may keep an event as a reference to its row, or as what differs
// from it (the data of a stored event is a snapshot of the row at that
// moment: a part's start has empty text, a tool call is pending, the turn
// is running), and replays are compared byte for byte with live streams.
// Each test reads the log while its turns run, after they end, after the
// store packed it (eventLogFlusher) and after a reopen.
var eventLogTests = []test{
	{"TurnReplaysByteForByteAfterItsRowsChanged", true, testReplayAfterRowsChanged},
	{"EveryCursorAndPageSize", false, testLogEveryCursor},
	{"ForkedBranchesReplay", false, testLogFork},
	{"RecoveryClosingAPartReplays", false, testLogRecovery},
	{"ForumAndTurnlessEventsReplay", false, testLogForum},
	{"MarkedReplyLeavesItsTurnsLogIntact", false, testLogMarked},
	{"EventsOfNoRowOrOddShape", false, testLogOddEvents},
	{"LongTurnReplays", false, testLogLongTurn},
	{"SeqsAreAboveTheLog", false, testLogSeqsAbove},
	{"BegunEndedTurnReplays", false, testLogBegunEnded},
}

// flush has the store finish what it does to its log in the background,
// when it does (a store with a method FlushEventLog(context.Context)
// error: the suite reads the log before and after).
func (f *fixture) flush() {
	f.Helper()
	if s, ok := f.s.(interface{ FlushEventLog(context.Context) error }); ok {
		f.ok(s.FlushEventLog(f.ctx), "FlushEventLog")
	}
}

// wire is what a client gets for evs: each event's JSON.
func (f *fixture) wire(evs []forge.Event) []string {
	f.Helper()
	out := make([]string, len(evs))
	for i, e := range evs {
		b, err := json.Marshal(e)
		f.ok(err, "marshal event")
		out[i] = string(b)
	}
	return out
}

// sameWire fails unless got and want are the same bytes, event by event.
func (f *fixture) sameWire(got, want []forge.Event, what string) {
	f.Helper()
	g, w := f.wire(got), f.wire(want)
	if len(g) != len(w) {
		f.Fatalf("%s: %d events, want %d\n got: %s\nwant: %s", what, len(g), len(w), strings.Join(g, "\n      "), strings.Join(w, "\n      "))
	}
	for i := range g {
		if g[i] != w[i] {
			f.Fatalf("%s: event %d differs\n got: %s\nwant: %s", what, i, g[i], w[i])
		}
	}
}

// checkLog reads ses's whole log, and each turn's, and compares them with
// want (in seq order) byte for byte.
func (f *fixture) checkLog(ses *forge.Session, want []forge.Event, what string) {
	f.Helper()
	f.sameWire(f.events(ses, forge.EventQuery{}), want, what+": whole log")
	byTurn := map[string][]forge.Event{}
	for _, e := range want {
		if e.TurnID != nil {
			byTurn[*e.TurnID] = append(byTurn[*e.TurnID], e)
		}
	}
	for turn, evs := range byTurn {
		f.sameWire(f.events(ses, forge.EventQuery{TurnID: turn}), evs, what+": turn "+turn)
	}
}

// checkLogEverywhen checks the log now, after the store's background work,
// and (when the harness can) after a reopen.
func (f *fixture) checkLogEverywhen(ses *forge.Session, want []forge.Event, what string, reopen bool) {
	f.Helper()
	f.checkLog(ses, want, what)
	f.flush()
	f.checkLog(ses, want, what+" (flushed)")
	if reopen && f.h.Reopen != nil {
		f.reopen()
		f.checkLog(ses, want, what+" (reopened)")
	}
}

// turnWriter writes a turn the way the engine does: rows and the events
// announcing them, batch by batch, each event's data the row as it is at
// that moment.
type turnWriter struct {
	f    *fixture
	ses  *forge.Session
	turn *forge.Turn
	user *forge.Message
	log  []forge.Event // everything written, in seq order
}

func (f *fixture) beginTurn(ses *forge.Session, prev *string, text string) *turnWriter {
	f.Helper()
	st := f.start(ses, prev, text)
	return &turnWriter{f: f, ses: ses, turn: st.turn, user: st.msg, log: st.events}
}

func (w *turnWriter) ev(typ, id string, thread *string, data any) forge.Event {
	w.f.Helper()
	b, err := json.Marshal(data)
	w.f.ok(err, "marshal")
	return forge.Event{Seq: w.f.seqs(w.ses, 1)[0], ID: id, Type: typ, SessionID: w.ses.ID, TurnID: ptr(w.turn.ID),
		ThreadID: thread, CreatedAt: w.f.now(), Data: b}
}

func (w *turnWriter) commit(b forge.Batch) {
	w.f.Helper()
	b.Tenant, b.SessionID, b.TurnID = w.ses.Tenant, w.ses.ID, w.turn.ID
	w.f.ok(w.f.s.Commit(w.f.ctx, &b), "Commit")
	w.log = append(w.log, b.Events...)
}

// assistantTurn writes a whole tool turn after the user message: a step
// with text streamed, a tool call pending, running, completed, a
// checkpoint with no event, then the step's end, the message's update and
// the turn's end. It returns the reply message.
func (w *turnWriter) assistantTurn(reply string) *forge.Message {
	f := w.f
	f.Helper()
	thr := w.ses.MainThreadID
	m := f.message(w.turn, thr, forge.RoleAssistant)
	m.Model = "scripted/echo"
	m.ParentID = &w.user.ID
	start := &forge.Part{ID: f.id(forge.PrefixPart), MessageID: m.ID, Type: forge.PartStepStart,
		Data: json.RawMessage(`{"iteration":1}`), CreatedAt: f.now(), UpdatedAt: f.now()}
	m.Parts = []*forge.Part{start}
	created := m.Clone()
	text := f.textPart(m, "", forge.StateStreaming)
	tool := &forge.Part{ID: f.id(forge.PrefixPart), MessageID: m.ID, Type: forge.PartTool, State: forge.StatePending,
		CallID: "call_" + f.id(""), Tool: "echo", Arguments: json.RawMessage(`{"message":"hi"}`), CreatedAt: f.now(), UpdatedAt: f.now()}
	w.commit(forge.Batch{Messages: []*forge.Message{m}, Parts: []*forge.Part{start, text.Clone()},
		Events: []forge.Event{
			w.ev(forge.EventMessageCreated, m.ID, &thr, created),
			w.ev(forge.EventStepStarted, start.ID, &thr, start),
			w.ev(forge.EventModelMessage, text.ID, &thr, text),
		}})
	// A checkpoint: the row has the text so far, no event.
	text.Text = reply[:len(reply)/2]
	w.commit(forge.Batch{Parts: []*forge.Part{text.Clone()}})
	text.Text, text.State, text.UpdatedAt = reply, forge.StateCompleted, f.now()
	w.commit(forge.Batch{Parts: []*forge.Part{text.Clone(), tool.Clone()}, Events: []forge.Event{
		w.ev(forge.EventModelMessage, text.ID, &thr, text),
		w.ev(forge.EventToolCall, tool.ID, &thr, tool),
	}})
	tool.State, tool.UpdatedAt = forge.StateRunning, f.now()
	w.commit(forge.Batch{Parts: []*forge.Part{tool.Clone()}, Events: []forge.Event{w.ev(forge.EventToolCall, tool.ID, &thr, tool)}})
	tool.State, tool.Output, tool.UpdatedAt = forge.StateCompleted, ptr("Echo: hi"), f.now()
	finish := &forge.Part{ID: f.id(forge.PrefixPart), MessageID: m.ID, Type: forge.PartStepFinish,
		Data:      json.RawMessage(`{"finish":"tool_calls","iteration":1,"usage":{"input_tokens":125,"output_tokens":2,"cost":0}}`),
		CreatedAt: f.now(), UpdatedAt: f.now()}
	m.Parts = []*forge.Part{start, text, tool, finish}
	m.Finish, m.Usage = forge.FinishToolCalls, &forge.Usage{InputTokens: 125, OutputTokens: 2}
	w.commit(forge.Batch{Messages: []*forge.Message{m}, Parts: []*forge.Part{tool.Clone(), finish.Clone()}, Events: []forge.Event{
		w.ev(forge.EventToolResponse, tool.ID, &thr, tool),
		w.ev(forge.EventStepFinished, finish.ID, &thr, finish),
		w.ev(forge.EventMessageUpdated, m.ID, &thr, m),
	}})
	return m
}

// end writes the terminal batch: the turn done with the reply as output.
func (w *turnWriter) end(out *forge.Message, extra ...forge.Event) {
	f := w.f
	f.Helper()
	t := *w.turn
	t.Status, t.Iterations = forge.TurnDone, 1
	if out != nil {
		t.Output = &forge.TurnOutput{MessageID: out.ID, Text: out.Parts[1].Text}
	}
	t.Usage = forge.Usage{InputTokens: 125, OutputTokens: 2}
	t.EndedAt = ptr(f.now())
	done := w.ev(forge.EventTurnDone, t.ID, nil, nil)
	t.LastSeq = done.Seq
	b, err := json.Marshal(&t)
	f.ok(err, "marshal turn")
	done.Data = b
	w.commit(forge.Batch{Turn: &t, Events: append(extra, done)})
	*w.turn = t
}

func testReplayAfterRowsChanged(f *fixture) {
	ses := f.newSession(tenantA)
	w := f.beginTurn(ses, nil, "hi")
	f.checkLog(ses, w.log, "begun")
	m := w.assistantTurn("echo: hi, and more")
	f.checkLog(ses, w.log, "running")
	w.end(m)
	f.checkLogEverywhen(ses, w.log, "ended", true)
	// The rows are the final ones; the events kept their moments.
	ms, err := f.s.TurnMessages(f.ctx, tenantA, w.turn.ID)
	f.ok(err, "TurnMessages")
	eq(f, ms[1].Parts[1].Text, "echo: hi, and more", "final text in the row")
	eq(f, *ms[1].Parts[2].Output, "Echo: hi", "completed tool in the row")
	// A second turn chained from it.
	w2 := f.beginTurn(ses, &w.turn.ID, "again")
	m2 := w2.assistantTurn("echo: again")
	w2.end(m2)
	f.checkLogEverywhen(ses, append(append([]forge.Event{}, w.log...), w2.log...), "two turns", true)
}

func testLogEveryCursor(f *fixture) {
	ses := f.newSession(tenantA)
	var all []forge.Event
	var prev *string
	for i := range 3 {
		w := f.beginTurn(ses, prev, fmt.Sprint("turn ", i))
		w.end(w.assistantTurn(fmt.Sprint("reply ", i)))
		all = append(all, w.log...)
		prev = &w.turn.ID
	}
	f.flush()
	// Every cursor, every page size: exactly what followed the cursor.
	for _, limit := range []int{1, 2, 5, 1000} {
		for from := 0; from <= len(all); from++ {
			after := int64(0)
			if from > 0 {
				after = all[from-1].Seq
			}
			want := all[from:min(len(all), from+limit)]
			f.sameWire(f.events(ses, forge.EventQuery{After: after, Limit: limit}), want, fmt.Sprintf("after %d limit %d", after, limit))
			// A cursor between two stored seqs (a delta's).
			if from > 0 && from < len(all) && all[from].Seq > after+1 {
				f.sameWire(f.events(ses, forge.EventQuery{After: after + 1, Limit: limit}), want, fmt.Sprintf("after %d limit %d", after+1, limit))
			}
		}
	}
	// Before bounds, with and without a turn.
	mid := all[len(all)/2].Seq
	var before []forge.Event
	for _, e := range all {
		if e.Seq < mid {
			before = append(before, e)
		}
	}
	f.sameWire(f.events(ses, forge.EventQuery{Before: mid}), before, "before")
	turn := *all[len(all)/2].TurnID
	var inTurn []forge.Event
	for _, e := range all {
		if *e.TurnID == turn && e.Seq > all[len(all)/2-1].Seq {
			inTurn = append(inTurn, e)
		}
	}
	f.sameWire(f.events(ses, forge.EventQuery{TurnID: turn, After: all[len(all)/2-1].Seq}), inTurn, "turn after a cursor")
}

func testLogFork(f *fixture) {
	ses := f.newSession(tenantA)
	a := f.beginTurn(ses, nil, "a")
	a.end(a.assistantTurn("reply a"))
	b := f.beginTurn(ses, &a.turn.ID, "b")
	b.end(b.assistantTurn("reply b"))
	// A fork: a second turn chained from a.
	c := f.beginTurn(ses, &a.turn.ID, "c")
	c.end(c.assistantTurn("reply c"))
	all := append(append(append([]forge.Event{}, a.log...), b.log...), c.log...)
	f.checkLogEverywhen(ses, all, "forked", false)
	branch, _ := f.branch(ses, c.turn.ID, ses.MainThreadID, 0, "")
	eq(f, len(branch), 4, "the fork's branch")
}

func testLogRecovery(f *fixture) {
	// A turn that was streaming when its process died: the part's row
	// has its checkpointed text; recovery closes it interrupted and ends
	// the turn (API.md: the closing events before turn.done).
	ses := f.newSession(tenantA)
	w := f.beginTurn(ses, nil, "hi")
	thr := ses.MainThreadID
	m := f.message(w.turn, thr, forge.RoleAssistant)
	text := f.textPart(m, "", forge.StateStreaming)
	w.commit(forge.Batch{Messages: []*forge.Message{m}, Parts: []*forge.Part{text.Clone()}, Events: []forge.Event{
		w.ev(forge.EventMessageCreated, m.ID, &thr, m.Clone()),
		w.ev(forge.EventModelMessage, text.ID, &thr, text),
	}})
	text.Text = "half an ans"
	w.commit(forge.Batch{Parts: []*forge.Part{text.Clone()}})
	if f.h.Reopen != nil {
		f.reopen() // the process died
	}
	// Recovery.
	text.State, text.UpdatedAt = forge.StateInterrupted, f.now()
	t := *w.turn
	t.Status, t.CancelReason, t.EndedAt = forge.TurnCancelled, ptr(forge.CancelAbandoned), ptr(f.now())
	closing := w.ev(forge.EventModelMessage, text.ID, &thr, text)
	done := w.ev(forge.EventTurnDone, t.ID, nil, nil)
	t.LastSeq = done.Seq
	b, err := json.Marshal(&t)
	f.ok(err, "marshal")
	done.Data = b
	w.commit(forge.Batch{Turn: &t, Parts: []*forge.Part{text.Clone()}, Events: []forge.Event{closing, done}})
	f.checkLogEverywhen(ses, w.log, "recovered", true)
}

func testLogForum(f *fixture) {
	forum := f.newForum(tenantA)
	var log []forge.Event
	human := forge.Actor{Type: forge.ActorHuman, ID: "alice"}
	p := &forge.Participant{ID: f.id(forge.PrefixParticipant), Tenant: tenantA, ForumID: forum.ID, Actor: human,
		ActorID: human.Key(), JoinedAt: f.now()}
	joined := f.forumEvent(forum, forge.EventForumMemberJoined, p.ID, p)
	f.ok(f.s.AddParticipant(f.ctx, p, nil, []forge.Event{joined}), "join")
	log = append(log, joined)
	for i := range 3 {
		m := f.forumMessage(forum, fmt.Sprint("hello ", i), &forge.ForumInfo{Kind: forge.ForumKindMessage,
			ParticipantID: p.ID, ActorID: p.ActorID}, `{"client":"web"}`)
		ev := f.forumEvent(forum, forge.EventForumMessage, m.ID, map[string]any{"id": m.ID, "forum_id": forum.ID,
			"kind": "message", "text": m.Parts[0].Text, "created_at": m.CreatedAt})
		f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Messages: []*forge.Message{m},
			Events: []forge.Event{ev}}), "post")
		log = append(log, ev)
	}
	at := f.now()
	left := f.forumEvent(forum, forge.EventForumMemberLeft, p.ID, p)
	_, ended, err := f.s.EndParticipant(f.ctx, tenantA, forum.ID, p.ID, at, []forge.Event{left})
	f.ok(err, "leave")
	eq(f, ended, true, "ended")
	log = append(log, left)
	f.checkLogEverywhen(forum, log, "forum", true)

	// A monologue: copies ingested while a turn runs sit among its events.
	mono := f.newSession(tenantA)
	w := f.beginTurn(mono, nil, "first")
	copyMsg := f.forumMessage(mono, "bob: meanwhile", nil, `{"source_message_id":"msg_1"}`)
	copyMsg.Origin = "copy:msg_1"
	copyEv := f.forumEvent(mono, forge.EventMessageCreated, copyMsg.ID, copyMsg)
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: mono.ID, Messages: []*forge.Message{copyMsg},
		Events: []forge.Event{copyEv}}), "copy")
	w.log = append(w.log, copyEv)
	m := w.assistantTurn("an answer")
	w.end(m)
	f.checkLogEverywhen(mono, w.log, "monologue", false)
}

func testLogMarked(f *fixture) {
	mono := f.newSession(tenantA)
	w := f.beginTurn(mono, nil, "q")
	m := w.assistantTurn("the answer")
	w.end(m)
	f.flush()
	forum := f.newForum(tenantA)
	reply := f.forumMessage(forum, "the answer", &forge.ForumInfo{Kind: forge.ForumKindReply, SourceTurnID: w.turn.ID}, "")
	reply.Origin = "reply:" + w.turn.ID
	ev := f.forumEvent(forum, forge.EventForumMessage, reply.ID, reply)
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Messages: []*forge.Message{reply},
		Events: []forge.Event{ev}, Mark: []forge.MessageRef{{SessionID: mono.ID, MessageID: m.ID}}}), "publish")
	// The message changed after its turn; its events did not.
	f.checkLogEverywhen(mono, w.log, "marked monologue", true)
	f.checkLog(forum, []forge.Event{ev}, "forum")
}

func testLogOddEvents(f *fixture) {
	ses := f.newSession(tenantA)
	w := f.beginTurn(ses, nil, "hi")
	thr := ses.MainThreadID
	child := "thr_child"
	other := f.newSession(tenantA)
	ow := f.beginTurn(other, nil, "elsewhere")
	evs := []forge.Event{
		// Events of no row.
		w.ev(forge.EventActionRequired, w.turn.ID, &thr, forge.ActionRequiredData{RequiredActions: []forge.RequiredAction{}}),
		w.ev(forge.EventThreadCreated, child, &child, forge.ThreadCreatedData{Agent: "helper", CallID: "call_1", ParentThreadID: thr, ThreadID: child}),
		w.ev(forge.EventMCPInitialized, "mcp_1", &thr, map[string]any{"server": "x", "tools": []string{"a"}}),
		w.ev("custom.kind", "", nil, nil),
		w.ev(forge.EventSandboxStopped, "sbx_1", &thr, forge.SandboxStoppedData{Reason: "idle"}),
		// An id naming a row of another session, and of nothing.
		w.ev(forge.EventMessageUpdated, ow.user.ID, &thr, ow.user),
		w.ev(forge.EventModelMessage, "prt_ghost", &thr, map[string]any{"id": "prt_ghost", "text": "no row"}),
		// Data that is not an object, and unusual bytes.
		w.ev(forge.EventPatch, "prt_x", &thr, []string{"a\u2028b", "\x00", "é", "<&>"}),
	}
	raw := w.ev(forge.EventPatch, "prt_raw", &thr, nil)
	raw.Data = json.RawMessage(`{"id":"prt_raw" , "spaced":  true}`)
	evs = append(evs, raw)
	// An event outside the turn, and one naming another turn, in its
	// batch.
	loose := w.ev(forge.EventSessionCompacted, "cmp_1", nil, map[string]any{"boundary": 1})
	loose.TurnID = nil
	evs = append(evs, loose)
	w.commit(forge.Batch{Events: evs})
	w.end(nil)
	f.checkLogEverywhen(ses, w.log, "odd events", true)
	// Deleting a session takes its log along; the other session's log is
	// untouched.
	ow.end(nil)
	f.ok(f.s.DeleteSession(f.ctx, tenantA, other.ID), "DeleteSession")
	_, err := f.s.ListEvents(f.ctx, tenantA, forge.EventQuery{SessionID: other.ID})
	f.is(err, forge.ErrNotFound, "log of a deleted session")
	f.checkLog(ses, w.log, "after another session was deleted")
}

func testLogLongTurn(f *fixture) {
	// More events and bytes than a store would keep in one piece.
	ses := f.newSession(tenantA)
	w := f.beginTurn(ses, nil, "go")
	thr := ses.MainThreadID
	m := f.message(w.turn, thr, forge.RoleAssistant)
	big := strings.Repeat("0123456789abcdef", 24<<10) // 384 KiB
	for batch := range 6 {
		var evs []forge.Event
		var parts []*forge.Part
		for i := range 120 {
			p := f.textPart(m, fmt.Sprintf("part %d.%d", batch, i), forge.StateCompleted)
			if i == 7 {
				p.Text = big[:len(big)-batch]
			}
			m.Parts = append(m.Parts, p)
			parts = append(parts, p)
			evs = append(evs, w.ev(forge.EventModelMessage, p.ID, &thr, p))
		}
		msgs := []*forge.Message{}
		if batch == 0 {
			msgs = []*forge.Message{m}
		}
		w.commit(forge.Batch{Messages: msgs, Parts: parts, Events: evs})
	}
	w.end(nil)
	f.checkLogEverywhen(ses, w.log, "long turn", false)
	// Pages of every size read it whole.
	for _, limit := range []int{7, 100, 512, 1000} {
		var got []forge.Event
		after := int64(0)
		for {
			page := f.events(ses, forge.EventQuery{After: after, Limit: limit})
			if len(page) == 0 {
				break
			}
			if len(page) > limit {
				f.Fatalf("page of %d events, limit %d", len(page), limit)
			}
			got = append(got, page...)
			after = page[len(page)-1].Seq
		}
		f.sameWire(got, w.log, fmt.Sprint("paged by ", limit))
	}
}

func testLogSeqsAbove(f *fixture) {
	// Seqs are assigned in order and never reused: a write whose seq is
	// not above the log's last is a seq used twice.
	ses := f.newSession(tenantA)
	w := f.beginTurn(ses, nil, "hi")
	seq := f.seqs(ses, 3)
	top := w.ev(forge.EventStepStarted, "prt_a", nil, map[string]int{"n": 1})
	top.Seq = seq[2]
	w.commit(forge.Batch{Events: []forge.Event{top}})
	low := top
	low.Seq, low.ID = seq[0], "prt_b"
	f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: w.turn.ID, Events: []forge.Event{low}}),
		forge.ErrConflict, "a seq below the log's last")
	twice := top
	twice.Seq = f.seqs(ses, 1)[0]
	f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: w.turn.ID, Events: []forge.Event{twice, twice}}),
		forge.ErrConflict, "a seq twice in one batch")
	f.checkLog(ses, w.log, "after refused writes")
}

func testLogBegunEnded(f *fixture) {
	// A turn may be begun already ended (a published reply's record).
	ses := f.newSession(tenantA)
	t := f.newTurn(ses, nil)
	t.Status, t.EndedAt = forge.TurnDone, ptr(f.now())
	m := f.message(t, ses.MainThreadID, forge.RoleUser, "hi")
	seq := f.seqs(ses, 2)
	t.LastSeq = seq[1]
	evs := []forge.Event{f.event(t, seq[0], forge.EventMessageCreated, m.ID, m), f.event(t, seq[1], forge.EventTurnDone, t.ID, t)}
	f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t, Messages: []*forge.Message{m}, Events: evs}), "BeginTurn ended")
	f.checkLogEverywhen(ses, evs, "begun ended", true)
}
