package scheduler_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/scheduler"
	"github.com/forge-runtime/forge/sqlite"
)

var ctx = context.Background()

// clock is a fake clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// runner records the turns the schedulers start.
type runner struct {
	mu       sync.Mutex
	sessions int
	turns    []string // session ids, one per turn
	// newSession and startTurn, when set, answer instead.
	newSession func() error
	startTurn  func() error
}

func (r *runner) NewSession(ctx context.Context, tenant, agent, scheduleID, runID string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.newSession != nil {
		if err := r.newSession(); err != nil {
			return "", err
		}
	}
	r.sessions++
	return fmt.Sprintf("ses_%d", r.sessions), nil
}

func (r *runner) StartTurn(ctx context.Context, tenant, sessionID, scheduleID, runID string, input []forge.Input) (*forge.Turn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.startTurn != nil {
		if err := r.startTurn(); err != nil {
			return nil, err
		}
	}
	r.turns = append(r.turns, sessionID)
	return &forge.Turn{ID: fmt.Sprintf("turn_%d", len(r.turns)), SessionID: sessionID}, nil
}

func (r *runner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.turns)
}

type env struct {
	t     *testing.T
	store forge.ScheduleStore
	clock *clock
	run   *runner
}

var epoch = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "forge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(ctx) })
	return &env{t: t, store: st, clock: &clock{t: epoch}, run: &runner{}}
}

func (e *env) scheduler() *scheduler.Scheduler { return e.schedulerOn(e.store) }

func (e *env) schedulerOn(st scheduler.Store) *scheduler.Scheduler {
	return scheduler.New(scheduler.Config{Store: st, Runner: e.run, Clock: e.clock, Grace: 5 * time.Second})
}

// schedule stores a schedule of cadence cron or every, first due at next.
func (e *env) schedule(cron, every, catchUp string, next time.Time, session *string) *forge.Schedule {
	e.t.Helper()
	now := e.clock.Now()
	sc := &forge.Schedule{ID: forge.NewULIDGen(nil).New(forge.PrefixSchedule), Tenant: "acme", Agent: "digest",
		Cron: cron, Every: every, Timezone: "UTC", Input: []forge.Input{{Type: forge.InputMessage, Text: "go"}},
		SessionID: session, CatchUp: catchUp, NextRunAt: next, CreatedAt: now, UpdatedAt: now}
	if err := e.store.CreateSchedule(ctx, sc); err != nil {
		e.t.Fatal(err)
	}
	return sc
}

func (e *env) runs(sc *forge.Schedule) []*forge.ScheduleRun {
	e.t.Helper()
	runs, _, err := e.store.ListScheduleRuns(ctx, sc.Tenant, sc.ID, forge.ListOptions{Limit: 10000})
	if err != nil {
		e.t.Fatal(err)
	}
	return runs
}

func (e *env) get(sc *forge.Schedule) *forge.Schedule {
	e.t.Helper()
	got, err := e.store.GetSchedule(ctx, sc.Tenant, sc.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// TestTwoSchedulersFireEachSlotOnce: two schedulers polling one store at
// the same instants, as two replicas do, fire every slot of an interval
// exactly once between them, one turn per slot, each slot in order.
func TestTwoSchedulersFireEachSlotOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.schedule("", "2s", forge.CatchUpOnce, epoch.Add(2*time.Second), nil)
	e.fireTogether(sc, e.scheduler(), e.scheduler())
}

// TestTwoReplicasOnPostgresFireEachSlotOnce: the same with two stores
// (two connection pools, as two replicas have) on one PostgreSQL
// database.
func TestTwoReplicasOnPostgresFireEachSlotOnce(t *testing.T) {
	pgtest.URL(t)
	t.Parallel()
	db := pgtest.NewDatabase(t)
	open := func() *postgres.Store {
		st, err := postgres.Open(ctx, db, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close(ctx) })
		return st
	}
	one, two := open(), open()
	e := &env{t: t, store: one, clock: &clock{t: epoch}, run: &runner{}}
	sc := e.schedule("", "2s", forge.CatchUpOnce, epoch.Add(2*time.Second), nil)
	e.fireTogether(sc, e.schedulerOn(one), e.schedulerOn(two))
}

// fireTogether ticks a and b at the same instants over 10 slots of sc (an
// every-2s schedule first due 2 s after the epoch) and checks that each
// slot fired once.
func (e *env) fireTogether(sc *forge.Schedule, a, b *scheduler.Scheduler) {
	t := e.t
	t.Helper()
	const steps = 40 // 20 s in half-second steps: 10 slots
	for range steps {
		e.clock.advance(500 * time.Millisecond)
		var wg sync.WaitGroup
		for _, s := range []*scheduler.Scheduler{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Tick(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	runs := e.runs(sc)
	if len(runs) != 10 || e.run.count() != 10 {
		t.Fatalf("%d runs, %d turns over 10 slots", len(runs), e.run.count())
	}
	for i, r := range runs {
		want := epoch.Add(time.Duration(2*(i+1)) * time.Second)
		if !r.Slot.Equal(want) || r.Status != forge.RunStarted || r.TurnID == nil || r.SessionID == nil {
			t.Fatalf("run %d: slot %s status %s turn %v, want slot %s started", i, r.Slot, r.Status, r.TurnID, want)
		}
	}
	if next := e.get(sc).NextRunAt; !next.Equal(epoch.Add(22 * time.Second)) {
		t.Fatalf("next_run_at %s", next)
	}
}

// TestCatchUpOnce: slots missed while no scheduler ran fire once, for the
// latest of them, then the cadence resumes.
func TestCatchUpOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.schedule("", "10s", forge.CatchUpOnce, epoch.Add(10*time.Second), nil)
	daily := e.schedule("0 8 * * *", "", "", epoch.Add(23*time.Hour), nil) // catch_up "" is once
	s := e.scheduler()
	e.clock.advance(3*24*time.Hour + 5*time.Second) // down for three days
	fired, err := s.Tick(ctx)
	if err != nil || len(fired) != 2 {
		t.Fatalf("fired %v, %v; want one run of each schedule", fired, err)
	}
	now := e.clock.Now()
	runs := e.runs(sc)
	if len(runs) != 1 || !runs[0].Slot.Equal(now.Add(-5*time.Second)) || !runs[0].FiredAt.Equal(now) {
		t.Fatalf("interval runs %+v", runs)
	}
	if next := e.get(sc).NextRunAt; !next.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("interval next %s, want the next slot on its cadence", next)
	}
	if runs := e.runs(daily); len(runs) != 1 || !runs[0].Slot.Equal(time.Date(2026, 3, 5, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("daily runs %+v", runs)
	}
	if next := e.get(daily).NextRunAt; !next.Equal(time.Date(2026, 3, 6, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("daily next %s", next)
	}
	// Nothing more until the next slot.
	if fired, _ := s.Tick(ctx); len(fired) != 0 {
		t.Fatalf("fired again: %v", fired)
	}
	e.clock.advance(5 * time.Second)
	if fired, _ := s.Tick(ctx); len(fired) != 1 {
		t.Fatalf("the cadence did not resume: %v", fired)
	}
}

// TestCatchUpSkip: with catch_up "skip", missed slots fire nothing and the
// schedule waits for its next slot; a slot a little late (within the
// grace) still fires.
func TestCatchUpSkip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	daily := e.schedule("0 8 * * *", "", forge.CatchUpSkip, epoch.Add(23*time.Hour), nil)
	s := e.scheduler()
	e.clock.advance(23*time.Hour + time.Minute) // 8:01 on the 3rd: missed (grace 5 s)
	if fired, err := s.Tick(ctx); err != nil || len(fired) != 0 {
		t.Fatalf("fired %v, %v", fired, err)
	}
	if runs := e.runs(daily); len(runs) != 0 || e.run.count() != 0 {
		t.Fatalf("runs %v", runs)
	}
	if next := e.get(daily).NextRunAt; !next.Equal(time.Date(2026, 3, 4, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("next %s", next)
	}
	e.clock.advance(24*time.Hour - time.Minute + 2*time.Second) // 8:00:02 on the 4th: on time
	if fired, _ := s.Tick(ctx); len(fired) != 1 {
		t.Fatalf("an on-time slot did not fire: %v", fired)
	}
}

// TestPausedDoesNotFire: a paused schedule fires nothing; resumed, it
// fires again.
func TestPausedDoesNotFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.schedule("", "1s", forge.CatchUpOnce, epoch.Add(time.Second), nil)
	sc.Paused = true
	if err := e.store.UpdateSchedule(ctx, sc, sc.NextRunAt); err != nil {
		t.Fatal(err)
	}
	s := e.scheduler()
	for range 5 {
		e.clock.advance(time.Second)
		if fired, err := s.Tick(ctx); err != nil || len(fired) != 0 {
			t.Fatalf("paused schedule fired %v, %v", fired, err)
		}
	}
	sc = e.get(sc)
	old := sc.NextRunAt
	sc.Paused, sc.NextRunAt = false, e.clock.Now().Add(time.Second)
	if err := e.store.UpdateSchedule(ctx, sc, old); err != nil {
		t.Fatal(err)
	}
	e.clock.advance(time.Second)
	if fired, _ := s.Tick(ctx); len(fired) != 1 {
		t.Fatalf("resumed schedule fired %v", fired)
	}
}

// TestDeletedAgentPausesTheSchedule: a run whose agent is gone is recorded
// failed with the reason, and its schedule is paused.
func TestDeletedAgentPausesTheSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run.newSession = func() error { return forge.Errorf(forge.ErrNotFound, `agent "digest" not found`) }
	sc := e.schedule("", "1s", forge.CatchUpOnce, epoch.Add(time.Second), nil)
	s := e.scheduler()
	e.clock.advance(time.Second)
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	runs := e.runs(sc)
	if len(runs) != 1 || runs[0].Status != forge.RunFailed || runs[0].Error == "" || runs[0].TurnID != nil {
		t.Fatalf("runs %+v", runs)
	}
	if !e.get(sc).Paused {
		t.Fatal("the schedule of a deleted agent is not paused")
	}
	e.clock.advance(time.Second)
	if fired, _ := s.Tick(ctx); len(fired) != 0 {
		t.Fatalf("fired %v after pausing", fired)
	}
}

// TestBusySessionSkipsTheRun: a run on a session busy with another turn
// is recorded skipped; the schedule keeps its cadence.
func TestBusySessionSkipsTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	busy := true
	e.run.startTurn = func() error {
		if busy {
			return forge.Errorf(forge.ErrTurnInProgress, "turn turn_x is still running in this session")
		}
		return nil
	}
	sid := "ses_shared"
	sc := e.schedule("", "1s", forge.CatchUpOnce, epoch.Add(time.Second), &sid)
	s := e.scheduler()
	e.clock.advance(time.Second)
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	e.run.mu.Lock()
	busy = false
	e.run.mu.Unlock()
	e.clock.advance(time.Second)
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	runs := e.runs(sc)
	if len(runs) != 2 || runs[0].Status != forge.RunSkipped || runs[0].Error == "" || runs[1].Status != forge.RunStarted ||
		*runs[1].SessionID != sid || e.run.sessions != 0 {
		t.Fatalf("runs %+v, sessions made %d", runs, e.run.sessions)
	}
	if e.get(sc).Paused {
		t.Fatal("a busy session paused the schedule")
	}
}

// TestStartAndClose: the loop fires on its own and Close waits for it.
func TestStartAndClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.clock.advance(time.Hour)
	sc := e.schedule("", "1s", forge.CatchUpOnce, epoch, nil)
	s := scheduler.New(scheduler.Config{Store: e.store, Runner: e.run, Clock: e.clock, Interval: 10 * time.Millisecond})
	s.Start()
	s.Start()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.runs(sc)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the loop fired nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := scheduler.New(scheduler.Config{}).Close(ctx); err != nil {
		t.Fatal("closing a scheduler never started:", err)
	}
}
