package storetest

import (
	"fmt"
	"math"
	"sync"

	"github.com/forge-runtime/forge"
)

// sessionUsage reads the session's usage total through GetSession and
// checks that ListSessions reports the same.
func (f *fixture) sessionUsage(ses *forge.Session) forge.Usage {
	f.Helper()
	got, err := f.s.GetSession(f.ctx, ses.Tenant, ses.ID)
	f.ok(err, "GetSession")
	listed, _, err := f.s.ListSessions(f.ctx, ses.Tenant, forge.SessionQuery{ListOptions: forge.ListOptions{Limit: maxListLimit}})
	f.ok(err, "ListSessions")
	found := false
	for _, s := range listed {
		if s.ID == ses.ID {
			found = true
			f.sameUsage(s.Usage, got.Usage, "ListSessions usage of "+ses.ID)
		}
	}
	if !found {
		f.Fatalf("ListSessions does not list %s", ses.ID)
	}
	return got.Usage
}

// maxListLimit is a page large enough for every session a usage test makes.
const maxListLimit = 1000

// sameUsage compares usages: tokens exactly, cost to a relative 1e-9 (a
// store may sum cost in decimal or in floating point).
func (f *fixture) sameUsage(got, want forge.Usage, what string) {
	f.Helper()
	gc, wc := got.Cost, want.Cost
	got.Cost, want.Cost = 0, 0
	if got != want || math.Abs(gc-wc) > 1e-9*math.Max(1, math.Abs(wc)) {
		got.Cost, want.Cost = gc, wc
		f.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

// endWithUsage commits t's terminal write carrying usage u.
func (f *fixture) endWithUsage(ses *forge.Session, t *forge.Turn, u forge.Usage) {
	f.Helper()
	t.Usage = u
	f.end(ses, t)
}

var usageTests = []test{
	{name: "NewSessionHasZeroUsage", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		f.sameUsage(f.sessionUsage(ses), forge.Usage{}, "usage of a new session")
		f.start(ses, nil, "hi")
		f.sameUsage(f.sessionUsage(ses), forge.Usage{}, "usage with a running turn")
	}},
	{name: "TerminalWritesAddUpInSession", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		u1 := forge.Usage{InputTokens: 1200, OutputTokens: 310, ReasoningTokens: 64, CacheReadTokens: 512,
			CacheWriteTokens: 128, Cost: 0.004185}
		u2 := forge.Usage{InputTokens: 2048, OutputTokens: 97, CacheReadTokens: 1024, Cost: 0.0031}
		var want forge.Usage

		first := f.start(ses, nil, "first").turn
		// A running turn's batches carry its usage so far: only the
		// terminal write counts toward the session.
		first.Usage = forge.Usage{InputTokens: 600, OutputTokens: 150, Cost: 0.002}
		first.Iterations = 1
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: first.ID, Turn: first}),
			"Commit of the running turn")
		f.sameUsage(f.sessionUsage(ses), want, "usage while the first turn runs")
		f.endWithUsage(ses, first, u1)
		want.Add(u1)
		f.sameUsage(f.sessionUsage(ses), want, "usage after the first turn")

		// A second terminal write (a cancel racing the end) is fenced and
		// adds nothing.
		late := *first
		late.Status, late.CancelReason = forge.TurnCancelled, ptr(forge.CancelClient)
		late.Usage = forge.Usage{InputTokens: 9999, OutputTokens: 9999, Cost: 9.99}
		f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: first.ID, Turn: &late}),
			forge.ErrTurnEnded, "second terminal Commit")
		f.sameUsage(f.sessionUsage(ses), want, "usage after the fenced terminal write")

		second := f.start(ses, &first.ID, "second").turn
		f.endWithUsage(ses, second, u2)
		want.Add(u2)
		f.sameUsage(f.sessionUsage(ses), want, "usage after the second turn")
		eq(f, want.InputTokens, int64(3248), "expected input tokens") // guards the test's own sum

		// Errored and cancelled turns count too.
		third := f.start(ses, &second.ID, "third").turn
		third.Status, third.Error = forge.TurnErrored, &forge.TurnError{Code: forge.CodeModelError, Message: "boom"}
		third.Usage, third.EndedAt = forge.Usage{InputTokens: 10, Cost: 0.0001}, ptr(f.now())
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: third.ID, Turn: third}),
			"errored terminal Commit")
		want.Add(third.Usage)
		f.sameUsage(f.sessionUsage(ses), want, "usage after the errored turn")

		// Turns of other sessions stay out of it.
		other := f.newSession(tenantA)
		f.endWithUsage(other, f.start(other, nil, "elsewhere").turn, u2)
		f.sameUsage(f.sessionUsage(ses), want, "usage after another session's turn")
		f.sameUsage(f.sessionUsage(other), u2, "the other session's usage")

		if f.h.Reopen == nil {
			return
		}
		f.reopen()
		f.sameUsage(f.sessionUsage(ses), want, "usage after reopen")
		f.is(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: first.ID, Turn: &late}),
			forge.ErrTurnEnded, "terminal Commit after reopen")
		f.sameUsage(f.sessionUsage(ses), want, "usage after a fenced write after reopen")
		fourth := f.start(ses, &third.ID, "fourth").turn
		f.endWithUsage(ses, fourth, u1)
		want.Add(u1)
		f.sameUsage(f.sessionUsage(ses), want, "usage after a turn ended after reopen")
	}},
	{name: "ConcurrentTerminalWritesAddOnce", run: func(f *fixture) {
		// Racing terminal writes of several sessions' turns, which a store
		// may commit together (and retry after the losers fail): each
		// session's total holds exactly its winner's usage.
		const sessions, racers = 6, 5
		type race struct {
			ses     *forge.Session
			batches []*forge.Batch
			errs    []error
		}
		races := make([]*race, sessions)
		for i := range races {
			ses := f.newSession(tenantA)
			t := f.start(ses, nil, "hi").turn
			r := &race{ses: ses, errs: make([]error, racers)}
			for j := range racers {
				c := *t
				c.Status, c.EndedAt = forge.TurnDone, ptr(f.now())
				c.Usage = forge.Usage{InputTokens: int64(100*i + j + 1), OutputTokens: int64(j + 1),
					Cost: float64(j+1) / 1000}
				r.batches = append(r.batches, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: &c})
			}
			races[i] = r
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, r := range races {
			for j, b := range r.batches {
				wg.Go(func() {
					<-start
					r.errs[j] = f.s.Commit(f.ctx, b)
				})
			}
		}
		close(start)
		wg.Wait()
		for i, r := range races {
			winner := -1
			for j, err := range r.errs {
				what := fmt.Sprintf("session %d writer %d", i, j)
				switch {
				case err == nil && winner >= 0:
					f.Fatalf("%s: writers %d and %d both won", what, winner, j)
				case err == nil:
					winner = j
				default:
					f.is(err, forge.ErrTurnEnded, what)
				}
			}
			if winner < 0 {
				f.Fatalf("session %d: no terminal write won", i)
			}
			f.sameUsage(f.sessionUsage(r.ses), r.batches[winner].Turn.Usage, fmt.Sprintf("session %d usage", i))
		}
	}},
}
