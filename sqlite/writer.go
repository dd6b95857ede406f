package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge/internal/storeutil"
)

// Group commit.
//
// Every write goes to one goroutine that owns the write connection. It
// runs whatever calls are queued (up to maxGroup) in ONE transaction, so a
// group pays for one BEGIN and one COMMIT (and writes each page it
// touches once) however many calls it holds. A call that fails (a fence,
// a conflict) must leave nothing behind while the others land: the group
// first runs without savepoints, betting that every call succeeds; when
// one fails, the group is rolled back and runs again with each call inside
// its own SAVEPOINT, rolled back alone if it fails. No call learns its
// outcome before the shared COMMIT has succeeded: success and failure
// alike are reported after it, so a failure that depended on another
// call's uncommitted work is never reported for a group that did not
// commit.
//
// The writer never waits for company: a lone call is committed at once,
// and a group forms only from the calls that queued while the previous
// group was being written.

// maxGroup caps the calls in one transaction, bounding how long the first
// call of a group waits for the others.
const maxGroup = 64

// errClosed answers calls made after Close: the database is gone.
var errClosed = storeutil.DBError("sqlite", errors.New("store is closed"))

// Request states: the writer takes a request, or its caller abandons it
// while it is still queued; never both.
const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

type writeReq struct {
	ctx   context.Context
	fn    func(t *tx) error
	state atomic.Int32
	done  chan struct{}

	// Set by the writer before done is closed.
	err      error
	panicked any
	// effects are what the call's last run asked to do once its writes
	// are committed (tx.after): run before done is closed, never for a
	// call whose writes did not land.
	effects []func()
}

type writer struct {
	conn   *sql.Conn
	dc     driver.ConnPrepareContext // conn's driver connection, inside conn.Raw
	broken error                     // why dc could not be had
	ctx    context.Context           // statements run under it: never cancelled
	stmts  map[string]wstmt
	nv     []driver.NamedValue // arguments of the statement being run
	reqs   chan *writeReq      // unbuffered: waiting callers are parked senders
	quit   chan struct{}
	done   chan struct{}

	group []*writeReq
	tx    tx
	cur   *writeReq // the call whose fn is running

	// committed is called after each successful commit (the checkpointer's
	// kick: it never blocks).
	committed func()

	// Counters for tests: transactions committed, calls they held.
	commits, committedCalls atomic.Int64
}

// newWriter starts the writer on conn. It runs statements on the driver
// connection directly (inside conn.Raw, for as long as it runs): the
// database/sql layer would cost more than some of the statements.
func newWriter(conn *sql.Conn, committed func(), queue int) *writer {
	w := &writer{
		committed: committed,
		conn:      conn,
		ctx:       context.Background(),
		stmts:     map[string]wstmt{},
		reqs:      make(chan *writeReq, queue),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		group:     make([]*writeReq, 0, maxGroup),
	}
	w.tx = tx{ctx: w.ctx, w: w}
	go func() {
		defer close(w.done)
		err := conn.Raw(func(dc any) error {
			c, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return fmt.Errorf("sqlite: driver connection %T cannot prepare statements", dc)
			}
			w.dc = c
			w.run()
			w.closeStmts()
			return nil
		})
		if err != nil {
			w.broken = err
			w.run() // fails every call until stopped
		}
	}()
	return w
}

// stop makes the writer finish the group it is writing and exit; calls
// still queued fail with errClosed. The caller then owns the connection.
func (w *writer) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
}

func (w *writer) closeStmts() {
	for _, st := range w.stmts {
		_ = st.Close()
	}
	w.stmts = nil
}

// close closes the connection (after stop).
func (w *writer) close() error { return w.conn.Close() }

// write runs fn in a write transaction, possibly shared with other calls,
// and returns fn's error, or the commit's. fn may run more than once (after
// a failure that cost the group its transaction); only its last run's
// writes count. A nil error means fn's writes are committed.
//
// fn runs on the writer goroutine: it must not call write (it would wait
// for itself) nor block. Its statements do not observe ctx: an interrupted
// statement could roll back the whole group. ctx only abandons a call
// still waiting its turn.
func (s *Store) write(ctx context.Context, fn func(t *tx) error) error {
	return s.writes.Time(func() error { return s.writeNow(ctx, fn) })
}

// ObserveWrites makes every write call f with how long it took, from the
// call to its answer (waiting for the writer included), and its error.
// nil stops it. f runs on the caller's goroutine and must return quickly.
func (s *Store) ObserveWrites(f func(d time.Duration, err error)) { s.writes.Set(f) }

func (s *Store) writeNow(ctx context.Context, fn func(t *tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := s.w
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case w.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.quit:
		return errClosed
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		<-r.done // already running: its outcome is the truth
	}
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.err
}

func (w *writer) run() {
	for {
		select {
		case r := <-w.reqs:
			w.group = append(w.group[:0], r)
		case <-w.quit:
			return
		}
	collect:
		for len(w.group) < maxGroup {
			select {
			case r := <-w.reqs:
				w.group = append(w.group, r)
			default:
				break collect
			}
		}
		w.runGroup(w.group)
		clear(w.group)
	}
}

// runGroup writes the calls of one group and reports to each of them.
func (w *writer) runGroup(group []*writeReq) {
	live := group[:0]
	for _, r := range group {
		if !r.state.CompareAndSwap(reqQueued, reqTaken) {
			continue // abandoned by its caller
		}
		if err := r.ctx.Err(); err != nil {
			r.reply(err)
			continue
		}
		live = append(live, r)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		if w.broken != nil {
			live[0].reply(w.broken)
			return
		}
		w.runAlone(live[0])
		return
	}
	if w.broken != nil {
		for _, r := range live {
			r.reply(w.broken)
		}
		return
	}
	if !w.runOptimistic(live) {
		w.runSavepoints(live)
	}
}

// runOptimistic writes a group without savepoints, betting that no call
// fails: a savepoint costs a copy of every page its call modifies that an
// earlier call of the group already had. When a call fails, it rolls the
// group back, tells nobody and returns false: the group must run again
// with savepoints.
func (w *writer) runOptimistic(live []*writeReq) bool {
	if err := w.exec("BEGIN IMMEDIATE"); err != nil {
		for _, r := range live {
			r.reply(storeutil.DBError("sqlite: begin", err))
		}
		return true
	}
	for _, r := range live {
		if err := w.call(r); err != nil {
			_ = w.exec("ROLLBACK")
			r.panicked = nil
			return false
		}
	}
	w.commit(live)
	return true
}

// runSavepoints writes a group with each call inside its own savepoint, so
// that a failing call rolls back only its own work.
func (w *writer) runSavepoints(live []*writeReq) {
	if err := w.exec("BEGIN IMMEDIATE"); err != nil {
		for _, r := range live {
			r.reply(storeutil.DBError("sqlite: begin", err))
		}
		return
	}
	for _, r := range live {
		if err := w.exec("SAVEPOINT w"); err != nil {
			w.salvage(live, nil)
			return
		}
		r.err = w.call(r)
		if r.err == nil {
			if err := w.exec("RELEASE w"); err != nil {
				w.salvage(live, nil)
				return
			}
			continue
		}
		// ROLLBACK TO keeps the savepoint open; RELEASE pops it.
		if err := w.exec("ROLLBACK TO w"); err != nil {
			// The failure took the whole transaction with it.
			w.salvage(live, r)
			return
		}
		if err := w.exec("RELEASE w"); err != nil {
			w.salvage(live, r)
			return
		}
	}
	w.commit(live)
}

// commit commits the open transaction and reports to its calls: their own
// results, or the commit's failure to all of them.
func (w *writer) commit(live []*writeReq) {
	if err := w.exec("COMMIT"); err != nil {
		_ = w.exec("ROLLBACK")
		for _, r := range live {
			r.reply(storeutil.DBError("sqlite: commit", err))
		}
		return
	}
	w.commits.Add(1)
	w.committedCalls.Add(int64(len(live)))
	w.committed()
	// Every effect before any reply: no caller may learn of a write before
	// the cache shows all of its group.
	for _, r := range live {
		if r.err == nil {
			r.runEffects()
		}
	}
	for _, r := range live {
		r.reply(r.err)
	}
}

// salvage recovers from a group whose transaction was lost: nothing of the
// group is committed, so every call but the culprit (whose failure lost
// it, and which gets its own error; nil when unknown) runs again in its own
// transaction, in the original order, as if the group had never formed.
func (w *writer) salvage(live []*writeReq, culprit *writeReq) {
	_ = w.exec("ROLLBACK")
	for _, r := range live {
		if r == culprit {
			r.reply(r.err)
			continue
		}
		r.err, r.panicked = nil, nil
		w.runAlone(r)
	}
}

// runAlone writes one call in its own transaction.
func (w *writer) runAlone(r *writeReq) {
	if err := w.exec("BEGIN IMMEDIATE"); err != nil {
		r.reply(storeutil.DBError("sqlite: begin", err))
		return
	}
	if err := w.call(r); err != nil {
		_ = w.exec("ROLLBACK")
		r.reply(err)
		return
	}
	if err := w.exec("COMMIT"); err != nil {
		_ = w.exec("ROLLBACK")
		r.reply(storeutil.DBError("sqlite: commit", err))
		return
	}
	w.commits.Add(1)
	w.committedCalls.Add(1)
	w.committed()
	r.runEffects()
	r.reply(nil)
}

// errPanicked stands for a call that panicked; its caller re-panics.
var errPanicked = errors.New("sqlite: write panicked")

// call runs r.fn, turning a panic into an error for the group and a panic
// for r's caller.
func (w *writer) call(r *writeReq) (err error) {
	defer func() {
		w.cur = nil
		if p := recover(); p != nil {
			r.panicked = p
			err = errPanicked
		}
	}()
	w.cur = r
	clear(r.effects)
	r.effects = r.effects[:0] // a rerun starts over
	return r.fn(&w.tx)
}

// runEffects runs a committed call's effects.
func (r *writeReq) runEffects() {
	for _, f := range r.effects {
		f()
	}
}

func (r *writeReq) reply(err error) {
	r.err = err
	close(r.done)
}
