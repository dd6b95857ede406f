package eventlog

import (
	"context"
	"fmt"
	"sync"

	"github.com/forge-runtime/forge"
)

// sequencer hands out one session's seqs. Its lock is held across seq
// assignment, commit and publish, so the three happen in seq order.
type sequencer struct {
	tenant  string
	session string

	mu       sync.Mutex // guards the following
	next     int64      // next seq to hand out, 0 before the first reservation
	reserved int64      // highest seq of the committed reservation
	// wrote is set once this process has written the session through
	// Update (its Prepare's view of the session is then its own to keep).
	wrote bool

	// The deltas QueueDelta took and no flush has published yet (with a
	// Fence only). They get their seqs when they are published, in the
	// order they were queued, before any later write of the session.
	outMu    sync.Mutex // guards the following; taken after mu
	out      []Draft
	flushing bool  // a flusher goroutine runs
	outErr   error // a failed seq reservation's error, for the next QueueDelta

	// unsent are events that have their seqs but that the bus did not
	// take (it was unreachable), in seq order (with a Fence; guarded by
	// mu). They are published before anything after them, and nothing
	// is committed above them until they are: a delta is never skipped
	// (the stream's links are Redis's, so a subscriber could not tell).
	unsent []forge.Event

	// folds are the session's parts still streaming, with the text the
	// bus took (textsofar.go; guarded by mu).
	folds folds
}

func (l *Log) sequencer(tenant, session string) *sequencer {
	l.mu.Lock()
	defer l.mu.Unlock()
	sq := l.seqs[session]
	if sq == nil {
		sq = &sequencer{tenant: tenant, session: session}
		l.seqs[session] = sq
	}
	return sq
}

// Forget drops the session's sequencer (its session was deleted). A later
// write would reserve a new block.
func (l *Log) Forget(sessionID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seqs, sessionID)
}

// Cursor returns a seq below every seq this Log will hand out for the
// session from now on (0 when it has handed out none): a subscription
// after it misses nothing written later.
func (l *Log) Cursor(sessionID string) int64 {
	l.mu.Lock()
	sq := l.seqs[sessionID]
	l.mu.Unlock()
	if sq == nil {
		return 0
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	return max(sq.next-1, 0)
}

// seqLocked hands out the next seq, committing a new reservation first when
// the current one is used up: no seq is published before it is reserved.
func (l *Log) seqLocked(ctx context.Context, sq *sequencer) (int64, error) {
	if sq.next == 0 || sq.next > sq.reserved {
		var hi int64
		err := l.retrying(ctx, func(ctx context.Context) error {
			var err error
			hi, err = l.store.ReserveSeqs(ctx, sq.tenant, sq.session, l.block)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("reserve seqs: %w", err)
		}
		sq.next, sq.reserved = hi-l.block+1, hi
	}
	s := sq.next
	sq.next++
	return s, nil
}
