package forge

import (
	"context"
	"time"
)

// Catch-up policies of a schedule: what a replica does with slots that
// passed while no replica ran (API.md, "Schedules").
const (
	// CatchUpOnce fires one run for all the missed slots, then resumes
	// the cadence (the default).
	CatchUpOnce = "once"
	// CatchUpSkip fires none of them and waits for the next slot.
	CatchUpSkip = "skip"
)

// TriggerSchedule is the Type of a TurnTrigger on a turn a schedule
// started.
const TriggerSchedule = "schedule"

// Statuses of a schedule run.
const (
	// RunPending: the slot was claimed; the turn has not been started
	// yet (or the replica stopped before it could start it).
	RunPending = "pending"
	// RunStarted: the run's turn was created (TurnID); the turn's own
	// status says how it went.
	RunStarted = "started"
	// RunFailed: no turn could be started (Error says why).
	RunFailed = "failed"
	// RunSkipped: the schedule's session was busy with another turn.
	RunSkipped = "skipped"
)

// Schedule starts turns of an agent at the slots of a cron expression
// (in a time zone) or of a fixed interval (Every), in a new session each
// run or in one session (SessionID).
type Schedule struct {
	ID     string `json:"id"`
	Tenant string `json:"-"`
	Agent  string `json:"agent"`
	// Cron is a standard five-field cron expression; Every an interval
	// (a Go duration, at least 1s). Exactly one is set.
	Cron  string `json:"cron,omitempty"`
	Every string `json:"every,omitempty"`
	// Timezone is the IANA zone Cron is read in ("UTC" by default).
	Timezone string `json:"timezone"`
	// Input is each run's input: one message item.
	Input []Input `json:"input"`
	// SessionID is the session every run continues; nil: a new session
	// of Agent each run.
	SessionID *string `json:"session_id"`
	CatchUp   string  `json:"catch_up"`
	Paused    bool    `json:"paused"`
	// NextRunAt is the next slot to fire (millisecond precision). A
	// claim moves it forward (ScheduleStore.ClaimScheduleSlot).
	NextRunAt time.Time `json:"next_run_at"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ScheduleRun is one fired slot of a schedule.
type ScheduleRun struct {
	ID         string `json:"id"`
	Tenant     string `json:"-"`
	ScheduleID string `json:"schedule_id"`
	// Slot is the scheduled time the run stands for (the latest of the
	// slots it fired for, after missed ones).
	Slot    time.Time `json:"slot"`
	FiredAt time.Time `json:"fired_at"`
	// SessionID and TurnID are the run's turn, once started.
	SessionID *string `json:"session_id"`
	TurnID    *string `json:"turn_id"`
	Status    string  `json:"status"`
	// Error says why a failed or skipped run started no turn.
	Error string `json:"error,omitempty"`
	// TurnStatus is the status of the run's turn when it was read (the
	// API fills it in; the store does not keep it).
	TurnStatus string `json:"turn_status,omitempty"`
}

// ScheduleClaim takes one slot of a schedule: it moves NextRunAt from
// Slot to Next, and records Run, in one transaction.
type ScheduleClaim struct {
	Tenant     string
	ScheduleID string
	// Slot is the NextRunAt the claimer read; the claim fails unless it
	// is still the schedule's NextRunAt and the schedule is not paused.
	Slot time.Time
	Next time.Time
	// Run is the run recorded with the claim (nil: the slots are skipped
	// without a run, catch_up "skip").
	Run *ScheduleRun
}

// ScheduleStore keeps schedules and their runs. Every method is scoped to
// a tenant but DueSchedules, the scheduler's deliberate path across
// tenants.
type ScheduleStore interface {
	// CreateSchedule inserts s, whose ID and times the caller set.
	CreateSchedule(ctx context.Context, s *Schedule) error
	GetSchedule(ctx context.Context, tenant, id string) (*Schedule, error)
	// ListSchedules lists a tenant's schedules, oldest first.
	ListSchedules(ctx context.Context, tenant string, opts ListOptions) ([]*Schedule, string, error)
	// UpdateSchedule rewrites the mutable fields of s (all but ID,
	// Tenant, Agent and CreatedAt) provided the stored NextRunAt is still
	// expectNext: ErrConflict when a claim (or another update) moved it
	// meanwhile, so an update never puts back a slot already fired.
	// ErrNotFound when there is no such schedule.
	UpdateSchedule(ctx context.Context, s *Schedule, expectNext time.Time) error
	// DeleteSchedule deletes a schedule and its runs (their turns stay).
	DeleteSchedule(ctx context.Context, tenant, id string) error
	// DueSchedules lists, across tenants, the schedules not paused whose
	// NextRunAt is at or before now, earliest first, at most limit.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]*Schedule, error)
	// ClaimScheduleSlot applies c (compare-and-swap of NextRunAt) and
	// reports whether it did; false, with nothing written, when the slot
	// was claimed by someone else, the schedule paused, changed or
	// deleted. Of concurrent claims of one slot exactly one succeeds.
	ClaimScheduleSlot(ctx context.Context, c *ScheduleClaim) (bool, error)
	// UpdateScheduleRun records a run's outcome: SessionID, TurnID,
	// Status and Error. ErrNotFound when the run is gone.
	UpdateScheduleRun(ctx context.Context, r *ScheduleRun) error
	// ListScheduleRuns lists a schedule's runs, oldest slot first;
	// ErrNotFound when the schedule does not exist.
	ListScheduleRuns(ctx context.Context, tenant, scheduleID string, opts ListOptions) ([]*ScheduleRun, string, error)
	// StaleRuns crosses tenants: the runs still pending that were fired
	// before before (whoever claimed their slot stopped before it
	// recorded the turn), oldest first, with Tenant and ScheduleID set.
	StaleRuns(ctx context.Context, before time.Time, limit int) ([]*ScheduleRun, error)
}

// Cadence is a schedule's parsed cron or every.
type Cadence interface {
	// Next is the first slot strictly after t, in UTC at millisecond
	// precision; the zero time when there is none.
	Next(t time.Time) time.Time
}

// CadenceParser checks and parses schedules' cadences: a backend, since
// cron parsing is a library's (scheduler.Cadences). Its errors wrap
// ErrInvalid.
type CadenceParser interface {
	ParseCadence(cron, every, timezone string) (Cadence, error)
}
