// Package retention deletes what outlived its retention (API.md,
// "Retention and listing"). A Sweeper expires direct sessions idle for
// longer than their agent's session TTL (or the server's default), then
// purges deleted sessions, in small transactions, with the files only
// they referenced, then returns freed space to the file system. It runs
// off the hot path, on one replica at a time where the store can lock.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/bgloop"
)

// Expirer deletes an expired session, refusing one in use again (the
// engine: it also drops what the process holds for the session).
type Expirer interface {
	ExpireSession(ctx context.Context, tenant, sessionID string, idleBefore time.Time) error
}

// Locker is a store that can make one replica sweep at a time.
type Locker interface {
	TryRetentionLock(ctx context.Context) (release func(), ok bool, err error)
}

// Defaults of Config.
const (
	DefaultInterval   = time.Minute
	DefaultPurgeAfter = 10 * time.Minute
	DefaultBatch      = 100
	DefaultBudget     = 500
	reclaimPages      = 1024
)

// Config wires a Sweeper.
type Config struct {
	Store forge.RetentionStore
	// Expirer expires sessions; nil: the store directly (forge prune,
	// with no server process to tell).
	Expirer Expirer
	Clock   forge.Clock
	Logger  *slog.Logger
	// DefaultTTL applies to sessions of agents without a TTL of their
	// own (--session-ttl); zero keeps them.
	DefaultTTL time.Duration
	// PurgeAfter is how long a deleted session's rows stay before they
	// are purged, so that a reader still streaming it ends cleanly.
	PurgeAfter time.Duration
	// Interval is the pause between rounds (0: DefaultInterval).
	Interval time.Duration
	// Batch is how many sessions a round expires and purges at most;
	// Budget how many rows one purge transaction deletes at most.
	Batch, Budget int
	// Pace is the pause after each of the sweep's writes, as a multiple
	// of the time the write took (0: 1, so the sweep holds the store's
	// writer at most half the time and a turn's write waits for at most
	// one of them; negative: no pause, for forge prune).
	Pace float64
}

// Stats counts what a round did.
type Stats struct {
	Expired, Purged, Rows, Files, Pages int
	// Conflicts counts sessions found idle but in use again by the time
	// they were expired.
	Conflicts int
	// Skipped is set when another replica held the sweep's lock.
	Skipped bool
}

// Sweeper runs rounds. Start runs its goroutine; Close stops it and waits.
type Sweeper struct {
	cfg Config
	log *slog.Logger

	bg bgloop.Loop
}

// New returns a sweeper for cfg; it does nothing before Start.
func New(cfg Config) *Sweeper {
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.PurgeAfter < 0 {
		cfg.PurgeAfter = 0
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.Expirer == nil {
		cfg.Expirer = cfg.Store
	}
	if cfg.Pace == 0 {
		cfg.Pace = 1
	}
	return &Sweeper{cfg: cfg, log: cfg.Logger}
}

// Start starts the rounds; a second call does nothing.
func (s *Sweeper) Start() { s.bg.Start(s.loop) }

// Close stops the rounds and waits for the one under way (bounded by ctx).
func (s *Sweeper) Close(ctx context.Context) error { return s.bg.Close(ctx) }

func (s *Sweeper) loop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	more := false
	for {
		if !more {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		st, err := s.Sweep(ctx, 0)
		// A full round leaves a backlog: the next one starts at once (each
		// transaction is short; the hot path's writes interleave).
		more = err == nil && (st.Expired+st.Conflicts >= s.cfg.Batch || st.Purged >= s.cfg.Batch)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("retention: sweep failed", "err", err)
		} else if st.Expired+st.Purged > 0 {
			s.log.Info("retention: swept", "expired", st.Expired, "purged", st.Purged, "rows", st.Rows,
				"files", st.Files, "pages", st.Pages)
		}
	}
}

// Sweep runs one round: it expires up to Batch idle sessions (olderThan,
// when set, replaces every TTL), purges up to Batch deleted sessions
// whole, and reclaims the space freed.
func (s *Sweeper) Sweep(ctx context.Context, olderThan time.Duration) (Stats, error) {
	var st Stats
	if l, ok := s.cfg.Store.(Locker); ok {
		release, ok, err := l.TryRetentionLock(ctx)
		if err != nil {
			return st, err
		}
		if !ok {
			st.Skipped = true
			return st, nil
		}
		defer release()
	}
	now := s.cfg.Clock.Now()
	idle, err := s.cfg.Store.ExpiredSessions(ctx, forge.ExpiryQuery{Now: now, DefaultTTL: s.cfg.DefaultTTL,
		OlderThan: olderThan, Limit: s.cfg.Batch})
	if err != nil {
		return st, err
	}
	for _, ses := range idle {
		// Refused when updated since it was listed: a turn won the race.
		var err error
		s.paced(ctx, func() {
			err = s.cfg.Expirer.ExpireSession(ctx, ses.Tenant, ses.ID, ses.UpdatedAt.Add(time.Microsecond))
		})
		switch {
		case err == nil:
			st.Expired++
		case errors.Is(err, forge.ErrConflict), errors.Is(err, forge.ErrNotFound):
			st.Conflicts++
		default:
			return st, err
		}
	}
	deleted, err := s.cfg.Store.DeletedSessions(ctx, now.Add(-s.cfg.PurgeAfter), s.cfg.Batch)
	if err != nil {
		return st, err
	}
	for _, ses := range deleted {
		for {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			var res forge.PurgeResult
			var err error
			s.paced(ctx, func() { res, err = s.cfg.Store.PurgeSession(ctx, ses.Tenant, ses.ID, s.cfg.Budget) })
			if err != nil {
				return st, err
			}
			st.Rows += res.Rows
			st.Files += res.Files
			if res.Done {
				st.Purged++
				break
			}
		}
	}
	if st.Purged > 0 {
		for {
			var n int
			var err error
			s.paced(ctx, func() { n, err = s.cfg.Store.ReclaimSpace(ctx, reclaimPages) })
			if err != nil {
				return st, err
			}
			st.Pages += n
			if n < reclaimPages {
				break
			}
		}
	}
	return st, nil
}

// paced runs write, then pauses Pace times as long as it took (less if ctx
// ends first).
func (s *Sweeper) paced(ctx context.Context, write func()) {
	start := time.Now()
	write()
	if s.cfg.Pace <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(float64(time.Since(start)) * s.cfg.Pace))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
