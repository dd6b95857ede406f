// Package bgloop owns a component's one background goroutine: started at
// most once, stopped and waited for by Close (the scheduler, the
// retention sweeper).
package bgloop

import (
	"context"
	"sync"
)

// Loop runs one goroutine. The zero value is ready.
type Loop struct {
	mu     sync.Mutex // guards the following
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine of its own until its context is
// cancelled by Close; a second call does nothing.
func (l *Loop) Start(run func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
}

// Close cancels the goroutine and waits for it to return (bounded by
// ctx). Before Start it does nothing.
func (l *Loop) Close(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
