package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/metrics"
	"github.com/forge-runtime/forge/opentelemetry"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
	"github.com/forge-runtime/forge/webhook"
)

// Benchmarks of the whole stack over real loopback HTTP: the SQLite store,
// the engine, the HTTP API on an httptest server, and the scripted model
// (instant). docs/benchmarks.md records their figures and how to run them:
//
//	go test -run '^$' -bench HTTP -benchtime 3000x -count 3 ./httpapi/
//	go test -run '^$' -bench SSE -benchtime 30x -count 3 ./httpapi/

// writeCounter counts the store's write transactions.
type writeCounter struct {
	forge.Store
	n atomic.Int64
}

func (c *writeCounter) CreateAgent(ctx context.Context, a *forge.Agent) error {
	c.n.Add(1)
	return c.Store.CreateAgent(ctx, a)
}

func (c *writeCounter) UpdateAgent(ctx context.Context, a *forge.Agent) error {
	c.n.Add(1)
	return c.Store.UpdateAgent(ctx, a)
}

func (c *writeCounter) DeleteAgent(ctx context.Context, tenant, name string) error {
	c.n.Add(1)
	return c.Store.DeleteAgent(ctx, tenant, name)
}

func (c *writeCounter) CreateSession(ctx context.Context, s *forge.Session) error {
	c.n.Add(1)
	return c.Store.CreateSession(ctx, s)
}

func (c *writeCounter) DeleteSession(ctx context.Context, tenant, id string) error {
	c.n.Add(1)
	return c.Store.DeleteSession(ctx, tenant, id)
}

func (c *writeCounter) ReserveSeqs(ctx context.Context, tenant, sid string, n int64) (int64, error) {
	c.n.Add(1)
	return c.Store.ReserveSeqs(ctx, tenant, sid, n)
}

func (c *writeCounter) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	c.n.Add(1)
	return c.Store.BeginTurn(ctx, b)
}

func (c *writeCounter) Commit(ctx context.Context, b *forge.Batch) error {
	c.n.Add(1)
	return c.Store.Commit(ctx, b)
}

func (c *writeCounter) PutIdempotency(ctx context.Context, tenant string, r *forge.IdempotencyRecord) (*forge.IdempotencyRecord, error) {
	c.n.Add(1)
	return c.Store.PutIdempotency(ctx, tenant, r)
}

// benchStack is newStack (helpers_test.go) for benchmarks: the same real
// stack, a store that counts its write transactions, and a client that
// keeps enough connections open for 100 concurrent sessions. Its methods
// return errors rather than failing, so that workers may call them.
type benchStack struct {
	b      *testing.B
	url    string
	hc     *http.Client
	writes *writeCounter
}

// telemetry is what a bench stack observes itself with.
type telemetry int

const (
	noTelemetry telemetry = iota
	// withMetrics is forge serve's default: Prometheus metrics (the engine
	// observer, the store write timer, the SSE gauge).
	withMetrics
	// withTracing adds OpenTelemetry spans exported over OTLP/HTTP to a
	// loopback receiver (batched, as forge serve exports them).
	withTracing
	// withWebhook adds an endpoint subscribed to turn.done, a loopback
	// receiver answering 204, and the dispatcher delivering to it: every
	// turn writes a delivery in its terminal transaction and is sent.
	withWebhook
)

func newBenchStack(b *testing.B, tel ...telemetry) *benchStack {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, b.TempDir()+"/forge.db")
	if err != nil {
		b.Fatal(err)
	}
	counter := &writeCounter{Store: st}
	logger := slog.New(slog.DiscardHandler)
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	var (
		observers []engine.Observer
		m         *metrics.Metrics
		tracer    *opentelemetry.Tracer
	)
	if slices.Contains(tel, withMetrics) || slices.Contains(tel, withTracing) {
		m = metrics.New(metrics.Options{})
		st.ObserveWrites(m.ObserveStoreWrite)
		observers = append(observers, m)
	}
	if slices.Contains(tel, withTracing) {
		// The collector runs elsewhere in production: this one only reads
		// the exports, so that the figures are Forge's side alone.
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		b.Cleanup(collector.Close)
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
		if tracer, err = opentelemetry.New(ctx, opentelemetry.Options{}); err != nil {
			b.Fatal(err)
		}
		observers = append(observers, tracer)
	}
	eng := engine.New(engine.Config{
		Store: counter, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: logger, ToolCancelWait: 200 * time.Millisecond, Observer: engine.Observers(observers...),
	})
	if err := eng.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	cfg := httpapi.Config{Store: counter, Engine: eng, Logger: logger}
	if m != nil {
		cfg.Metrics = m.Handler()
	}
	api := httpapi.New(cfg)
	var h http.Handler = api.Handler()
	if m != nil {
		m.WatchSSE(api.SSESubscribers)
	}
	if tracer != nil {
		h = tracer.Middleware(h)
	}
	if slices.Contains(tel, withWebhook) {
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(receiver.Close)
		if err := st.CreateWebhook(ctx, &forge.Webhook{Tenant: forge.DefaultTenant, URL: receiver.URL,
			Events: []string{forge.EventTurnDone}}); err != nil {
			b.Fatal(err)
		}
		d := webhook.New(st, webhook.Config{Owner: "bench", AllowPrivate: true, Log: logger})
		d.Start()
		b.Cleanup(func() { _ = d.Close(context.Background()) })
	}
	srv := httptest.NewServer(h)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 256
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Close(ctx)
		_ = st.Close(ctx)
		if tracer != nil {
			_ = tracer.Close(ctx)
		}
	})
	return &benchStack{b: b, url: srv.URL, hc: &http.Client{Transport: tr}, writes: counter}
}

// post sends a JSON body and decodes a want-status answer into out (nil:
// discard it).
func (s *benchStack) post(path string, body []byte, want int, out any) error {
	resp, err := s.hc.Post(s.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %d %s, want status %d", path, resp.StatusCode, b, want)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// agent creates an agent on scripted/echo: without steps it echoes (a word
// per delta), otherwise it plays them.
func (s *benchStack) agent(name string, steps ...scripted.Step) {
	s.b.Helper()
	body := map[string]any{"name": name, "model": "scripted/echo", "instructions": "be brief"}
	if len(steps) > 0 {
		body["model_params"] = map[string]any{"script": scripted.Script(steps...)}
	}
	if err := s.post("/v1/agents", mustJSON(body), 201, nil); err != nil {
		s.b.Fatal(err)
	}
}

func (s *benchStack) session(agent string) (string, error) {
	var ses forge.Session
	err := s.post("/v1/sessions", mustJSON(map[string]any{"agent": agent}), 201, &ses)
	return ses.ID, err
}

// sessions opens n sessions, a few at a time.
func (s *benchStack) sessions(agent string, n int) []string {
	s.b.Helper()
	ids := make([]string, n)
	errs := make(chan error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, 8) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				id, err := s.session(agent)
				if err != nil {
					errs <- err
					return
				}
				ids[i] = id
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		s.b.Fatal(err)
	}
	return ids
}

// turn runs one wait-mode turn and checks it ended done.
func (s *benchStack) turn(sid string, body []byte) error {
	var turn struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Error  json.RawMessage `json:"error"`
	}
	if err := s.post("/v1/sessions/"+sid+"/turns", body, 200, &turn); err != nil {
		return err
	}
	if turn.Status != string(forge.TurnDone) {
		return fmt.Errorf("turn %s ended %s: %s", turn.ID, turn.Status, turn.Error)
	}
	return nil
}

// reportLatency reports the p50 and p99 of lat, in microseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return float64(lat[max(0, min(i, len(lat)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkHTTPTrivialTurn runs wait-mode turns of the instant echo model
// one after the other over loopback HTTP, and reports their latency (from
// sending the request to having decoded the answer) and the store's write
// transactions per turn. A new session every 10 turns, made outside the
// timer, keeps the measure on the per-turn cost, not on history growth.
func BenchmarkHTTPTrivialTurn(b *testing.B) { benchTrivialTurn(b, newBenchStack(b)) }

// BenchmarkHTTPTrivialTurnMetrics is BenchmarkHTTPTrivialTurn with the
// Prometheus metrics forge serve runs with by default.
func BenchmarkHTTPTrivialTurnMetrics(b *testing.B) {
	benchTrivialTurn(b, newBenchStack(b, withMetrics))
}

// BenchmarkHTTPTrivialTurnTraced is BenchmarkHTTPTrivialTurn with the
// metrics and OpenTelemetry tracing exported over OTLP/HTTP to a loopback
// endpoint that drops the exports.
func BenchmarkHTTPTrivialTurnTraced(b *testing.B) {
	benchTrivialTurn(b, newBenchStack(b, withMetrics, withTracing))
}

// BenchmarkHTTPTrivialTurnTelemetryPaired measures what metrics and
// tracing add to a trivial turn's latency with the machine's noise
// cancelled: three stacks in one process (none, metrics, metrics and
// tracing) run turns in turn, in a rotating order, so each config meets the
// same load; it reports each one's p50 and the p50s' ratios to the bare
// stack's. The tracer's batch export runs in the background of all three.
func BenchmarkHTTPTrivialTurnTelemetryPaired(b *testing.B) {
	benchPaired(b, []*benchStack{newBenchStack(b), newBenchStack(b, withMetrics), newBenchStack(b, withMetrics, withTracing)},
		[]string{"bare", "metrics", "traced"})
}

// BenchmarkHTTPTrivialTurnWebhookPaired measures what a subscribed
// webhook adds to a trivial turn (the outbox row in the terminal
// transaction, the dispatcher's claims and sends beside it): a bare stack
// and one with a webhook run turns in turn, as in the telemetry pair.
func BenchmarkHTTPTrivialTurnWebhookPaired(b *testing.B) {
	benchPaired(b, []*benchStack{newBenchStack(b), newBenchStack(b, withWebhook)}, []string{"bare", "webhook"})
}

// benchPaired runs trivial turns on the stacks in turn, in a rotating
// order, and reports each one's p50 and its ratio to the first's (the
// bare stack): each config meets the same load.
func benchPaired(b *testing.B, stacks []*benchStack, names []string) {
	body := mustJSON(msgTurn("hi"))
	sids := make([]string, len(stacks))
	lat := make([][]time.Duration, len(stacks))
	for _, s := range stacks {
		s.agent("echo")
	}
	turns := 0
	for b.Loop() {
		if turns%10 == 0 {
			b.StopTimer()
			for i, s := range stacks {
				id, err := s.session("echo")
				if err != nil {
					b.Fatal(err)
				}
				sids[i] = id
			}
			b.StartTimer()
		}
		for k := range stacks {
			i := (turns + k) % len(stacks)
			start := time.Now()
			if err := stacks[i].turn(sids[i], body); err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], time.Since(start))
		}
		turns++
	}
	p50 := make([]float64, len(stacks))
	for i := range stacks {
		slices.Sort(lat[i])
		p50[i] = float64(lat[i][len(lat[i])/2]) / float64(time.Microsecond)
		b.ReportMetric(p50[i], names[i]+"-p50-µs")
	}
	for i := 1; i < len(stacks); i++ {
		b.ReportMetric(p50[i]/p50[0], names[i]+"/"+names[0])
	}
}

func benchTrivialTurn(b *testing.B, s *benchStack) {
	s.agent("echo")
	body := mustJSON(msgTurn("hi"))
	var (
		sid        string
		lat        []time.Duration
		setup      int64 // writes made creating sessions
		turns      int
		startCount = s.writes.n.Load()
	)
	for b.Loop() {
		if turns%10 == 0 {
			b.StopTimer()
			before := s.writes.n.Load()
			id, err := s.session("echo")
			if err != nil {
				b.Fatal(err)
			}
			sid = id
			setup += s.writes.n.Load() - before
			b.StartTimer()
		}
		turns++
		start := time.Now()
		if err := s.turn(sid, body); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatency(b, lat)
	b.ReportMetric(float64(s.writes.n.Load()-startCount-setup)/float64(turns), "writes/turn")
}

// BenchmarkHTTPConcurrentTurns runs wait-mode echo turns on 100 sessions at
// once over loopback HTTP, each session driven by its own client goroutine,
// and reports turns per second and the latency percentiles. As in
// BenchmarkHTTPTrivialTurn, a worker moves to a fresh session (made before
// the timer starts) every 10 turns.
func BenchmarkHTTPConcurrentTurns(b *testing.B) {
	const workers = 100
	const perSession = 10
	s := newBenchStack(b)
	s.agent("echo")
	body := mustJSON(msgTurn("hi"))
	// Worker w runs counts[w] turns on its own sessions.
	counts := make([]int, workers)
	need := 0
	for w := range counts {
		counts[w] = b.N / workers
		if w < b.N%workers {
			counts[w]++
		}
		need += max(1, (counts[w]+perSession-1)/perSession)
	}
	pool := s.sessions("echo", need)
	lat := make([][]time.Duration, workers)
	errs := make(chan error, workers)
	before := s.writes.n.Load()
	b.ResetTimer()
	var wg sync.WaitGroup
	next := 0
	for w := range workers {
		mine := pool[next : next+max(1, (counts[w]+perSession-1)/perSession)]
		next += len(mine)
		wg.Go(func() {
			lat[w] = make([]time.Duration, 0, counts[w])
			for i := range counts[w] {
				start := time.Now()
				if err := s.turn(mine[i/perSession], body); err != nil {
					errs <- err
					return
				}
				lat[w] = append(lat[w], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
	reportLatency(b, slices.Concat(lat...))
	b.ReportMetric(float64(s.writes.n.Load()-before)/float64(b.N), "writes/turn")
}

// BenchmarkSSEDeltas streams a long reply (20,000 one-character deltas) to
// one SSE client, which parses every frame, and reports the deltas per
// second it received: the whole turn is timed, from the POST to turn.done.
// Each turn runs on a new session, made outside the timer.
//
// lost/turn reports the deltas sent by the model that the stream did not
// carry (the final model.message event would still have the whole text); any
// loss fails the benchmark. Both replies are longer than a bus
// subscription's buffer, so a reader that falls behind exercises the resume
// of a cut-off subscriber.
func BenchmarkSSEDeltas(b *testing.B) {
	for _, deltas := range []int{20000, 4000} {
		b.Run(fmt.Sprintf("deltas=%d", deltas), func(b *testing.B) { benchSSEDeltas(b, deltas) })
	}
}

func benchSSEDeltas(b *testing.B, deltas int) {
	s := newBenchStack(b)
	s.agent("long", scripted.Step{Text: strings.Repeat("x", deltas), Chunk: 1})
	turn := msgTurn("go")
	turn["stream"] = true
	body := mustJSON(turn)
	total, turns := 0, 0
	for b.Loop() {
		b.StopTimer()
		sid, err := s.session("long")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n, err := s.streamDeltas(sid, body)
		if err != nil {
			b.Fatal(err)
		}
		if n > deltas {
			b.Fatalf("received %d deltas, more than the %d sent", n, deltas)
		}
		total += n
		turns++
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "deltas/s")
	b.ReportMetric(float64(turns*deltas-total)/float64(turns), "lost/turn")
	if total != turns*deltas {
		b.Errorf("the stream carried %d of the %d deltas sent", total, turns*deltas)
	}
}

// streamDeltas posts a streamed turn, reads its SSE frames up to turn.done
// and returns how many model.message.delta frames came.
func (s *benchStack) streamDeltas(sid string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.url+"/v1/sessions/"+sid+"/turns", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("streamed turn: %d %s", resp.StatusCode, b)
	}
	r := newSSEReader(resp.Body)
	n := 0
	for {
		f, ok := r.next()
		if !ok {
			return n, fmt.Errorf("the stream ended before turn.done, after %d deltas", n)
		}
		switch f.event {
		case forge.EventModelDelta:
			n++
		case forge.EventTurnDone:
			if !strings.Contains(f.data, `"status":"done"`) {
				return n, fmt.Errorf("turn did not end done: %s", f.data)
			}
			return n, nil
		case "error":
			return n, fmt.Errorf("stream error frame: %s", f.data)
		}
	}
}
