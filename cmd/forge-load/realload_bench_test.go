package main

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRealLoadPaced is realload's paced scenario as a benchmark: a
// real `forge serve` process (built from this tree) on a fresh database,
// the agent on openai/<model> behind the instant fake in a process of its
// own, whose replies are 500 content deltas paced 2 ms or 20 ms apart, or
// all at once (pace=0s); b.N streamed turns one after the other, each on a
// new session made beforehand, read by one SSE client. It reports the
// server's CPU per delta and per turn (from /proc, 10 ms ticks), its store
// writes per turn (forge_store_write_duration_seconds_count from /metrics),
// the time to the first delta and to turn.done (p50), and beside them the
// floors measured in the same run: the CPU of the same deltas in one burst
// (30 turns), a trivial turn's writes plus one checkpoint per second
// streamed, and the model alone (the same request made raw from here,
// b.N times: its first chunk and its end).
//
//	go test -run '^$' -bench RealLoadPaced -benchtime 5x -count 3 ./cmd/forge-load/
func BenchmarkRealLoadPaced(b *testing.B) {
	const deltas = 500
	for _, pace := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, 0} {
		b.Run("pace="+pace.String(), func(b *testing.B) {
			ctx := context.Background()
			c := &realloadConfig{forgeBin: buildForge(b), streams: []int{1}, subscribers: []int{1}}
			e, err := startEnv(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := e.stop(); err != nil {
					b.Error(err)
				}
			}()
			if err := e.warmUp(ctx, deltas); err != nil {
				b.Fatal(err)
			}
			bound, err := e.boundaryWrites(ctx, 20)
			if err != nil {
				b.Fatal(err)
			}
			model := pacedModel(deltas, pace)
			var burst streamStats
			if pace > 0 {
				if burst, err = e.streamTurns(ctx, pacedModel(deltas, 0), 30, 1, deltas); err != nil {
					b.Fatal(err)
				}
			}
			ids, err := e.streamSessions(ctx, model, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			st, err := e.streamOn(ctx, ids, 1, deltas)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			ttfc, total, err := e.rawStreams(ctx, model, b.N, false, deltas)
			if err != nil {
				b.Fatal(err)
			}
			µs := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
			msec := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(µs(st.cpuPerDelta(deltas)), "cpu-µs/delta")
			b.ReportMetric(msec(st.cpuPerTurn()), "cpu-ms/turn")
			b.ReportMetric(st.writesPerTurn(), "writes/turn")
			b.ReportMetric(msec(median(st.ttfd)), "ttfd-ms")
			b.ReportMetric(msec(median(st.total)), "stream-ms")
			if pace > 0 {
				b.ReportMetric(µs(burst.cpuPerDelta(deltas)), "burst-cpu-µs/delta")
			}
			b.ReportMetric(bound+checkpointFloor(time.Duration(deltas-1)*pace), "floor-writes/turn")
			b.ReportMetric(msec(median(ttfc)), "model-ttfc-ms")
			b.ReportMetric(msec(median(total)), "model-stream-ms")
		})
	}
}
