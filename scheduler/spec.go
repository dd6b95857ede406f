package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/forge-runtime/forge"
)

// MinEvery is the shortest interval a schedule may have.
const MinEvery = time.Second

// Spec is a schedule's cadence: the slots of a cron expression in a time
// zone, or a fixed interval. Slots have millisecond precision (what every
// store keeps exactly).
type Spec struct {
	cron  cron.Schedule
	loc   *time.Location
	every time.Duration
}

// Parse checks a schedule's cadence: exactly one of cronExpr (standard
// five fields, or a descriptor such as @daily) and every (a Go duration of
// at least 1s, whole milliseconds), and tz (an IANA zone; "" is UTC). Its
// errors wrap forge.ErrInvalid.
func Parse(cronExpr, every, tz string) (*Spec, error) {
	switch {
	case cronExpr != "" && every != "":
		return nil, forge.Errorf(forge.ErrInvalid, "cron and every exclude each other: give one")
	case cronExpr == "" && every == "":
		return nil, forge.Errorf(forge.ErrInvalid, `a schedule needs cron (e.g. "0 8 * * 1-5") or every (e.g. "30s")`)
	}
	if tz == "" {
		tz = "UTC"
	}
	loc, err := LoadLocation(tz)
	if err != nil {
		return nil, err
	}
	if every != "" {
		d, err := time.ParseDuration(every)
		if err != nil {
			return nil, forge.Errorf(forge.ErrInvalid, "every %q is not a duration such as 30s, 5m or 1h", every)
		}
		if d < MinEvery {
			return nil, forge.Errorf(forge.ErrInvalid, "every must be at least %s, got %s", MinEvery, every)
		}
		if d%time.Millisecond != 0 {
			return nil, forge.Errorf(forge.ErrInvalid, "every must be a whole number of milliseconds, got %s", every)
		}
		return &Spec{every: d, loc: loc}, nil
	}
	// The zone is the schedule's timezone field, never the expression's.
	if strings.HasPrefix(cronExpr, "TZ=") || strings.HasPrefix(cronExpr, "CRON_TZ=") {
		return nil, forge.Errorf(forge.ErrInvalid, "cron must not name a zone (TZ=...): set timezone instead")
	}
	sched, err := cron.ParseStandard(cronExpr)
	if err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "cron %q is not a five-field cron expression (minute hour day-of-month month day-of-week): %v", cronExpr, err)
	}
	sp := &Spec{cron: sched, loc: loc}
	if sp.Next(time.Now()).IsZero() {
		return nil, forge.Errorf(forge.ErrInvalid, "cron %q never fires", cronExpr)
	}
	return sp, nil
}

// LoadLocation loads an IANA time zone; an unknown one is ErrInvalid.
func LoadLocation(tz string) (*time.Location, error) {
	if tz == "Local" {
		// The server's own zone is no fixed answer across replicas.
		return nil, forge.Errorf(forge.ErrInvalid, "timezone %q is not an IANA zone name such as Europe/Paris or UTC", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "timezone %q is not an IANA zone name such as Europe/Paris or UTC", tz)
	}
	return loc, nil
}

// IsInterval reports whether the spec is an interval (every).
func (s *Spec) IsInterval() bool { return s.every > 0 }

// Next is the first slot strictly after t: for an interval, t plus the
// interval (the slots of an interval are counted from its first); for
// cron, the next matching wall time in the zone. A wall time that does
// not exist (a DST gap) has no slot that day; one that happens twice (the
// hour repeated when clocks go back) has one slot, its first. The zero
// time when there is none within five years.
func (s *Spec) Next(t time.Time) time.Time {
	t = t.Truncate(time.Millisecond)
	if s.every > 0 {
		return t.Add(s.every).UTC()
	}
	n := t.In(s.loc)
	for range 4 {
		n = s.cron.Next(n)
		if n.IsZero() || !s.repeated(n) {
			break
		}
	}
	return n.UTC()
}

// repeated reports whether n's wall time also happened earlier (clocks
// went back within the last two hours).
func (s *Spec) repeated(n time.Time) bool {
	const wall = "2006-01-02T15:04:05"
	w := n.In(s.loc).Format(wall)
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if n.Add(-d).In(s.loc).Format(wall) == w {
			return true
		}
	}
	return false
}

// Due returns, for a schedule whose stored slot has come (slot <= now),
// the latest slot at or before now (the one a run stands for) and the
// first slot after now (the schedule's next). capped is true when the
// latest slot could not be found within a bound of iterations (a cron
// missed for a very long time): last is then slot itself.
func (s *Spec) Due(slot, now time.Time) (last, next time.Time, capped bool) {
	if s.every > 0 {
		k := now.Sub(slot) / s.every
		last = slot.Add(k * s.every).UTC()
		return last, last.Add(s.every).UTC(), false
	}
	last = slot
	for range maxCatchUpSteps {
		n := s.Next(last)
		if n.IsZero() || n.After(now) {
			return last, n, false
		}
		last = n
	}
	return slot, s.Next(now), true
}

// maxCatchUpSteps bounds the slots Due walks through.
const maxCatchUpSteps = 10000

// String describes the spec for logs.
func (s *Spec) String() string {
	if s.every > 0 {
		return fmt.Sprintf("every %s", s.every)
	}
	return fmt.Sprintf("cron in %s", s.loc)
}

// Cadences is the forge.CadenceParser of Parse.
type Cadences struct{}

var _ forge.CadenceParser = Cadences{}

// ParseCadence is Parse.
func (Cadences) ParseCadence(cron, every, tz string) (forge.Cadence, error) {
	s, err := Parse(cron, every, tz)
	if err != nil {
		return nil, err
	}
	return s, nil
}
