package engine

import (
	"context"
	"sync/atomic"
	"time"
)

// Defaults of Config.DeltaLinger and Config.DeltaMaxHold.
const (
	defaultDeltaLinger  = time.Millisecond
	defaultDeltaMaxHold = 500 * time.Microsecond
)

// lingerer writes a stream's held deltas when its provider waits for the
// model (forge.StreamWaits): once the wait has lasted DeltaLinger, on a
// timer's goroutine while the executor is blocked in the provider. A wait
// that ends sooner (the model's next bytes were on their way: a reply
// written in a few pieces) writes nothing, and the deltas share the next
// write. The executor settles the wait at the stream's next event or its
// end, before it touches the thread's batch again: it stops the timer, or
// waits for the write the timer began. Whatever it waits, the write is
// never later than it would be written at once. A batch that opens a part
// (its first row and first delta) is written at the first wait without
// lingering: that delta is the one a reader waits for, and the write is
// one per part, not per delta.
type lingerer struct {
	th     *thread
	linger time.Duration // < 0: write at once
	abort  context.CancelCauseFunc

	// The pending wait, owned by the executor; nil when none.
	state *atomic.Int32 // waitLingering, then waitReleased (by the timer) or waitSettled
	timer *time.Timer
	done  chan struct{} // closed when the timer's write is over
}

const (
	waitLingering int32 = iota
	waitReleased
	waitSettled
)

// release writes the held deltas; a failure aborts the model call.
func (l *lingerer) release() {
	if l.th.releaseHeld(); l.th.heldErr != nil {
		l.abort(l.th.heldErr)
	}
}

// wait is the stream's StreamWaits.Wait.
func (l *lingerer) wait() {
	th := l.th
	if l.state != nil || th.w.held == 0 || th.heldErr != nil {
		return // a wait is pending already, or nothing to write
	}
	if l.linger < 0 || len(th.w.opened) > 0 {
		// A part's first delta is what a reader waits for: its row and
		// the delta are written now, not after a linger.
		l.release()
		return
	}
	st, done := new(atomic.Int32), make(chan struct{})
	l.state, l.done = st, done
	l.timer = time.AfterFunc(l.linger, func() {
		if st.CompareAndSwap(waitLingering, waitReleased) {
			l.release()
			close(done)
		}
	})
}

// settle ends the pending wait: after it the executor owns the batch.
func (l *lingerer) settle() {
	if l.state == nil {
		return
	}
	if l.state.CompareAndSwap(waitLingering, waitSettled) {
		l.timer.Stop()
	} else {
		<-l.done
	}
	l.state, l.timer, l.done = nil, nil, nil
}
