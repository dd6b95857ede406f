// Package metrics is Forge's Prometheus instrumentation (client_golang):
// an engine.Observer counting turns, model calls and tool calls, a store
// write timer, a gauge of SSE subscribers, and the /metrics handler in the
// Prometheus text format (API.md, Operations).
//
// The series of turns, model calls and tool calls carry a tenant label:
// Handler serves every series (the operator's view), TenantHandler only
// one tenant's, without the process-wide ones (runtime, store, streams),
// so that a tenant's scrape shows nothing of another tenant: not its tool,
// subagent or MCP server names, not its volumes.
//
// Label values come from a fixed set, except tenant and tool: tenants are
// the operator's (keys), tool names come from agents, MCP servers and
// subagents, which tenants define, so each tenant's distinct tool names
// are capped (MaxToolLabels; later ones count under "_other"), and both
// are kept short and valid UTF-8. Model ids and sessions are never labels.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

var _ engine.Observer = (*Metrics)(nil)

// MaxToolLabels is how many distinct tool names of one tenant get a label
// value of their own; calls of tools seen after them count under
// OtherTool.
const MaxToolLabels = 200

// OtherTool is the tool label of the tools beyond MaxToolLabels.
const OtherTool = "_other"

// maxToolLabelBytes is the longest tool label kept; longer names are cut.
const maxToolLabelBytes = 128

// Buckets, in seconds.
var (
	// turnBuckets reach the default turn timeout (10 minutes).
	turnBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// modelBuckets cover a first token and a whole call.
	modelBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	toolBuckets  = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}
	// storeBuckets start at 50 µs: an embedded SQLite commit is well
	// under a millisecond.
	storeBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5}
)

// Options configure Metrics.
type Options struct {
	// Logger receives the errors of serving /metrics.
	Logger *slog.Logger
}

// Metrics holds Forge's metrics on a registry of its own (with the Go
// runtime and process collectors).
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	turns        *prometheus.CounterVec
	turnsRunning *prometheus.GaugeVec
	turnDuration *prometheus.HistogramVec

	modelCalls    *prometheus.CounterVec
	modelDuration *prometheus.HistogramVec
	firstToken    *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	cost          *prometheus.CounterVec

	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec

	storeWrites        prometheus.Histogram
	storeWriteFailures prometheus.Counter

	hopts promhttp.HandlerOpts

	mu    sync.Mutex                 // guards the following
	tools map[string]map[string]bool // by tenant
	sse   []func() int64
}

// New registers Forge's metrics on a new registry.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tools: map[string]map[string]bool{}}
	m.turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forge_turns_total", Help: "Turns ended, by tenant and status (done, cancelled, errored); turns recovery ended count as cancelled.",
	}, []string{TenantLabel, "status"})
	m.turnsRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "forge_turns_running", Help: "Turns executing in this process, by tenant.",
	}, []string{TenantLabel})
	m.turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "forge_turn_duration_seconds", Help: "Time from a turn's creation to its terminal write, by tenant and status.", Buckets: turnBuckets,
	}, []string{TenantLabel, "status"})
	m.modelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forge_model_calls_total", Help: "Model calls ended, by tenant and outcome (ok, error, cancelled).",
	}, []string{TenantLabel, "outcome"})
	m.modelDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "forge_model_call_duration_seconds", Help: "Duration of model calls, from sending the request to the end of the stream, by tenant.", Buckets: modelBuckets,
	}, []string{TenantLabel})
	m.firstToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "forge_model_time_to_first_token_seconds", Help: "Time from sending a model request to its first streamed output (text, reasoning or a tool call), by tenant.", Buckets: modelBuckets,
	}, []string{TenantLabel})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forge_model_tokens_total", Help: "Tokens of model calls, by tenant and direction (input, output), as the provider reported them or Forge estimated them.",
	}, []string{TenantLabel, "direction"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forge_model_cost_total", Help: "Cost of model calls in US dollars, for models with configured prices, by tenant.",
	}, []string{TenantLabel})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forge_tool_calls_total", Help: "Server-side tool calls ended, by tenant, tool and outcome (ok, error, cancelled, auth_required, paused).",
	}, []string{TenantLabel, "tool", "outcome"})
	m.toolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "forge_tool_duration_seconds", Help: "Duration of server-side tool calls, by tenant and tool.", Buckets: toolBuckets,
	}, []string{TenantLabel, "tool"})
	m.storeWrites = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "forge_store_write_duration_seconds", Help: "Duration of store write transactions, waiting for the writer or a connection included.", Buckets: storeBuckets,
	})
	m.storeWriteFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forge_store_write_failures_total", Help: "Store writes that failed for a reason other than the request itself (a conflict, a fenced turn).",
	})
	sse := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forge_sse_subscribers", Help: "Open Server-Sent Events streams.",
	}, m.sseSubscribers)
	m.reg.MustRegister(m.turns, m.turnsRunning, m.turnDuration, m.modelCalls, m.modelDuration, m.firstToken, m.tokens,
		m.cost, m.toolCalls, m.toolDuration, m.storeWrites, m.storeWriteFailures, sse,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hopts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	if opts.Logger != nil {
		hopts.ErrorLog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelError)
	}
	m.hopts = hopts
	m.handler = promhttp.HandlerFor(m.reg, hopts)
	return m
}

// TenantLabel is the label naming the tenant of a series.
const TenantLabel = "tenant"

// Handler serves every metric in the Prometheus text format (or another
// format the scraper asks for): the operator's view.
func (m *Metrics) Handler() http.Handler { return m.handler }

// TenantHandler serves only tenant's series: those labelled with it, and
// no process-wide metric.
func (m *Metrics) TenantHandler(tenant string) http.Handler {
	return promhttp.HandlerFor(tenantGatherer{reg: m.reg, tenant: cleanLabel(tenant)}, m.hopts)
}

// tenantGatherer gathers the series of one tenant.
type tenantGatherer struct {
	reg    prometheus.Gatherer
	tenant string
}

func (g tenantGatherer) Gather() ([]*dto.MetricFamily, error) {
	fams, err := g.reg.Gather()
	out := fams[:0]
	for _, f := range fams {
		kept := f.Metric[:0]
		for _, s := range f.Metric {
			if t, ok := tenantOf(s); ok && t == g.tenant {
				kept = append(kept, s)
			}
		}
		if len(kept) > 0 {
			f.Metric = kept
			out = append(out, f)
		}
	}
	return out, err
}

// tenantOf is the value of a series' tenant label; ok is false when it
// has none (a process-wide series).
func tenantOf(s *dto.Metric) (tenant string, ok bool) {
	for _, l := range s.Label {
		if l.GetName() == TenantLabel {
			return l.GetValue(), true
		}
	}
	return "", false
}

// Registry is where the metrics are registered, for adding more.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// WatchSSE adds a source of the forge_sse_subscribers gauge (the HTTP
// server's count of open streams).
func (m *Metrics) WatchSSE(count func() int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sse = append(m.sse, count)
}

func (m *Metrics) sseSubscribers() float64 {
	m.mu.Lock()
	sources := m.sse
	m.mu.Unlock()
	var n int64
	for _, f := range sources {
		n += f()
	}
	return float64(n)
}

// ObserveStoreWrite records one store write (the stores' ObserveWrites).
// Answers the request itself caused (a conflict, a fenced turn, a missing
// row) are not failures.
func (m *Metrics) ObserveStoreWrite(d time.Duration, err error) {
	m.storeWrites.Observe(d.Seconds())
	if storeFailure(err) {
		m.storeWriteFailures.Inc()
	}
}

// storeFailure tells a failure of the store from an answer about the data
// or a caller that gave up.
func storeFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, forge.ErrStore), errors.Is(err, forge.ErrLocked):
		return true
	}
	return forge.ErrorSentinel(err) == nil
}

// TurnStarted implements engine.Observer.
func (m *Metrics) TurnStarted(ctx context.Context, t engine.TurnStart) context.Context {
	m.turnsRunning.WithLabelValues(cleanLabel(t.Tenant)).Inc()
	return ctx
}

// TurnEnded implements engine.Observer.
func (m *Metrics) TurnEnded(_ context.Context, t engine.TurnEnd) {
	tenant := cleanLabel(t.Tenant)
	if !t.Recovered {
		m.turnsRunning.WithLabelValues(tenant).Dec()
	}
	if t.EndedElsewhere || t.NotCreated {
		return
	}
	status := statusLabel(t.Status)
	m.turns.WithLabelValues(tenant, status).Inc()
	if !t.Recovered {
		m.turnDuration.WithLabelValues(tenant, status).Observe(t.Duration.Seconds())
	}
}

func statusLabel(s string) string {
	switch s {
	case forge.TurnDone, forge.TurnCancelled, forge.TurnErrored:
		return s
	}
	return "unknown"
}

// ModelCallStarted implements engine.Observer.
func (m *Metrics) ModelCallStarted(ctx context.Context, _ engine.ModelCallStart) context.Context {
	return ctx
}

// ModelCallEnded implements engine.Observer.
func (m *Metrics) ModelCallEnded(_ context.Context, c engine.ModelCallEnd) {
	outcome := "ok"
	switch {
	case c.Cancelled:
		outcome = "cancelled"
	case c.Err != nil:
		outcome = "error"
	}
	tenant := cleanLabel(c.Tenant)
	m.modelCalls.WithLabelValues(tenant, outcome).Inc()
	m.modelDuration.WithLabelValues(tenant).Observe(c.Duration.Seconds())
	if c.FirstToken > 0 {
		m.firstToken.WithLabelValues(tenant).Observe(c.FirstToken.Seconds())
	}
	if c.Usage.InputTokens > 0 {
		m.tokens.WithLabelValues(tenant, "input").Add(float64(c.Usage.InputTokens))
	}
	if c.Usage.OutputTokens > 0 {
		m.tokens.WithLabelValues(tenant, "output").Add(float64(c.Usage.OutputTokens))
	}
	if c.Usage.Cost > 0 {
		m.cost.WithLabelValues(tenant).Add(c.Usage.Cost)
	}
}

// ToolCallStarted implements engine.Observer.
func (m *Metrics) ToolCallStarted(ctx context.Context, _ engine.ToolCallStart) context.Context {
	return ctx
}

// ToolCallEnded implements engine.Observer.
func (m *Metrics) ToolCallEnded(_ context.Context, c engine.ToolCallEnd) {
	tenant := cleanLabel(c.Tenant)
	tool := m.toolLabel(tenant, c.Tool)
	m.toolCalls.WithLabelValues(tenant, tool, outcomeLabel(c.Outcome)).Inc()
	m.toolDuration.WithLabelValues(tenant, tool).Observe(c.Duration.Seconds())
}

func outcomeLabel(o string) string {
	switch o {
	case engine.ToolOK, engine.ToolError, engine.ToolCancelled, engine.ToolAuthRequired, engine.ToolPaused:
		return o
	}
	return "unknown"
}

// toolLabel is the label value of a tenant's tool name: the name, made
// valid UTF-8 and cut to maxToolLabelBytes, while fewer than
// MaxToolLabels names of the tenant have been seen; OtherTool after.
func (m *Metrics) toolLabel(tenant, name string) string {
	name = cleanLabel(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.tools[tenant]
	if seen == nil {
		seen = map[string]bool{}
		m.tools[tenant] = seen
	}
	if seen[name] {
		return name
	}
	if len(seen) >= MaxToolLabels {
		return OtherTool
	}
	seen[name] = true
	return name
}

func cleanLabel(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxToolLabelBytes {
		return s
	}
	cut := maxToolLabelBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
