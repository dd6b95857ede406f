package storetest

import (
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// schedules returns the store's ScheduleStore.
func (f *fixture) schedules() forge.ScheduleStore { return f.s }

// newSchedule stores a schedule of tenant whose next slot is next.
func (f *fixture) newSchedule(tenant string, next time.Time) *forge.Schedule {
	f.Helper()
	now := f.now().Truncate(time.Millisecond)
	sc := &forge.Schedule{
		ID: f.id(forge.PrefixSchedule), Tenant: tenant, Agent: "digest", Cron: "0 8 * * 1-5", Timezone: "Europe/Paris",
		Input:     []forge.Input{{Type: forge.InputMessage, Text: "Summarize the night's tickets"}},
		CatchUp:   forge.CatchUpOnce,
		NextRunAt: next.Truncate(time.Millisecond), CreatedAt: now, UpdatedAt: now,
	}
	f.ok(f.schedules().CreateSchedule(f.ctx, sc), "CreateSchedule")
	return sc
}

// runOf builds the run a claim of slot records.
func (f *fixture) runOf(sc *forge.Schedule, slot time.Time) *forge.ScheduleRun {
	return &forge.ScheduleRun{ID: f.id(forge.PrefixScheduleRun), Tenant: sc.Tenant, ScheduleID: sc.ID,
		Slot: slot, FiredAt: f.now().Truncate(time.Millisecond), Status: forge.RunPending}
}

// claim claims sc's slot, moving it to next, with a run unless skip.
func (f *fixture) claim(sc *forge.Schedule, slot, next time.Time, skip bool) (bool, *forge.ScheduleRun) {
	f.Helper()
	c := &forge.ScheduleClaim{Tenant: sc.Tenant, ScheduleID: sc.ID, Slot: slot, Next: next}
	if !skip {
		c.Run = f.runOf(sc, slot)
	}
	ok, err := f.schedules().ClaimScheduleSlot(f.ctx, c)
	f.ok(err, "ClaimScheduleSlot")
	return ok, c.Run
}

func (f *fixture) runs(sc *forge.Schedule) []*forge.ScheduleRun {
	f.Helper()
	runs, _, err := f.schedules().ListScheduleRuns(f.ctx, sc.Tenant, sc.ID, forge.ListOptions{})
	f.ok(err, "ListScheduleRuns")
	return runs
}

var scheduleTests = []test{
	{name: "RoundTripListUpdateDelete", run: func(f *fixture) {
		ss := f.schedules()
		sc := f.newSchedule(tenantA, base.Add(time.Hour))
		got, err := ss.GetSchedule(f.ctx, tenantA, sc.ID)
		f.ok(err, "GetSchedule")
		f.sameJSON(got, sc, "stored schedule")
		eq(f, got.NextRunAt.Equal(sc.NextRunAt), true, "next_run_at round-trips")
		eq(f, got.SessionID == nil, true, "no session")

		// An interval schedule on a session, paused.
		sid := "ses_x"
		other := f.newSchedule(tenantA, base.Add(2*time.Hour))
		other.Cron, other.Every, other.Timezone, other.SessionID, other.Paused, other.CatchUp = "", "30s", "UTC", &sid, true, forge.CatchUpSkip
		other.UpdatedAt = f.now().Truncate(time.Millisecond)
		f.ok(ss.UpdateSchedule(f.ctx, other, base.Add(2*time.Hour)), "UpdateSchedule")
		got, err = ss.GetSchedule(f.ctx, tenantA, other.ID)
		f.ok(err, "GetSchedule after update")
		f.sameJSON(got, other, "updated schedule")

		// An update against a next_run_at that moved is refused.
		other.Paused = false
		f.is(ss.UpdateSchedule(f.ctx, other, base), forge.ErrConflict, "UpdateSchedule with a stale next_run_at")
		got, _ = ss.GetSchedule(f.ctx, tenantA, other.ID)
		eq(f, got.Paused, true, "paused after the refused update")
		ghost := *other
		ghost.ID = "sch_missing"
		f.is(ss.UpdateSchedule(f.ctx, &ghost, other.NextRunAt), forge.ErrNotFound, "UpdateSchedule of a missing schedule")

		for range 3 {
			f.newSchedule(tenantA, base)
		}
		p := pages(f, 2, func(o forge.ListOptions) ([]*forge.Schedule, string, error) {
			return ss.ListSchedules(f.ctx, tenantA, o)
		},
			func(s *forge.Schedule) string { return s.ID })
		eq(f, len(p), 3, "pages of 2 over 5 schedules")
		eq(f, p[0][0], sc.ID, "oldest first")

		f.ok(ss.DeleteSchedule(f.ctx, tenantA, sc.ID), "DeleteSchedule")
		_, err = ss.GetSchedule(f.ctx, tenantA, sc.ID)
		f.is(err, forge.ErrNotFound, "GetSchedule after delete")
		f.is(ss.DeleteSchedule(f.ctx, tenantA, sc.ID), forge.ErrNotFound, "DeleteSchedule twice")
		_, _, err = ss.ListScheduleRuns(f.ctx, tenantA, sc.ID, forge.ListOptions{})
		f.is(err, forge.ErrNotFound, "runs of a deleted schedule")
	}},
	{name: "ClaimMovesTheSlotAndRecordsTheRun", run: func(f *fixture) {
		ss := f.schedules()
		slot := base.Add(time.Minute)
		sc := f.newSchedule(tenantA, slot)
		due, err := ss.DueSchedules(f.ctx, slot.Add(-time.Millisecond), 10)
		f.ok(err, "DueSchedules before the slot")
		eq(f, len(due), 0, "due before the slot")
		due, err = ss.DueSchedules(f.ctx, slot, 10)
		f.ok(err, "DueSchedules at the slot")
		eq(f, len(due), 1, "due at the slot")
		f.sameJSON(due[0], sc, "the due schedule")

		next := slot.Add(time.Minute)
		ok, run := f.claim(sc, slot, next, false)
		eq(f, ok, true, "first claim")
		ok, _ = f.claim(sc, slot, next.Add(time.Minute), false)
		eq(f, ok, false, "a second claim of the same slot")
		got, _ := ss.GetSchedule(f.ctx, tenantA, sc.ID)
		eq(f, got.NextRunAt.Equal(next), true, "next_run_at moved to the claimed next")
		runs := f.runs(sc)
		eq(f, len(runs), 1, "one run")
		f.sameJSON(runs[0], run, "the run")

		// The run's outcome.
		sid, tid := "ses_1", "turn_1"
		run.SessionID, run.TurnID, run.Status = &sid, &tid, forge.RunStarted
		f.ok(ss.UpdateScheduleRun(f.ctx, run), "UpdateScheduleRun")
		f.sameJSON(f.runs(sc)[0], run, "the run after its update")
		missing := *run
		missing.ID = "run_missing"
		f.is(ss.UpdateScheduleRun(f.ctx, &missing), forge.ErrNotFound, "UpdateScheduleRun of a missing run")

		// A skipping claim moves the slot and records nothing.
		ok, _ = f.claim(sc, next, next.Add(time.Hour), true)
		eq(f, ok, true, "skipping claim")
		eq(f, len(f.runs(sc)), 1, "runs after a skip")
		// An update that knows the new slot works, and an older claim fails.
		ok, _ = f.claim(sc, next, next.Add(2*time.Hour), false)
		eq(f, ok, false, "a claim of a slot already skipped")
	}},
	{name: "ConcurrentClaimsFireOnce", run: func(f *fixture) {
		ss := f.schedules()
		slot := base
		sc := f.newSchedule(tenantA, slot)
		for round := range 5 {
			next := slot.Add(time.Minute)
			const claimers = 8
			var wg sync.WaitGroup
			wins := make(chan bool, claimers)
			errs := make(chan error, claimers)
			for range claimers {
				run := f.runOf(sc, slot)
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := ss.ClaimScheduleSlot(f.ctx, &forge.ScheduleClaim{Tenant: tenantA, ScheduleID: sc.ID, Slot: slot, Next: next, Run: run})
					if err != nil {
						errs <- err
						return
					}
					wins <- ok
				}()
			}
			wg.Wait()
			close(wins)
			close(errs)
			for err := range errs {
				f.Fatalf("round %d: concurrent claim: %v", round, err)
			}
			won := 0
			for ok := range wins {
				if ok {
					won++
				}
			}
			eq(f, won, 1, "claims that won the slot")
			eq(f, len(f.runs(sc)), round+1, "runs after the round")
			slot = next
		}
		runs := f.runs(sc)
		for i := 1; i < len(runs); i++ {
			eq(f, runs[i].Slot.After(runs[i-1].Slot), true, "runs in slot order, each slot once")
		}
	}},
	{name: "PausedDoesNotFire", run: func(f *fixture) {
		ss := f.schedules()
		sc := f.newSchedule(tenantA, base)
		live := f.newSchedule(tenantB, base.Add(time.Second))
		sc.Paused = true
		f.ok(ss.UpdateSchedule(f.ctx, sc, sc.NextRunAt), "pause")
		due, err := ss.DueSchedules(f.ctx, base.Add(time.Hour), 10)
		f.ok(err, "DueSchedules")
		eq(f, len(due), 1, "due schedules (one paused)")
		eq(f, due[0].ID, live.ID, "the live schedule, of another tenant: DueSchedules crosses tenants")
		eq(f, due[0].Tenant, tenantB, "its tenant")
		ok, _ := f.claim(sc, sc.NextRunAt, base.Add(time.Minute), false)
		eq(f, ok, false, "claim of a paused schedule")
		eq(f, len(f.runs(sc)), 0, "runs of a paused schedule")
		due, err = ss.DueSchedules(f.ctx, base.Add(time.Hour), 0)
		f.ok(err, "DueSchedules with the default limit")
		eq(f, len(due), 1, "due with limit 0")
	}},
	{name: "RunsPage", run: func(f *fixture) {
		ss := f.schedules()
		slot := base
		sc := f.newSchedule(tenantA, slot)
		var want []string
		for range 5 {
			next := slot.Add(1500 * time.Millisecond)
			ok, run := f.claim(sc, slot, next, false)
			eq(f, ok, true, "claim")
			want = append(want, run.ID)
			slot = next
		}
		p := pages(f, 2, func(o forge.ListOptions) ([]*forge.ScheduleRun, string, error) {
			return ss.ListScheduleRuns(f.ctx, tenantA, sc.ID, o)
		}, func(r *forge.ScheduleRun) string { return r.ID })
		var got []string
		for _, page := range p {
			got = append(got, page...)
		}
		f.sameJSON(got, want, "runs over pages of 2")
		_, _, err := ss.ListScheduleRuns(f.ctx, tenantA, sc.ID, forge.ListOptions{Cursor: "not-a-cursor"})
		f.is(err, forge.ErrInvalid, "a foreign cursor")
	}},
	{name: "Tenancy", run: func(f *fixture) {
		ss := f.schedules()
		sc := f.newSchedule(tenantA, base)
		ok, run := f.claim(sc, base, base.Add(time.Minute), false)
		eq(f, ok, true, "claim")
		_, err := ss.GetSchedule(f.ctx, tenantB, sc.ID)
		f.is(err, forge.ErrNotFound, "another tenant's GetSchedule")
		list, _, err := ss.ListSchedules(f.ctx, tenantB, forge.ListOptions{})
		f.ok(err, "ListSchedules of B")
		eq(f, len(list), 0, "B's schedules")
		_, _, err = ss.ListScheduleRuns(f.ctx, tenantB, sc.ID, forge.ListOptions{})
		f.is(err, forge.ErrNotFound, "another tenant's runs")
		stolen := *sc
		stolen.Tenant, stolen.Paused = tenantB, true
		f.is(ss.UpdateSchedule(f.ctx, &stolen, base.Add(time.Minute)), forge.ErrNotFound, "another tenant's UpdateSchedule")
		f.is(ss.DeleteSchedule(f.ctx, tenantB, sc.ID), forge.ErrNotFound, "another tenant's DeleteSchedule")
		theirs := *run
		theirs.Tenant, theirs.Status = tenantB, forge.RunFailed
		f.is(ss.UpdateScheduleRun(f.ctx, &theirs), forge.ErrNotFound, "another tenant's UpdateScheduleRun")
		won, err := ss.ClaimScheduleSlot(f.ctx, &forge.ScheduleClaim{Tenant: tenantB, ScheduleID: sc.ID,
			Slot: base.Add(time.Minute), Next: base.Add(2 * time.Minute)})
		f.ok(err, "another tenant's claim")
		eq(f, won, false, "another tenant's claim")
		got, err := ss.GetSchedule(f.ctx, tenantA, sc.ID)
		f.ok(err, "GetSchedule")
		f.sameJSON(got.NextRunAt, base.Add(time.Minute), "A's schedule, untouched")
		eq(f, got.Paused, false, "A's schedule, not paused")
		eq(f, f.runs(sc)[0].Status, forge.RunPending, "A's run, untouched")
	}},
}
