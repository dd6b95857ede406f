package bgloop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoopRunsOnceAndCloseWaits: a second Start runs nothing more, Close
// returns once the goroutine has, and Close before Start is a no-op.
func TestLoopRunsOnceAndCloseWaits(t *testing.T) {
	var none Loop
	if err := none.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var l Loop
	var runs, ended atomic.Int32
	run := func(ctx context.Context) {
		runs.Add(1)
		<-ctx.Done()
		ended.Add(1)
	}
	l.Start(run)
	l.Start(run)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || ended.Load() != 1 {
		t.Fatalf("runs %d, ended %d", runs.Load(), ended.Load())
	}
	// A goroutine that does not stop: Close gives up with ctx.
	var stuck Loop
	release := make(chan struct{})
	stuck.Start(func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := stuck.Close(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Close of a stuck loop: %v", err)
	}
	close(release)
}
