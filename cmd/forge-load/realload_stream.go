package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// The streaming scenarios: paced, concurrent, subscribers.

// streamStats is what a series of streamed turns measured.
type streamStats struct {
	use   serverUse // the server's, over the series
	turns int
	ttfd  []time.Duration // request to the first delta, per turn
	total []time.Duration // request to turn.done, per turn
}

func (s streamStats) cpuPerTurn() time.Duration { return s.use.cpu / time.Duration(s.turns) }
func (s streamStats) writesPerTurn() float64    { return s.use.writes / float64(s.turns) }

// cpuPerDelta is the server's CPU per delta of n-delta replies.
func (s streamStats) cpuPerDelta(n int) time.Duration {
	return s.use.cpu / time.Duration(s.turns*n)
}

// streamTurns runs n streamed turns whose model is model (served by the
// fake: "paced-500x2ms", say), each on a new session made beforehand, at
// most atOnce at a time, and counts what the server used while they ran.
// Every turn's stream must carry all want deltas.
func (e *rlEnv) streamTurns(ctx context.Context, model string, n, atOnce, want int) (streamStats, error) {
	ids, err := e.streamSessions(ctx, model, n)
	if err != nil {
		return streamStats{}, err
	}
	return e.streamOn(ctx, ids, atOnce, want)
}

// streamSessions creates an agent on model and n sessions with it.
func (e *rlEnv) streamSessions(ctx context.Context, model string, n int) ([]string, error) {
	agent, err := e.agent(ctx, "openai/"+model)
	if err != nil {
		return nil, err
	}
	return e.t.createSessions(ctx, agent, n)
}

// streamOn runs a streamed turn on each session, at most atOnce at a time
// (see streamTurns).
func (e *rlEnv) streamOn(ctx context.Context, ids []string, atOnce, want int) (streamStats, error) {
	n := len(ids)
	st := streamStats{turns: n, ttfd: make([]time.Duration, n), total: make([]time.Duration, n)}
	u0, err := e.used(ctx)
	if err != nil {
		return st, err
	}
	errs := make(chan error, n)
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for i, sid := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := e.t.streamTurn(ctx, sid, 10*time.Minute)
			switch {
			case err != nil:
				errs <- err
			case r.deltas != want:
				errs <- fmt.Errorf("session %s: the turn's stream carried %d of the %d deltas", sid, r.deltas, want)
			}
			st.ttfd[i], st.total[i] = r.ttfd, r.total
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return st, err
	}
	u1, err := e.used(ctx)
	if err != nil {
		return st, err
	}
	st.use = u1.sub(u0)
	return st, nil
}

// rawStreams makes n model requests for model raw, from this process, all
// at once or one after the other, and returns each one's time to its first
// content chunk and to its end.
func (e *rlEnv) rawStreams(ctx context.Context, model string, n int, atOnce bool, want int) (ttfc, total []time.Duration, err error) {
	ttfc, total = make([]time.Duration, n), make([]time.Duration, n)
	errs := make(chan error, n)
	one := func(i int) {
		f, t, d, err := e.rawStream(ctx, model)
		if err == nil && d != want {
			err = fmt.Errorf("the model sent %d of %d deltas", d, want)
		}
		if err != nil {
			errs <- err
		}
		ttfc[i], total[i] = f, t
	}
	var wg sync.WaitGroup
	for i := range n {
		if atOnce {
			wg.Go(func() { one(i) })
		} else {
			one(i)
		}
	}
	wg.Wait()
	close(errs)
	return ttfc, total, <-errs
}

// boundaryWrites runs n trivial turns (the model answers "ok" at once),
// each the first of a new session as the streamed turns are, and returns
// their store writes per turn: the writes of a turn's boundaries, which
// any turn makes however many deltas it streams.
func (e *rlEnv) boundaryWrites(ctx context.Context, n int) (float64, error) {
	agent, err := e.agent(ctx, "openai/gpt-4.1-mini")
	if err != nil {
		return 0, err
	}
	ids, err := e.t.createSessions(ctx, agent, n)
	if err != nil {
		return 0, err
	}
	body := turnBody("hi", false)
	u0, err := e.used(ctx)
	if err != nil {
		return 0, err
	}
	for _, sid := range ids {
		if _, err := e.t.waitTurn(ctx, sid, body); err != nil {
			return 0, err
		}
	}
	u1, err := e.used(ctx)
	if err != nil {
		return 0, err
	}
	return u1.sub(u0).writes / float64(n), nil
}

// checkpointFloor is the store writes a turn streaming for d adds to its
// boundaries: streaming parts are checkpointed about once a second.
func checkpointFloor(d time.Duration) float64 { return d.Seconds() }

// warmUp runs one burst turn, so that the first measured turn does not
// pay for the first connections.
func (e *rlEnv) warmUp(ctx context.Context, deltas int) error {
	_, err := e.streamTurns(ctx, pacedModel(deltas, 0), 1, 1, deltas)
	return err
}

func describePaced(c *realloadConfig) string {
	return fmt.Sprintf("one SSE client; replies of %d deltas paced %s (%s each) and in one burst (%s); each turn on a new session; floors: the burst, a trivial turn's writes, the model alone",
		c.deltas, durationList(c.paces).String(), plural(c.turns, "turn"), plural(c.burstTurns, "turn"))
}

func runPaced(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error) {
	n := c.deltas
	if err := e.warmUp(ctx, n); err != nil {
		return nil, err
	}
	bound, err := e.boundaryWrites(ctx, c.trivialTurns)
	if err != nil {
		return nil, err
	}
	burst, err := e.streamTurns(ctx, pacedModel(n, 0), c.burstTurns, 1, n)
	if err != nil {
		return nil, fmt.Errorf("burst turns: %w", err)
	}
	bttfc, btotal, err := e.rawStreams(ctx, pacedModel(n, 0), c.burstTurns, false, n)
	if err != nil {
		return nil, fmt.Errorf("burst model floor: %w", err)
	}
	var figs []figure
	for _, p := range c.paces {
		st, err := e.streamTurns(ctx, pacedModel(n, p), c.turns, 1, n)
		if err != nil {
			return nil, fmt.Errorf("turns paced %s: %w", p, err)
		}
		ttfc, total, err := e.rawStreams(ctx, pacedModel(n, p), c.turns, false, n)
		if err != nil {
			return nil, fmt.Errorf("model floor paced %s: %w", p, err)
		}
		l := "paced " + p.String() + ": "
		figs = append(figs,
			durFigure(l+"server CPU per delta", st.cpuPerDelta(n), burst.cpuPerDelta(n), "the same deltas in one burst"),
			durFigure(l+"server CPU per turn", st.cpuPerTurn(), burst.cpuPerTurn(), "the same, one burst"),
			figure{label: l + "store writes per turn", kind: kindCount, measured: st.writesPerTurn(),
				floor: bound + checkpointFloor(time.Duration(n-1)*p), floorIs: "a trivial turn's writes + 1 per second streamed"},
			durFigure(l+"time to first delta (p50)", median(st.ttfd), median(ttfc), "the model's first chunk, raw request"),
			durFigure(l+"request to turn.done (p50)", median(st.total), median(total), "the model's whole stream, raw request"),
		)
	}
	figs = append(figs,
		durFigure("burst: time to first delta (p50)", median(burst.ttfd), median(bttfc), "the model's first chunk, raw request"),
		durFigure("burst: request to turn.done (p50)", median(burst.total), median(btotal), "the model's whole stream, raw request"),
		figure{label: "burst: store writes per turn", kind: kindCount, measured: burst.writesPerTurn(), floor: bound,
			floorIs: "a trivial turn's writes"},
	)
	return figs, nil
}

func describeConcurrent(c *realloadConfig) string {
	return fmt.Sprintf("%s sessions streaming at once, replies of %d deltas paced %s, one SSE client each; floors: %s in one burst one at a time, a trivial turn's writes, as many raw model streams at once",
		intList(c.streams).String(), c.deltas, c.concurrentPace, plural(c.burstTurns, "turn"))
}

func runConcurrent(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error) {
	n := c.deltas
	if err := e.warmUp(ctx, n); err != nil {
		return nil, err
	}
	bound, err := e.boundaryWrites(ctx, c.trivialTurns)
	if err != nil {
		return nil, err
	}
	burst, err := e.streamTurns(ctx, pacedModel(n, 0), c.burstTurns, 1, n)
	if err != nil {
		return nil, fmt.Errorf("burst turns: %w", err)
	}
	model := pacedModel(n, c.concurrentPace)
	var figs []figure
	for _, k := range c.streams {
		st, err := e.streamTurns(ctx, model, k, k, n)
		if err != nil {
			return nil, fmt.Errorf("%d streams at once: %w", k, err)
		}
		_, total, err := e.rawStreams(ctx, model, k, true, n)
		if err != nil {
			return nil, fmt.Errorf("%d raw model streams at once: %w", k, err)
		}
		l := plural(k, "stream") + ": "
		figs = append(figs,
			durFigure(l+"server CPU per delta", st.cpuPerDelta(n), burst.cpuPerDelta(n), "one burst turn at a time"),
			figure{label: l + "store writes per turn", kind: kindCount, measured: st.writesPerTurn(),
				floor: bound + checkpointFloor(time.Duration(n-1)*c.concurrentPace), floorIs: "a trivial turn's writes + 1 per second streamed"},
			durFigure(l+"stream, request to turn.done (p50)", median(st.total), median(total), "as many raw model streams at once"),
			durFigure(l+"slowest stream", slices.Max(st.total), slices.Max(total), "the slowest raw model stream"),
		)
	}
	return figs, nil
}

// followRound is what one reader of an event stream saw of one turn: the
// time of its first delta and how many deltas came before turn.done.
type followRound struct {
	first  time.Time
	deltas int
	err    error
}

// follow reads an SSE stream of turns (forge's session events, or the
// bare broadcaster's), sending a followRound at each turn.done, and an
// error when the stream ends. It closes body.
func follow(body io.ReadCloser, send func(followRound)) {
	defer body.Close()
	sse := client.NewSSEReader(body)
	var r followRound
	for {
		f, err := sse.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended")
			}
			send(followRound{err: err})
			return
		}
		switch f.Event {
		case forge.EventModelDelta:
			if r.deltas == 0 {
				r.first = time.Now()
			}
			r.deltas++
		case forge.EventTurnDone:
			send(r)
			r = followRound{}
		case "error":
			send(followRound{err: fmt.Errorf("error frame: %s", f.Data)})
			return
		}
	}
}

// fanOut is what k readers of a stream saw of a series of turns.
type fanOut struct {
	cpu       time.Duration // of the sending process, over the measured turns
	turns     int
	delivered int             // deltas received, all readers, all turns
	last      []time.Duration // per turn: start to the last reader's first delta
}

// followers opens k readers with open and runs turns+1 rounds of start
// (the first a warm-up, which also makes sure every reader is live),
// measuring cpu over the others. start begins a turn and returns a
// channel for its end, which it sends once.
func followers(ctx context.Context, k, turns int, open func(context.Context) (io.ReadCloser, error),
	start func(context.Context) <-chan error, cpu func() (time.Duration, error)) (fanOut, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var ended <-chan error // the turn under way, if any
	defer func() {
		cancel() // ends the readers' streams, and a turn under way
		if ended != nil {
			<-ended
		}
		wg.Wait()
	}()
	type seen struct {
		reader int
		followRound
	}
	// Each reader sends one round per turn and one error at its end.
	rounds := make(chan seen, k*(turns+2))
	for i := range k {
		body, err := open(ctx)
		if err != nil {
			return fanOut{}, fmt.Errorf("opening reader %d: %w", i+1, err)
		}
		wg.Go(func() { follow(body, func(r followRound) { rounds <- seen{i, r} }) })
	}
	out := fanOut{turns: turns}
	var cpu0 time.Duration
	for round := range turns + 1 {
		if round == 1 {
			c, err := cpu()
			if err != nil {
				return out, err
			}
			cpu0 = c
		}
		t0 := time.Now()
		ended = start(ctx)
		var last time.Duration
		timer := time.NewTimer(5 * time.Minute)
		for got, done := 0, false; got < k || !done; {
			select {
			case err := <-ended:
				if err != nil {
					timer.Stop()
					return out, fmt.Errorf("turn %d: %w", round, err)
				}
				done, ended = true, nil
			case r := <-rounds:
				if r.err != nil {
					timer.Stop()
					return out, fmt.Errorf("reader %d of %d, turn %d: %w", r.reader+1, k, round, r.err)
				}
				got++
				if r.deltas > 0 {
					last = max(last, r.first.Sub(t0))
				}
				if round > 0 {
					out.delivered += r.deltas
				}
			case <-timer.C:
				return out, fmt.Errorf("turn %d: not all of %d readers saw turn.done within 5 minutes", round, k)
			case <-ctx.Done():
				timer.Stop()
				return out, ctx.Err()
			}
		}
		timer.Stop()
		if round > 0 {
			out.last = append(out.last, last)
		}
	}
	c, err := cpu()
	if err != nil {
		return out, err
	}
	out.cpu = c - cpu0
	return out, nil
}

func describeSubscribers(c *realloadConfig) string {
	pace := "in one burst"
	if c.subscriberPace > 0 {
		pace = "paced " + c.subscriberPace.String()
	}
	return fmt.Sprintf("%s SSE readers of one session's events (GET /v1/sessions/{id}/events), %s (after one untimed) whose replies are %d deltas %s; floor: a bare Go broadcaster in the fake's process sending the same frames to as many readers",
		intList(c.subscribers).String(), plural(c.subscriberTurns, "wait-mode turn"), c.deltas, pace)
}

func runSubscribers(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error) {
	n := c.deltas
	model := pacedModel(n, c.subscriberPace)
	agent, err := e.agent(ctx, "openai/"+model)
	if err != nil {
		return nil, err
	}
	body := turnBody("go", false)
	var figs []figure
	for _, k := range c.subscribers {
		ids, err := e.t.createSessions(ctx, agent, 1)
		if err != nil {
			return nil, err
		}
		sid := ids[0]
		srv, err := followers(ctx, k, c.subscriberTurns,
			func(ctx context.Context) (io.ReadCloser, error) { return e.t.subscribe(ctx, sid) },
			func(ctx context.Context) <-chan error {
				ch := make(chan error, 1)
				go func() {
					_, err := e.t.waitTurn(ctx, sid, body)
					ch <- err
				}()
				return ch
			},
			func() (time.Duration, error) { return cpuTime(e.sp.pid) })
		if err != nil {
			return nil, fmt.Errorf("%d readers of forge: %w", k, err)
		}
		topic := fmt.Sprintf("%d-%d", k, time.Now().UnixNano())
		bare, err := followers(ctx, k, c.subscriberTurns,
			func(ctx context.Context) (io.ReadCloser, error) { return e.bareSubscribe(ctx, topic) },
			func(ctx context.Context) <-chan error {
				ch := make(chan error, 1)
				go func() { ch <- e.bareRun(ctx, topic, k, n, c.subscriberPace) }()
				return ch
			},
			func() (time.Duration, error) { return cpuTime(e.fake.pid()) })
		if err != nil {
			return nil, fmt.Errorf("%d readers of the bare broadcaster: %w", k, err)
		}
		l := plural(k, "reader") + ": "
		perDelivered := func(f fanOut) float64 {
			if f.delivered == 0 {
				return math.NaN()
			}
			return float64(f.cpu) / float64(f.delivered)
		}
		figs = append(figs,
			figure{label: l + "server CPU per delivered delta", kind: kindDuration, measured: perDelivered(srv), floor: perDelivered(bare),
				floorIs: "bare broadcaster, same readers"},
			durFigure(l+"server CPU per turn", srv.cpu/time.Duration(srv.turns), bare.cpu/time.Duration(bare.turns), "bare broadcaster"),
			durFigure(l+"last reader's first delta (p50)", median(srv.last), median(bare.last), "bare broadcaster, from its start"),
			figure{label: l + "deltas delivered per turn", kind: kindCount, measured: float64(srv.delivered) / float64(srv.turns),
				floor: float64(bare.delivered) / float64(bare.turns), floorIs: "bare broadcaster (sends all)"},
		)
	}
	return figs, nil
}

// bareSubscribe opens a reader of the bare broadcaster.
func (e *rlEnv) bareSubscribe(ctx context.Context, topic string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.fake.control+"/broadcast/subscribe?topic="+url.QueryEscape(topic), nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	return resp.Body, nil
}

// bareRun makes the bare broadcaster send a turn of n deltas to the k
// readers of topic.
func (e *rlEnv) bareRun(ctx context.Context, topic string, k, n int, pace time.Duration) error {
	u := fmt.Sprintf("%s/broadcast/run?topic=%s&subscribers=%d&deltas=%d&pace=%s", e.fake.control, url.QueryEscape(topic), k, n, pace)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(""))
	if err != nil {
		return err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiError(resp)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
