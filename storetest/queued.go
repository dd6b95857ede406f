package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/forge-runtime/forge"
)

// Busy sessions (API.md): queued turns (EnqueueTurn), started in order by
// BeginTurn with Promote, once, whichever replicas race.

// enqueue stores a queued turn of ses with request req.
func (f *fixture) enqueue(ses *forge.Session, text string) *forge.Turn {
	f.Helper()
	t := f.newTurn(ses, nil)
	t.Status = forge.TurnQueued
	t.Input = []forge.Input{{Type: forge.InputMessage, Text: text}}
	t.RequiredActions = []forge.RequiredAction{}
	f.ok(f.s.EnqueueTurn(f.ctx, t, []byte(`{"text":"`+text+`"}`)), "EnqueueTurn")
	return t
}

// promotion is the BeginTurn that starts queued turn q, chained from prev.
func (f *fixture) promotion(q *forge.Turn, prev *string) *forge.BeginTurn {
	t := *q
	t.Status = forge.TurnRunning
	t.PreviousTurnID = prev
	return &forge.BeginTurn{Turn: &t, Promote: true}
}

func (f *fixture) nextQueued(ses *forge.Session) string {
	f.Helper()
	q, err := f.s.NextQueuedTurn(f.ctx, ses.Tenant, ses.ID)
	if errors.Is(err, forge.ErrNotFound) {
		return ""
	}
	f.ok(err, "NextQueuedTurn")
	return q.Turn.ID
}

func (f *fixture) queuedSessions() []string {
	f.Helper()
	refs, err := f.s.QueuedSessions(f.ctx)
	f.ok(err, "QueuedSessions")
	out := []string{}
	for _, r := range refs {
		out = append(out, r.Tenant+"/"+r.SessionID+"/"+r.TurnID)
	}
	slices.Sort(out)
	return out
}

var queuedTests = []test{
	{name: "TerminalWriteSaysWhetherATurnIsQueued", run: func(f *fixture) {
		// forge.Batch.NoneQueued: set only when the session has no queued
		// turn as its turn ends; a running turn's other writes, another
		// session's queued turns and an ended queued turn do not count.
		ses, other := f.newSession(tenantA), f.newSession(tenantA)
		f.enqueue(other, "elsewhere")
		t1 := f.start(ses, nil, "first").turn
		_, b := f.endBatch(ses, t1)
		eq(f, b.NoneQueued, true, "no turn queued in the session")

		t2 := f.start(ses, &t1.ID, "second").turn
		q := f.enqueue(ses, "waits")
		mid := &forge.Batch{Tenant: t2.Tenant, SessionID: ses.ID, TurnID: t2.ID,
			Events: []forge.Event{f.event(t2, f.seqs(ses, 1)[0], forge.EventMessageCreated, "msg_mid", map[string]string{})}}
		f.ok(f.s.Commit(f.ctx, mid), "Commit of a running turn")
		eq(f, mid.NoneQueued, false, "a write that ends no turn")
		_, b = f.endBatch(ses, t2)
		eq(f, b.NoneQueued, false, "a turn is queued")

		p := f.promotion(q, &t2.ID)
		f.ok(f.s.BeginTurn(f.ctx, p), "promote the queued turn")
		_, b = f.endBatch(ses, p.Turn)
		eq(f, b.NoneQueued, true, "the queued turn ran")
	}},
	{name: "QueuedTurnsStartInOrder", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.start(ses, nil, "first").turn
		q1 := f.enqueue(ses, "second")
		q2 := f.enqueue(ses, "third")

		got := f.getTurn(q1)
		eq(f, got.Status, forge.TurnQueued, "queued status")
		eq(f, got.Ended(), false, "a queued turn has not ended")
		eq(f, got.EndedAt == nil, true, "no ended_at")
		eq(f, f.tip(ses), t1.ID, "the tip does not move when a turn is queued")
		turns, _, err := f.s.ListTurns(f.ctx, tenantA, ses.ID, forge.ListOptions{})
		f.ok(err, "ListTurns")
		eq(f, fmt.Sprint(idsOf(turns, func(t *forge.Turn) string { return t.ID + ":" + t.Status })),
			fmt.Sprint([]string{t1.ID + ":running", q1.ID + ":queued", q2.ID + ":queued"}), "turns listed")
		next, err := f.s.NextQueuedTurn(f.ctx, tenantA, ses.ID)
		f.ok(err, "NextQueuedTurn")
		eq(f, next.Turn.ID, q1.ID, "the oldest queued turn comes first")
		eq(f, string(next.Request), `{"text":"second"}`, "its request")
		eq(f, next.Turn.Input[0].Text, "second", "its input")
		eq(f, fmt.Sprint(f.queuedSessions()), "[]", "no session to start while a turn runs")
		queued, err := f.s.QueuedTurns(f.ctx, tenantA, ses.ID, 10)
		f.ok(err, "QueuedTurns")
		eq(f, fmt.Sprint(idsOf(queued, func(t *forge.Turn) string { return t.ID + ":" + t.Status })),
			fmt.Sprint([]string{q1.ID + ":queued", q2.ID + ":queued"}), "queued turns, in the order they run")
		one, err := f.s.QueuedTurns(f.ctx, tenantA, ses.ID, 1)
		f.ok(err, "QueuedTurns limit 1")
		eq(f, len(one), 1, "QueuedTurns limit")
		_, err = f.s.QueuedTurns(f.ctx, tenantB, ses.ID, 10)
		f.is(err, forge.ErrNotFound, "another tenant's queue")

		f.is(f.s.BeginTurn(f.ctx, f.promotion(q2, &t1.ID)), forge.ErrConflict, "promoting past an older queued turn")
		f.is(f.s.BeginTurn(f.ctx, f.promotion(q1, &t1.ID)), forge.ErrTurnInProgress, "promoting while a turn runs")
		eq(f, f.getTurn(q1).Status, forge.TurnQueued, "a refused promotion leaves the turn queued")
		eq(f, f.nextQueued(ses), q1.ID, "still next")

		f.end(ses, t1)
		eq(f, fmt.Sprint(f.queuedSessions()), fmt.Sprint([]string{tenantA + "/" + ses.ID + "/" + q1.ID}), "the session waits for its next turn")
		f.ok(f.s.BeginTurn(f.ctx, f.promotion(q1, &t1.ID)), "promote the first queued turn")
		got = f.getTurn(q1)
		eq(f, got.Status, forge.TurnRunning, "promoted")
		eq(f, *got.PreviousTurnID, t1.ID, "chained from the turn before")
		eq(f, got.CreatedAt.Equal(q1.CreatedAt), true, "created_at kept")
		eq(f, f.tip(ses), q1.ID, "the tip moved to it")
		eq(f, f.nextQueued(ses), q2.ID, "then the next")
		f.is(f.s.BeginTurn(f.ctx, f.promotion(q1, &t1.ID)), forge.ErrTurnEnded, "promoting twice")
		eq(f, fmt.Sprint(f.queuedSessions()), "[]", "running again")

		f.end(ses, got)
		f.ok(f.s.BeginTurn(f.ctx, f.promotion(q2, &q1.ID)), "promote the second")
		eq(f, f.nextQueued(ses), "", "the queue is empty")
		eq(f, fmt.Sprint(f.queuedSessions()), "[]", "nothing left")
		// Its branch holds the turns before it.
		ms, _ := f.branch(ses, q2.ID, "", 0, "")
		eq(f, len(ms), 1, "branch messages (t1's)")
	}},
	{name: "PromoteOnceUnderRaces", run: func(f *fixture) {
		for round := range 10 {
			ses := f.newSession(tenantA)
			q := f.enqueue(ses, "go")
			var wins, lost int
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 6 {
				wg.Go(func() {
					<-start
					err := f.s.BeginTurn(f.ctx, f.promotion(q, nil))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, forge.ErrTurnEnded) || errors.Is(err, forge.ErrTurnInProgress):
						lost++
					default:
						f.Errorf("round %d: promotion: %v", round, err)
					}
				})
			}
			close(start)
			wg.Wait()
			eq(f, wins, 1, fmt.Sprintf("round %d: promotions that won", round))
			eq(f, f.getTurn(q).Status, forge.TurnRunning, "the turn runs")
			eq(f, f.tip(ses), q.ID, "tip")
		}
	}},
	{name: "QueuedTurnRacingANewTurnStartsOneAtATime", run: func(f *fixture) {
		for round := range 10 {
			ses := f.newSession(tenantA)
			q := f.enqueue(ses, "queued")
			t := f.newTurn(ses, nil)
			var promoteErr, beginErr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Go(func() { <-start; promoteErr = f.s.BeginTurn(f.ctx, f.promotion(q, nil)) })
			wg.Go(func() { <-start; beginErr = f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t}) })
			close(start)
			wg.Wait()
			if (promoteErr == nil) == (beginErr == nil) {
				f.Fatalf("round %d: promotion: %v, BeginTurn: %v; want exactly one to start", round, promoteErr, beginErr)
			}
			for _, err := range []error{promoteErr, beginErr} {
				if err != nil && !errors.Is(err, forge.ErrTurnInProgress) {
					f.Fatalf("round %d: the loser got %v, want ErrTurnInProgress", round, err)
				}
			}
		}
	}},
	{name: "CancelQueuedTurn", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.start(ses, nil, "first").turn
		q1 := f.enqueue(ses, "second")
		q2 := f.enqueue(ses, "third")
		c := *q1
		c.Status, c.CancelReason, c.CancelMessage = forge.TurnCancelled, ptr(forge.CancelClient), ptr("changed my mind")
		f.ok(f.s.EndQueuedTurn(f.ctx, &c, nil), "EndQueuedTurn")
		got := f.getTurn(q1)
		eq(f, got.Status, forge.TurnCancelled, "cancelled")
		eq(f, *got.CancelReason, forge.CancelClient, "reason")
		eq(f, *got.CancelMessage, "changed my mind", "message")
		eq(f, got.EndedAt != nil, true, "ended_at")
		eq(f, f.nextQueued(ses), q2.ID, "the cancelled turn left the queue")
		f.is(f.s.EndQueuedTurn(f.ctx, &c, nil), forge.ErrTurnEnded, "ending it twice")
		f.is(f.s.BeginTurn(f.ctx, f.promotion(q1, &t1.ID)), forge.ErrTurnEnded, "promoting a cancelled turn")
		ghost := c
		ghost.ID = "turn_ghost"
		f.is(f.s.EndQueuedTurn(f.ctx, &ghost, nil), forge.ErrNotFound, "an unknown turn")
		running := *t1
		running.Status = forge.TurnCancelled
		f.is(f.s.EndQueuedTurn(f.ctx, &running, nil), forge.ErrTurnEnded, "a running turn is not a queued one")
		eq(f, f.getTurn(t1).Status, forge.TurnRunning, "the running turn is untouched")
		f.end(ses, t1)
		e := *q2
		e.Status, e.Error = forge.TurnErrored, &forge.TurnError{Code: "pending_actions", Message: "calls await"}
		seq := f.seqs(ses, 2)
		evs := []forge.Event{f.event(&e, seq[0], forge.EventTurnCreated, e.ID, q2), f.event(&e, seq[1], forge.EventTurnDone, e.ID, &e)}
		f.ok(f.s.EndQueuedTurn(f.ctx, &e, evs), "EndQueuedTurn errored, with its events")
		got = f.getTurn(q2)
		eq(f, got.Error.Code, "pending_actions", "error code")
		eq(f, got.LastSeq, seq[1], "last_seq covers its events")
		eq(f, fmt.Sprint(seqsOf(f.events(ses, forge.EventQuery{TurnID: q2.ID}))), fmt.Sprint(seq), "its events are stored")
		eq(f, fmt.Sprint(f.queuedSessions()), "[]", "nothing waits")
	}},
	{name: "QueuedTurnIdempotencyKey", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.start(ses, nil, "first").turn
		q := f.newTurn(ses, nil)
		q.Status, q.IdempotencyKey = forge.TurnQueued, "key-q"
		f.ok(f.s.EnqueueTurn(f.ctx, q, []byte(`{}`)), "EnqueueTurn with a key")
		got, err := f.s.TurnByIdempotencyKey(f.ctx, tenantA, ses.ID, "key-q")
		f.ok(err, "TurnByIdempotencyKey")
		eq(f, got.ID, q.ID, "the queued turn has the key")
		again := f.newTurn(ses, nil)
		again.Status, again.IdempotencyKey = forge.TurnQueued, "key-q"
		f.is(f.s.EnqueueTurn(f.ctx, again, []byte(`{}`)), forge.ErrConflict, "the key again")
		dup := *q
		f.is(f.s.EnqueueTurn(f.ctx, &dup, []byte(`{}`)), forge.ErrConflict, "the id again")
		f.end(ses, t1)
		f.ok(f.s.BeginTurn(f.ctx, f.promotion(q, &t1.ID)), "promote")
		got, err = f.s.TurnByIdempotencyKey(f.ctx, tenantA, ses.ID, "key-q")
		f.ok(err, "TurnByIdempotencyKey after promotion")
		eq(f, got.Status, forge.TurnRunning, "the key names the running turn")
	}},
	{name: "QueuedTurnsOfDeletedSessions", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		f.enqueue(ses, "waiting")
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		eq(f, fmt.Sprint(f.queuedSessions()), "[]", "a deleted session's queue is not listed")
		_, err := f.s.NextQueuedTurn(f.ctx, tenantA, ses.ID)
		f.is(err, forge.ErrNotFound, "NextQueuedTurn of a deleted session")
		q := f.newTurn(ses, nil)
		q.Status = forge.TurnQueued
		f.is(f.s.EnqueueTurn(f.ctx, q, []byte(`{}`)), forge.ErrNotFound, "EnqueueTurn in a deleted session")
		ghost := f.newTurn(&forge.Session{ID: "ses_ghost", Tenant: tenantA}, nil)
		ghost.Status = forge.TurnQueued
		f.is(f.s.EnqueueTurn(f.ctx, ghost, []byte(`{}`)), forge.ErrNotFound, "EnqueueTurn in an unknown session")
		bad := f.newTurn(f.newSession(tenantA), nil)
		f.is(f.s.EnqueueTurn(f.ctx, bad, []byte(`{}`)), forge.ErrInvalid, "EnqueueTurn of a running turn")
	}},
	{name: "QueuedTurnTenancy", run: func(f *fixture) {
		sa, sb := f.newSession(tenantA), f.newSession(tenantB)
		qa, qb := f.enqueue(sa, "a"), f.enqueue(sb, "b")
		eq(f, fmt.Sprint(f.queuedSessions()), fmt.Sprint(sorted(tenantA+"/"+sa.ID+"/"+qa.ID, tenantB+"/"+sb.ID+"/"+qb.ID)),
			"both tenants' queues, each with its tenant")
		foreign := f.newTurn(&forge.Session{ID: sa.ID, Tenant: tenantB}, nil)
		foreign.Status = forge.TurnQueued
		f.is(f.s.EnqueueTurn(f.ctx, foreign, []byte(`{}`)), forge.ErrNotFound, "EnqueueTurn into another tenant's session")
		_, err := f.s.NextQueuedTurn(f.ctx, tenantB, sa.ID)
		f.is(err, forge.ErrNotFound, "NextQueuedTurn of another tenant's session")
		c := *qa
		c.Tenant, c.Status, c.CancelReason = tenantB, forge.TurnCancelled, ptr(forge.CancelClient)
		f.is(f.s.EndQueuedTurn(f.ctx, &c, nil), forge.ErrNotFound, "EndQueuedTurn of another tenant's turn")
		p := f.promotion(qa, nil)
		p.Turn.Tenant = tenantB
		f.is(f.s.BeginTurn(f.ctx, p), forge.ErrNotFound, "promoting another tenant's turn")
		eq(f, f.getTurn(qa).Status, forge.TurnQueued, "A's turn is still queued")
		eq(f, f.nextQueued(sa), qa.ID, "and next")
	}},
	{name: "EndedQueuedTurnWebhook", run: func(f *fixture) {
		// The turn.done of a queued turn that never ran is an event like
		// any: subscribed endpoints get it, from the outbox written with it.
		ws := f.webhooks()
		w := f.newWebhook(ws, tenantA, forge.EventTurnDone)
		ses := f.newSession(tenantA)
		q := f.enqueue(ses, "never")
		e := *q
		e.Status, e.CancelReason = forge.TurnCancelled, ptr(forge.CancelClient)
		seq := f.seqs(ses, 2)
		f.ok(f.s.EndQueuedTurn(f.ctx, &e, []forge.Event{f.event(&e, seq[0], forge.EventTurnCreated, e.ID, q),
			f.event(&e, seq[1], forge.EventTurnDone, e.ID, &e)}), "EndQueuedTurn")
		list, _, err := ws.ListDeliveries(f.ctx, tenantA, w.ID, forge.ListOptions{})
		f.ok(err, "ListDeliveries")
		eq(f, len(list), 1, "deliveries of the queued turn's turn.done")
	}},
	{name: "QueuedTurnSurvivesReopen", reopen: true, run: func(f *fixture) {
		ses := f.newSession(tenantA)
		q := f.enqueue(ses, "later")
		f.reopen()
		next, err := f.s.NextQueuedTurn(f.ctx, tenantA, ses.ID)
		f.ok(err, "NextQueuedTurn after reopen")
		eq(f, next.Turn.ID, q.ID, "the queued turn")
		eq(f, string(next.Request), `{"text":"later"}`, "its request")
		f.ok(f.s.BeginTurn(f.ctx, f.promotion(q, nil)), "promote after reopen")
	}},
}
