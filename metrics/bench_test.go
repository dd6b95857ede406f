package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/metrics"
)

// BenchmarkTrivialTurnMetrics is what the metrics do for a trivial turn:
// the engine's observer calls for one model call and the store timer for
// its three writes.
func BenchmarkTrivialTurnMetrics(b *testing.B) {
	m := metrics.New(metrics.Options{})
	end := engine.TurnEnd{Status: forge.TurnDone, Duration: time.Millisecond}
	callEnd := engine.ModelCallEnd{Finish: forge.FinishStop, Usage: forge.Usage{InputTokens: 10, OutputTokens: 2},
		FirstToken: 10 * time.Microsecond, Duration: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		ctx := m.TurnStarted(context.Background(), engine.TurnStart{})
		mctx := m.ModelCallStarted(ctx, engine.ModelCallStart{})
		m.ModelCallEnded(mctx, callEnd)
		m.TurnEnded(ctx, end)
		for range 3 {
			m.ObserveStoreWrite(100*time.Microsecond, nil)
		}
	}
}
