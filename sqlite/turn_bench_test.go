package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/tools"
	"modernc.org/sqlite"
)

// BenchmarkEngineTurn measures the store's share of a trivial turn: the
// engine runs wait-mode scripted/echo turns on this Store, 100 to a
// session, and the benchmark reports their latency (p50, p99, maximum,
// and how many took over 5 ms) and what one turn writes: transactions and
// WAL frames (pages the writer wrote to the log, each with two pwrite
// calls). It compares the WAL checkpoints made by the checkpointer with
// those the writer made inside its commits before, and with none at all
// (the log then grows without bound: a reference for the tail, not a
// setting).
//
//	go test -run '^$' -bench EngineTurn -benchtime 3000x -count 3 ./sqlite/
func BenchmarkEngineTurn(b *testing.B) {
	for _, v := range checkpointVariants {
		b.Run(v.name, func(b *testing.B) { benchEngineTurn(b, v.configure) })
	}
}

// checkpointVariants are the WAL checkpoint arrangements the benchmarks
// compare.
var checkpointVariants = []struct {
	name      string
	configure func(*Store)
}{
	{"checkpoints=checkpointer", func(*Store) {}},
	{"nopacker", func(s *Store) { s.noPacker = true }},
	// The arrangement before the checkpointer (4000: this package's
	// setting then).
	{"checkpoints=writer", func(s *Store) { s.writerAutocheckpoint = 4000 }},
	// No checkpoint after the first: the log grows without bound.
	{"checkpoints=none", func(s *Store) { s.checkpointInterval = time.Hour }},
}

func benchEngineTurn(b *testing.B, configure func(*Store)) {
	ctx := context.Background()
	s, err := openStore(ctx, filepath.Join(b.TempDir(), "forge.db"), configure)
	if err != nil {
		b.Fatal(err)
	}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	eng := engine.New(engine.Config{Store: s, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Close(ctx)
		_ = s.Close(ctx)
	})
	if err := s.CreateAgent(ctx, &forge.Agent{Tenant: forge.DefaultTenant, Name: "echo", Model: "scripted/echo", Instructions: "be brief"}); err != nil {
		b.Fatal(err)
	}
	var ses *forge.Session
	var lat []time.Duration
	turn := func() {
		start := time.Now()
		defer func() { lat = append(lat, time.Since(start)) }()
		t, err := eng.StartTurn(ctx, forge.DefaultTenant, ses.ID, engine.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}})
		if err != nil {
			b.Fatal(err)
		}
		if t, err := eng.WaitTurn(ctx, forge.DefaultTenant, ses.ID, t.ID); err != nil || t.Status != forge.TurnDone {
			b.Fatalf("%v %+v", err, t)
		}
	}
	newSession := func() {
		ses = &forge.Session{Tenant: forge.DefaultTenant, Agent: "echo", MainThreadID: s.ids.New(forge.PrefixThread)}
		if err := s.CreateSession(ctx, ses); err != nil {
			b.Fatal(err)
		}
	}
	newSession()
	for range 5 {
		turn()
	}
	frames := pagesWritten(b, s)
	commits := s.w.commits.Load()
	lat = lat[:0]
	var setupCommits int64
	n := 0
	for b.Loop() {
		if n > 0 && n%100 == 0 {
			b.StopTimer()
			before := s.w.commits.Load()
			newSession()
			setupCommits += s.w.commits.Load() - before
			b.StartTimer()
		}
		n++
		turn()
	}
	b.StopTimer()
	reportTurnLatency(b, lat)
	b.ReportMetric(float64(pagesWritten(b, s)-frames)/float64(n), "frames/turn")
	b.ReportMetric(float64(s.w.commits.Load()-commits-setupCommits)/float64(n), "commits/turn")
}

// pagesWritten is the count of pages the writer's connection has written
// to the log since it opened.
func pagesWritten(tb testing.TB, s *Store) int64 {
	tb.Helper()
	var n int
	err := s.write(context.Background(), func(*tx) error {
		st, ok := s.w.dc.(sqlite.DBStatus)
		if !ok {
			return fmt.Errorf("driver connection %T has no Status", s.w.dc)
		}
		var err error
		n, _, err = st.Status(sqlite.DBStatusCacheWrite, false)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return int64(n)
}

// reportTurnLatency reports the p50, p99 and maximum of lat and how many
// exceeded 5 ms.
func reportTurnLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return float64(lat[max(0, min(i, len(lat)-1))]) / float64(time.Microsecond)
	}
	slow := 0
	for _, d := range lat {
		if d > 5*time.Millisecond {
			slow++
		}
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(1), "max-µs")
	b.ReportMetric(float64(slow), "turns>5ms")
}
