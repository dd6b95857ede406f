package opentelemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/opentelemetry"
	"github.com/forge-runtime/forge/opentelemetry/otlptest"
)

// BenchmarkTrivialTurnSpans is what the tracer does for a trivial turn
// (one model call, no tool): the observer calls the engine makes, with
// the spans batched and exported to a loopback receiver as forge serve
// exports them (the export runs in the background, included here).
func BenchmarkTrivialTurnSpans(b *testing.B) {
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlptest.New(b).URL())
	// A queue no burst fills: every span is exported, none dropped.
	b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1000000")
	tr, err := opentelemetry.New(context.Background(), opentelemetry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(context.Background())
	now := time.Now()
	start := engine.TurnStart{Tenant: "default", SessionID: "ses_01", TurnID: "turn_01", Agent: "echo", AgentID: "ag_01",
		AgentVersion: 1, Model: "scripted/echo", Start: now}
	end := engine.TurnEnd{Tenant: "default", SessionID: "ses_01", TurnID: "turn_01", Agent: "echo", Status: forge.TurnDone,
		Iterations: 1, Usage: forge.Usage{InputTokens: 10, OutputTokens: 2}, Duration: time.Millisecond, End: now}
	call := engine.ModelCallStart{SessionID: "ses_01", TurnID: "turn_01", ThreadID: "thr_01", Agent: "echo", Provider: "scripted",
		Model: "echo", Iteration: 1, Start: now}
	callEnd := engine.ModelCallEnd{Provider: "scripted", Model: "echo", Finish: forge.FinishStop,
		Usage: forge.Usage{InputTokens: 10, OutputTokens: 2}, FirstToken: 10 * time.Microsecond, Duration: time.Millisecond, End: now}
	b.ReportAllocs()
	for b.Loop() {
		ctx := tr.TurnStarted(context.Background(), start)
		mctx := tr.ModelCallStarted(ctx, call)
		tr.ModelCallEnded(mctx, callEnd)
		tr.TurnEnded(ctx, end)
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
}
