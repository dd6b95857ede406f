package engine

import (
	"runtime"
	"sync"
	"testing"
)

func TestWorkersReuseGoroutines(t *testing.T) {
	w := newWorkers()
	const n = 200
	for range n {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
		// Let the worker reach its wait for the next run.
		for w.idle.Load() == 0 {
			runtime.Gosched()
		}
		runtime.Gosched()
	}
	// A worker found idle takes the next run; one that has counted itself
	// idle but not reached its wait yet is missed, and another starts.
	if got := w.started.Load(); got > n/2 {
		t.Fatalf("started %d goroutines for %d runs one after the other", got, n)
	}
	w.stop()
	if got := w.idle.Load(); got != 0 {
		t.Fatalf("%d workers still idle after stop", got)
	}
}

func TestWorkersKeepAtMostMaxIdle(t *testing.T) {
	w := newWorkers()
	const n = 3 * maxIdleWorkers
	release := make(chan struct{})
	var started, ended sync.WaitGroup
	started.Add(n)
	ended.Add(n)
	for range n {
		w.run(func() { started.Done(); <-release; ended.Done() })
	}
	started.Wait() // all n busy at once: n goroutines
	if got := w.started.Load(); got != n {
		t.Fatalf("started %d goroutines for %d concurrent runs", got, n)
	}
	close(release)
	ended.Wait()
	// Workers go idle or exit: no more than the bound stays.
	for i := 0; w.live.Load() > maxIdleWorkers; i++ {
		if i > 1e6 {
			t.Fatalf("%d workers left after a burst; at most %d should stay", w.live.Load(), maxIdleWorkers)
		}
		runtime.Gosched()
	}
	w.stop()
	if got := w.live.Load(); got != 0 {
		t.Fatalf("%d workers alive after stop", got)
	}
	if got := w.idle.Load(); got != 0 {
		t.Fatalf("%d workers still idle after stop", got)
	}
}

func TestWorkersRunAfterStop(t *testing.T) {
	w := newWorkers()
	w.stop()
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	w.stop() // twice is fine
}
