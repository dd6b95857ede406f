package engine

import (
	"sync"
	"sync/atomic"
)

// workers runs executions on goroutines it keeps for the next one. A
// turn's goroutine grows its stack to tens of KB (the history's conversion,
// the provider's request); a goroutine started for each turn copied its
// stack as it grew, twice a turn, about 2.5 % of forge serve's CPU in a
// trivial turn.
type workers struct {
	work chan func() // to an idle worker
	quit chan struct{}
	once sync.Once
	idle atomic.Int32
	wg   sync.WaitGroup
	// started counts the goroutines started, live those not ended (for
	// tests).
	started atomic.Int64
	live    atomic.Int32
}

// maxIdleWorkers bounds the goroutines kept waiting: a burst of turns
// leaves no more than this many behind.
const maxIdleWorkers = 16

func newWorkers() *workers {
	return &workers{work: make(chan func()), quit: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one.
func (w *workers) run(f func()) {
	select {
	case w.work <- f:
		return
	case <-w.quit:
		// Stopped: nothing waits for work any more.
		go f()
		return
	default:
	}
	w.wg.Add(1)
	w.started.Add(1)
	w.live.Add(1)
	go w.loop(f)
}

func (w *workers) loop(f func()) {
	defer w.wg.Done()
	defer w.live.Add(-1)
	for {
		f()
		f = nil
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.work:
			w.idle.Add(-1)
		case <-w.quit:
			w.idle.Add(-1)
			return
		}
	}
}

// stop ends the idle workers, and the busy ones once their work returns,
// and waits for them.
func (w *workers) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}
