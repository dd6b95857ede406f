package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"time"
)

// WAL checkpoints.
//
// SQLite's automatic checkpoint runs inside the COMMIT that crosses its
// threshold, on the committing connection: here, the writer, so that one
// commit in a few hundred copied thousands of pages into the database and
// waited for two fsyncs while every queued write waited behind it. That was
// the long tail of the trivial turn. Every connection here has
// wal_autocheckpoint=0 instead, and a checkpointer goroutine owned by the
// Store checkpoints on its own connection:
//
//   - after the writer has committed, at most once per interval, a PASSIVE
//     checkpoint: it copies what it can without waiting for anyone, and
//     neither readers nor the writer wait for it. When it has copied
//     everything, no reader still needs the log and the writer did not
//     write meanwhile, the writer's next transaction starts the log over.
//   - under a steady stream of writes that last condition seldom holds and
//     the log keeps growing. Past restartFrames the checkpointer catches
//     up with a few more PASSIVE passes, each copying what was written
//     during the one before, then runs a RESTART checkpoint: new writes
//     wait while it copies the last few frames, syncs, and waits for
//     readers of the old log (at most its busy timeout, then it gives up
//     until the next round); the next write starts the log over. The
//     writer thus waits for a checkpoint once per restartFrames of log
//     (64 MiB: several seconds of turns), for a sync and a few pages, not
//     once per thousand pages for the copy of all of them.
//
// journal_size_limit bounds the file a reset log leaves on disk.

// Checkpointer settings.
const (
	checkpointInterval = 250 * time.Millisecond
	// 16,384 pages of 4 KiB: 64 MiB of log.
	restartFrames = 16384
	// A catch-up pass that found fewer new frames than this is close
	// enough: the RESTART copies the rest while writes wait.
	catchUpFrames       = 512
	maxCatchUpPasses    = 4
	walSizeLimit        = 64 << 20
	checkpointerTimeout = 200 * time.Millisecond // busy_timeout of its connection
)

type checkpointer struct {
	db            *sql.DB
	interval      time.Duration
	restartFrames int64
	kick          chan struct{} // capacity 1: the writer committed since the last round
	quit          chan struct{}
	done          chan struct{}
	afterRound    func() // nil, or called after each round (tests)

	// For tests: PASSIVE passes run, RESTART checkpoints completed, last
	// error.
	passives, restarts atomic.Int64
	lastErr            atomic.Pointer[error]
}

// newCheckpointer starts a checkpointer on db (a pool of one connection to
// the database, which it owns).
func newCheckpointer(db *sql.DB, interval time.Duration, restartFrames int64, afterRound func()) *checkpointer {
	c := &checkpointer{
		db:            db,
		afterRound:    afterRound,
		interval:      interval,
		restartFrames: restartFrames,
		kick:          make(chan struct{}, 1),
		quit:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	go c.run()
	return c
}

// committed tells the checkpointer that the log has grown; it never
// blocks.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// stop ends the checkpointer (a round under way finishes first) and closes
// its connection.
func (c *checkpointer) stop() error {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	<-c.done
	return c.db.Close()
}

func (c *checkpointer) run() {
	defer close(c.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	last := time.Now() // no round before one interval has passed
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			return
		}
		// Commits that come during the wait are covered by this round; a
		// commit after it has begun kicks the next.
		if wait := c.interval - time.Since(last); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.quit:
				return
			}
		}
		last = time.Now()
		if err := c.round(); err != nil {
			c.lastErr.Store(&err)
		}
		if c.afterRound != nil {
			c.afterRound()
		}
	}
}

// round runs a PASSIVE checkpoint and, when the log is too long, the
// catch-up passes and the RESTART checkpoint.
func (c *checkpointer) round() error {
	// Nothing here observes the Store's callers: a round only ends early
	// with the checkpointer's own busy timeout.
	ctx := context.Background()
	_, frames, err := c.checkpoint(ctx, "PASSIVE")
	if err != nil {
		return err
	}
	c.passives.Add(1)
	if frames < c.restartFrames {
		return nil
	}
	for range maxCatchUpPasses {
		_, now, err := c.checkpoint(ctx, "PASSIVE")
		if err != nil {
			return err
		}
		c.passives.Add(1)
		grown := now - frames
		frames = now
		if grown < catchUpFrames {
			break
		}
	}
	busy, _, err := c.checkpoint(ctx, "RESTART")
	if err != nil {
		return err
	}
	if !busy {
		c.restarts.Add(1)
	}
	return nil
}

// checkpoint runs a checkpoint of the given mode; busy reports that it
// gave up waiting for readers or the writer, frames is the length of the
// log it found.
func (c *checkpointer) checkpoint(ctx context.Context, mode string) (busy bool, frames int64, err error) {
	var b, copied int64
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&b, &frames, &copied); err != nil {
		return false, 0, fmt.Errorf("sqlite: checkpoint %s: %w", mode, err)
	}
	return b != 0, frames, nil
}
