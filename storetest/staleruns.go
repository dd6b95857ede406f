package storetest

import (
	"time"

	"github.com/forge-runtime/forge"
)

func init() {
	scheduleTests = append(scheduleTests, test{name: "StaleRunsAcrossTenants", run: testStaleRuns})
}

// testStaleRuns: the runs still pending, of every tenant, fired before the
// bound, oldest first; a run recorded started is not stale.
func testStaleRuns(f *fixture) {
	ss := f.schedules()
	a := f.newSchedule(tenantA, base)
	b := f.newSchedule(tenantB, base)
	c := f.newSchedule(tenantA, base)
	_, ra := f.claim(a, base, base.Add(time.Hour), false)
	_, rb := f.claim(b, base, base.Add(time.Hour), false)
	_, rc := f.claim(c, base, base.Add(time.Hour), false)
	rc.Status, rc.TurnID = forge.RunStarted, ptr("turn_1")
	f.ok(ss.UpdateScheduleRun(f.ctx, rc), "UpdateScheduleRun")

	got, err := ss.StaleRuns(f.ctx, rb.FiredAt.Add(time.Millisecond), 10)
	f.ok(err, "StaleRuns")
	ids := idsOf(got, func(r *forge.ScheduleRun) string { return r.ID })
	f.sameJSON(ids, []string{ra.ID, rb.ID}, "stale runs, oldest first")
	eq(f, got[1].Tenant, tenantB, "tenant of the other tenant's run")
	eq(f, got[1].ScheduleID, b.ID, "schedule of the run")
	eq(f, got[0].Status, forge.RunPending, "status")

	got, err = ss.StaleRuns(f.ctx, ra.FiredAt, 10)
	f.ok(err, "StaleRuns")
	eq(f, len(got), 0, "runs fired at or after the bound")
	got, err = ss.StaleRuns(f.ctx, rb.FiredAt.Add(time.Millisecond), 1)
	f.ok(err, "StaleRuns")
	eq(f, len(got), 1, "runs past the limit")
}
