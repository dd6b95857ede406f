package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/metrics"
	"github.com/forge-runtime/forge/opentelemetry"
	"github.com/forge-runtime/forge/provider"
)

// Log formats (--log-format).
const (
	logText = "text"
	logJSON = "json"
)

// newLogger builds the server's logger and makes it the process's: the
// standard log package and slog's default write through it, so every line
// on out has the one format (with json, every line is a JSON object).
func newLogger(format, level string, out io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format {
	case logText, "":
		h = slog.NewTextHandler(out, opts)
	case logJSON:
		h = slog.NewJSONHandler(out, opts)
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
	}
	logger := slog.New(h)
	// SetDefault also routes the log package (log.Printf) to h.
	slog.SetDefault(logger)
	log.SetFlags(0)
	return logger, nil
}

// reportedError is an error serve has already logged: Main exits 1
// without printing it again (which would break a JSON log).
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

// telemetry is what forge serve observes itself with: Prometheus metrics
// (unless --metrics=false) and OpenTelemetry traces (when an OTLP endpoint
// is configured). Either may be nil.
type telemetry struct {
	metrics *metrics.Metrics
	tracer  *opentelemetry.Tracer
}

// setupTelemetry starts the metrics and the tracer the flags and the
// environment ask for, and has store report its writes to the metrics.
func setupTelemetry(ctx context.Context, withMetrics bool, store forge.Store, models *provider.Registry, log *slog.Logger) (*telemetry, error) {
	t := &telemetry{}
	if withMetrics {
		t.metrics = metrics.New(metrics.Options{Logger: log})
		if s, ok := store.(interface {
			ObserveWrites(func(time.Duration, error))
		}); ok {
			s.ObserveWrites(t.metrics.ObserveStoreWrite)
		}
	}
	if opentelemetry.Enabled(os.Getenv) {
		kinds := map[string]string{}
		for _, p := range models.Providers() {
			kinds[p.Name] = p.Kind
		}
		tr, err := opentelemetry.New(ctx, opentelemetry.Options{Version: Version, Logger: log,
			ProviderName: func(name string) string { return genAIProvider(kinds[name]) }})
		if err != nil {
			return nil, err
		}
		t.tracer = tr
		log.Info("tracing: exporting spans over OTLP/HTTP", "endpoint", otlpEndpoint())
	}
	return t, nil
}

// genAIProvider is the gen_ai.provider.name of a provider kind: the wire
// format's vendor, whatever the provider is called in the config.
func genAIProvider(kind string) string {
	switch kind {
	case provider.KindOpenAI, provider.KindOpenAIResponses:
		return "openai"
	case provider.KindAnthropic:
		return "anthropic"
	}
	return ""
}

func otlpEndpoint() string {
	if e := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); e != "" {
		return e
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// observer is what the engine reports to (nil: nothing).
func (t *telemetry) observer() engine.Observer {
	var o []engine.Observer
	if t.metrics != nil {
		o = append(o, t.metrics)
	}
	if t.tracer != nil {
		o = append(o, t.tracer)
	}
	return engine.Observers(o...)
}

// metricsHandler is served at /metrics (nil: not served).
func (t *telemetry) metricsHandler() http.Handler {
	if t.metrics == nil {
		return nil
	}
	return t.metrics.Handler()
}

// tenantMetrics serves a tenant key's /metrics: its tenant's series
// (nil: not served).
func (t *telemetry) tenantMetrics() func(tenant string) http.Handler {
	if t.metrics == nil {
		return nil
	}
	return t.metrics.TenantHandler
}

// serving wraps the API's handler (a caller's trace context continues into
// its turns) and counts its event streams.
func (t *telemetry) serving(api *httpapi.Server) http.Handler {
	if t.metrics != nil {
		t.metrics.WatchSSE(api.SSESubscribers)
	}
	if t.tracer != nil {
		return t.tracer.Middleware(api.Handler())
	}
	return api.Handler()
}

// close exports the spans left.
func (t *telemetry) close(ctx context.Context, log *slog.Logger) {
	if t.tracer == nil {
		return
	}
	if err := t.tracer.Close(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("tracing: final export failed", "err", err)
	}
}

// readiness are the checks of GET /readyz: the store answers.
func readiness(store forge.Store) []httpapi.ReadyCheck {
	check := func(ctx context.Context) error {
		_, _, err := store.ListAgents(ctx, forge.DefaultTenant, forge.ListOptions{Limit: 1})
		return err
	}
	if p, ok := store.(interface{ Ping(context.Context) error }); ok {
		check = p.Ping
	}
	return []httpapi.ReadyCheck{{Name: "store", Check: check}}
}

// announce writes to stdout the line that tells where a listener is (the
// harnesses that start forge serve read it): as plain text, or, with
// --log-format json, as one JSON object like every other line (stdout and
// stderr are one log under a container runtime).
func announce(w io.Writer, format, msg, url string) {
	if format != logJSON {
		fmt.Fprintf(w, "%s %s\n", msg, url)
		return
	}
	line, _ := json.Marshal(struct {
		Time  string `json:"time"`
		Level string `json:"level"`
		Msg   string `json:"msg"`
		URL   string `json:"url"`
	}{time.Now().Format(time.RFC3339Nano), "INFO", msg + " " + url, url})
	fmt.Fprintf(w, "%s\n", line)
}
