package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// BenchmarkRetentionSweep measures the retention sweeper of a real `forge
// serve` (SQLite, --session-ttl 3s): sessions deleted per second, from the
// moment a backlog of idle sessions (3 trivial turns each) is due to the
// moment the last one is gone, and what the sweep does to a trivial turn
// running meanwhile in a session the sweep keeps (its agent's TTL is an
// hour): p50 and p99 while sweeping beside the same figures with nothing
// to sweep, and the model call alone (floor). Run it once:
//
//	go test -run '^$' -bench RetentionSweep -benchtime 1x ./cmd/forge-load/
func BenchmarkRetentionSweep(b *testing.B) {
	const (
		ttl      = 3 * time.Second
		sessions = 600
		turns    = 3
		baseline = 300
	)
	sp := spawnForTest(b, "--session-ttl", ttl.String(), "--retention-interval", "50ms", "--purge-after", "-1ns")
	ctx := context.Background()
	c := common{server: sp.url}
	t, err := c.connect(ctx, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer t.close()
	hot := trivialAgent("openai", "gpt-4.1-mini")
	hot.Retention = &forge.Retention{SessionTTL: forge.TTL(time.Hour)}
	hotAgent, err := t.createAgentOn(ctx, hot)
	if err != nil {
		b.Fatal(err)
	}
	hotSession, err := t.createSessions(ctx, hotAgent, 1)
	if err != nil {
		b.Fatal(err)
	}
	body := turnBody("hi", false)
	run := func(n int, until func() bool) []time.Duration {
		var lat []time.Duration
		for i := 0; (n > 0 && i < n) || (n == 0 && !until()); i++ {
			d, err := t.waitTurn(ctx, hotSession[0], body)
			if err != nil {
				b.Fatal(err, sp.logs.String())
			}
			lat = append(lat, d)
		}
		return lat
	}
	run(5, nil)
	quiet := run(baseline, nil)

	// The backlog: sessions of an agent without a TTL of its own.
	seedAgent, err := t.createAgentOn(ctx, trivialAgent("openai", "gpt-4.1-mini"))
	if err != nil {
		b.Fatal(err)
	}
	// Each session is made just before its turns: a session idle for the
	// TTL before then would go at once.
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= sessions {
				ids, err := t.createSessions(ctx, seedAgent, 1)
				if err != nil {
					b.Error(err)
					return
				}
				for range turns {
					if _, err := t.waitTurn(ctx, ids[0], body); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	due := time.Now().Add(ttl)
	left := func() bool {
		p, err := t.api.ListSessions(ctx, client.ListSessionsOptions{Agent: seedAgent, ListOptions: client.ListOptions{Limit: 1}})
		if err != nil {
			b.Fatal(err)
		}
		return len(p.Data) > 0
	}
	// Turns until the backlog is due, then while it is swept.
	run(0, func() bool { return time.Now().After(due) })
	var gone time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for left() {
			time.Sleep(20 * time.Millisecond)
		}
		gone = time.Now()
	}()
	var sweeping []time.Duration
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
			sweeping = append(sweeping, run(1, nil)...)
		}
	}
	elapsed := gone.Sub(due)

	hc := floorClient()
	defer hc.CloseIdleConnections()
	floor, err := series(ctx, 5, baseline, func(ctx context.Context) (time.Duration, error) {
		return floorRequest(ctx, hc, sp.modelURL, floorBody("gpt-4.1-mini"))
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(sessions)/elapsed.Seconds(), "sessions-deleted/s")
	b.ReportMetric(float64(sessions*(turns*8+2))/elapsed.Seconds(), "approx-rows-deleted/s")
	reportQuantiles(b, "quiet-", quiet, 0.50, 0.99)
	reportQuantiles(b, "sweeping-", sweeping, 0.50, 0.99)
	reportQuantiles(b, "floor-", floor, 0.50, 0.99)
	b.ReportMetric(float64(len(sweeping)), "turns-during-sweep")
}
