package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

func runTurns(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("turns", flag.ContinueOnError)
	var c common
	c.register(fs)
	sessions := fs.Int("sessions", 100, "sessions, each driven by its own worker (1..10000)")
	duration := fs.Duration("duration", 10*time.Second, "how long to start new turns (up to 1h); turns in flight then finish")
	maxTurns := fs.Int("max-turns", 1_000_000, "stop after this many timed turns in all (1..100000000)")
	warmup := fs.Int("warmup", 1, "untimed turns per session before the run (0..100)")
	rotate := fs.Int("rotate", 0, "a worker moves to a new session after this many turns, 0: never (creating it is left out of the latencies, not of turns/s)")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	switch {
	case *sessions < 1 || *sessions > 10000:
		return fmt.Errorf("--sessions must be 1..10000")
	case *duration <= 0 || *duration > time.Hour:
		return fmt.Errorf("--duration must be more than 0 and at most 1h")
	case *maxTurns < 1 || *maxTurns > 100_000_000:
		return fmt.Errorf("--max-turns must be 1..100000000")
	case *warmup < 0 || *warmup > 100:
		return fmt.Errorf("--warmup must be 0..100")
	case *rotate < 0:
		return fmt.Errorf("--rotate must not be negative")
	}

	t, err := c.connect(ctx, *sessions)
	if err != nil {
		return err
	}
	defer t.close()
	agent, err := t.createAgent(ctx, nil)
	if err != nil {
		return err
	}
	ids, err := t.createSessions(ctx, agent, *sessions)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "forge-load turns: server %s, model scripted/echo, %d sessions, duration %s, max %d turns\n",
		t.base, *sessions, *duration, *maxTurns)

	body := turnBody("hi", false)
	// Requests get a hard bound: the run's duration plus a grace for the
	// turns in flight when it ends.
	reqCtx, cancelReqs := context.WithTimeout(ctx, *duration+30*time.Second)
	defer cancelReqs()

	if *warmup > 0 {
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		for _, sid := range ids {
			wg.Go(func() {
				for range *warmup {
					if _, err := t.waitTurn(reqCtx, sid, body); err != nil {
						errs <- fmt.Errorf("warm-up turn: %w", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}

	var (
		budget   atomic.Int64
		stop     atomic.Bool
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	budget.Store(int64(*maxTurns))
	lat := make([][]time.Duration, len(ids))
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop.Store(true)
	}
	timer := time.AfterFunc(*duration, func() { stop.Store(true) })
	defer timer.Stop()
	start := time.Now()
	for w := range ids {
		wg.Go(func() {
			sid := ids[w]
			n := 0
			for !stop.Load() && reqCtx.Err() == nil && budget.Add(-1) >= 0 {
				if *rotate > 0 && n > 0 && n%*rotate == 0 {
					s, err := t.createSessions(reqCtx, agent, 1)
					if err != nil {
						fail(err)
						return
					}
					sid = s[0]
				}
				d, err := t.waitTurn(reqCtx, sid, body)
				if err != nil {
					fail(err)
					return
				}
				lat[w] = append(lat[w], d)
				n++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}

	all := slices.Concat(lat...)
	slices.Sort(all)
	fmt.Fprintf(out, "turns      %d in %.3f s\n", len(all), elapsed.Seconds())
	fmt.Fprintf(out, "turns/s    %.1f\n", float64(len(all))/elapsed.Seconds())
	if len(all) > 0 {
		fmt.Fprintf(out, "latency    p50 %s  p90 %s  p99 %s  max %s\n",
			ms(percentile(all, 0.50)), ms(percentile(all, 0.90)), ms(percentile(all, 0.99)), ms(all[len(all)-1]))
	}
	if firstErr != nil {
		return fmt.Errorf("run stopped by an error: %w", firstErr)
	}
	return nil
}

// waitTurn runs one wait-mode turn and returns its latency: from sending
// the request to having read the whole answer.
func (t *target) waitTurn(ctx context.Context, sid string, body []byte) (time.Duration, error) {
	req, err := t.request(ctx, http.MethodPost, "/v1/sessions/"+sid+"/turns", body)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, apiError(resp)
	}
	var turn struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Error  json.RawMessage `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&turn)
	_, _ = io.Copy(io.Discard, resp.Body) // the rest, so the connection is reused
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("decoding the turn: %w", err)
	}
	if turn.Status != "done" {
		return 0, fmt.Errorf("turn %s ended %s: %s", turn.ID, turn.Status, turn.Error)
	}
	return d, nil
}

// percentile returns the nearest-rank p-quantile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
