// Package scheduler fires schedules (API.md, "Schedules"): every replica
// runs one Scheduler, which polls the store for due schedules and claims
// each slot with a compare-and-swap on the schedule's next_run_at, the
// run row written in the same transaction, so a slot fires once across
// replicas and restarts. The claim comes first, the turn second: a
// replica that dies between them leaves the run pending, never a second
// turn (at most once).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/bgloop"
)

// Store is what the scheduler needs of the store.
type Store interface {
	GetSchedule(ctx context.Context, tenant, id string) (*forge.Schedule, error)
	UpdateSchedule(ctx context.Context, s *forge.Schedule, expectNext time.Time) error
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]*forge.Schedule, error)
	ClaimScheduleSlot(ctx context.Context, c *forge.ScheduleClaim) (bool, error)
	UpdateScheduleRun(ctx context.Context, r *forge.ScheduleRun) error
	StaleRuns(ctx context.Context, before time.Time, limit int) ([]*forge.ScheduleRun, error)
}

// Runner starts the turns of runs: the scheduler's view of the engine.
// Its errors wrap forge's sentinels (ErrNotFound for an agent or session
// that is gone, ErrTurnInProgress for a busy session).
type Runner interface {
	// NewSession creates a direct session of agent for run runID of
	// schedule scheduleID and returns its id; called again for the same
	// run (a run fired again after its firer stopped), it returns the
	// same session.
	NewSession(ctx context.Context, tenant, agent, scheduleID, runID string) (string, error)
	// StartTurn starts the run's turn on the session (it runs in the
	// background) and returns it as created; called again for the same
	// run, it returns the turn the first call created.
	StartTurn(ctx context.Context, tenant, sessionID, scheduleID, runID string, input []forge.Input) (*forge.Turn, error)
}

// Defaults of Config.
const (
	DefaultInterval = time.Second
	DefaultGrace    = time.Minute
	// batchSize is how many due schedules one poll takes.
	batchSize = 100
	// fireTimeout bounds starting one run's turn.
	fireTimeout = 30 * time.Second
)

// Config wires a Scheduler.
type Config struct {
	Store  Store
	Runner Runner
	Clock  forge.Clock
	IDs    forge.IDGen
	Logger *slog.Logger
	// Interval is how often the store is polled (0: DefaultInterval).
	Interval time.Duration
	// Grace is how late a slot may fire and still count as on time; a
	// later one is missed, and catch_up decides (0: DefaultGrace).
	Grace time.Duration
}

// Scheduler polls and fires. Start runs its goroutine; Close stops it and
// waits for it.
type Scheduler struct {
	cfg Config
	log *slog.Logger

	bg bgloop.Loop
}

// New returns a scheduler for cfg; it does nothing before Start.
func New(cfg Config) *Scheduler {
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.IDs == nil {
		cfg.IDs = forge.NewULIDGen(cfg.Clock)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	return &Scheduler{cfg: cfg, log: cfg.Logger}
}

// Start starts polling; a second call does nothing.
func (s *Scheduler) Start() { s.bg.Start(s.loop) }

// Close stops polling and waits for the poll under way (bounded by ctx).
func (s *Scheduler) Close(ctx context.Context) error { return s.bg.Close(ctx) }

func (s *Scheduler) loop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("scheduler: poll failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick fires every schedule due at the clock's now once (what the loop
// does each Interval) and returns the runs this scheduler fired. Exported
// for tests, which drive it with a fake clock.
func (s *Scheduler) Tick(ctx context.Context) ([]*forge.ScheduleRun, error) {
	now := s.cfg.Clock.Now().UTC()
	due, err := s.cfg.Store.DueSchedules(ctx, now, batchSize)
	if err != nil {
		return nil, err
	}
	var fired []*forge.ScheduleRun
	for _, sc := range due {
		if ctx.Err() != nil {
			break
		}
		run, err := s.claim(ctx, sc, now)
		if err != nil {
			s.log.Warn("scheduler: claim failed", "tenant", sc.Tenant, "schedule_id", sc.ID, "err", err)
			continue
		}
		if run == nil {
			continue
		}
		// The slot is ours: the turn starts even if Close is under way
		// (bounded), so that a claimed run does not stay pending.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fireTimeout)
		s.fire(fctx, sc, run)
		cancel()
		fired = append(fired, run)
	}
	return append(fired, s.refire(ctx, now)...), nil
}

// staleAfter is how long a run may stay pending before it counts as
// abandoned by its firer: well past the bound of one firing.
const staleAfter = 2 * fireTimeout

// refire fires again the runs whose firer stopped between claiming the
// slot and recording the turn (a replica killed, a store outage): the
// slot stays fired once, and the Runner's idempotency (session and turn
// keyed by the run) makes a second firing of a run that did start its
// turn find that turn instead of starting another.
func (s *Scheduler) refire(ctx context.Context, now time.Time) []*forge.ScheduleRun {
	stale, err := s.cfg.Store.StaleRuns(ctx, now.Add(-staleAfter), batchSize)
	if err != nil {
		s.log.Warn("scheduler: reading stale runs failed", "err", err)
		return nil
	}
	var fired []*forge.ScheduleRun
	for _, run := range stale {
		if ctx.Err() != nil {
			break
		}
		sc, err := s.cfg.Store.GetSchedule(ctx, run.Tenant, run.ScheduleID)
		if err != nil {
			// A schedule deleted meanwhile takes its runs with it.
			continue
		}
		if sc.SessionID == nil {
			run.SessionID = nil // made again, or found, from the run's id
		}
		s.log.Info("scheduler: firing a run its firer left pending", "tenant", run.Tenant, "schedule_id", run.ScheduleID, "run_id", run.ID)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fireTimeout)
		s.fire(fctx, sc, run)
		cancel()
		fired = append(fired, run)
	}
	return fired
}

// claim takes the schedule's due slot and returns the run it recorded,
// or nil when another replica took it or the slots were skipped.
func (s *Scheduler) claim(ctx context.Context, sc *forge.Schedule, now time.Time) (*forge.ScheduleRun, error) {
	spec, err := Parse(sc.Cron, sc.Every, sc.Timezone)
	if err != nil {
		// Stored specs were checked when written; one that no longer
		// parses (a zone the system dropped) pauses its schedule.
		s.pause(ctx, sc.Tenant, sc.ID, fmt.Sprintf("its cadence no longer parses: %v", err))
		return nil, err
	}
	last, next, capped := spec.Due(sc.NextRunAt, now)
	if next.IsZero() {
		// A cron with no slot left: park it far away rather than poll it.
		next = now.AddDate(100, 0, 0)
	}
	onTime := !capped && now.Sub(last) <= s.cfg.Grace
	c := &forge.ScheduleClaim{Tenant: sc.Tenant, ScheduleID: sc.ID, Slot: sc.NextRunAt, Next: next}
	if onTime || sc.CatchUp != forge.CatchUpSkip {
		c.Run = &forge.ScheduleRun{ID: s.cfg.IDs.New(forge.PrefixScheduleRun), Tenant: sc.Tenant, ScheduleID: sc.ID,
			Slot: last, FiredAt: now, SessionID: sc.SessionID, Status: forge.RunPending}
	}
	ok, err := s.cfg.Store.ClaimScheduleSlot(ctx, c)
	if err != nil || !ok {
		return nil, err
	}
	return c.Run, nil
}

// fire starts the run's turn and records how that went.
func (s *Scheduler) fire(ctx context.Context, sc *forge.Schedule, run *forge.ScheduleRun) {
	log := s.log.With("tenant", sc.Tenant, "schedule_id", sc.ID, "slot", run.Slot)
	sid := ""
	if sc.SessionID != nil {
		sid = *sc.SessionID
	} else {
		id, err := s.cfg.Runner.NewSession(ctx, sc.Tenant, sc.Agent, sc.ID, run.ID)
		if err != nil {
			s.failed(ctx, sc, run, fmt.Errorf("creating a session of agent %q: %w", sc.Agent, err))
			return
		}
		sid = id
		run.SessionID = &sid
	}
	turn, err := s.cfg.Runner.StartTurn(ctx, sc.Tenant, sid, sc.ID, run.ID, sc.Input)
	switch {
	case errors.Is(err, forge.ErrTurnInProgress):
		// EngineRunner enqueues behind a running turn; a Runner that
		// cannot is refused here, and the run is skipped.
		run.Status, run.Error = forge.RunSkipped, "the session was busy with another turn: "+err.Error()
	case err != nil:
		s.failed(ctx, sc, run, fmt.Errorf("starting the turn: %w", err))
		return
	default:
		run.Status, run.TurnID = forge.RunStarted, &turn.ID
	}
	if err := s.cfg.Store.UpdateScheduleRun(ctx, run); err != nil {
		log.Warn("scheduler: recording the run failed", "err", err)
	}
}

// failed records a run that started no turn. When what the schedule names
// is gone (its agent deleted, its session deleted), the schedule is paused:
// it would fail at every slot, and a paused schedule keeps its runs for
// the user to see why (they resume or delete it).
func (s *Scheduler) failed(ctx context.Context, sc *forge.Schedule, run *forge.ScheduleRun, err error) {
	run.Status, run.Error = forge.RunFailed, err.Error()
	if uerr := s.cfg.Store.UpdateScheduleRun(ctx, run); uerr != nil {
		s.log.Warn("scheduler: recording the run failed", "tenant", sc.Tenant, "schedule_id", sc.ID, "err", uerr)
	}
	if errors.Is(err, forge.ErrNotFound) {
		s.pause(ctx, sc.Tenant, sc.ID, err.Error())
	}
}

// pause pauses a schedule, re-reading it when a claim moved it meanwhile.
func (s *Scheduler) pause(ctx context.Context, tenant, id, why string) {
	for range 5 {
		sc, err := s.cfg.Store.GetSchedule(ctx, tenant, id)
		if err != nil {
			return // deleted meanwhile
		}
		if sc.Paused {
			return
		}
		sc.Paused, sc.UpdatedAt = true, s.cfg.Clock.Now().UTC()
		err = s.cfg.Store.UpdateSchedule(ctx, sc, sc.NextRunAt)
		if errors.Is(err, forge.ErrConflict) {
			continue
		}
		if err != nil {
			s.log.Warn("scheduler: pausing failed", "tenant", tenant, "schedule_id", id, "err", err)
		} else {
			s.log.Info("scheduler: schedule paused", "tenant", tenant, "schedule_id", id, "why", why)
		}
		return
	}
}
