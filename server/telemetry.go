package server

import (
	"context"
	"errors"
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

// telemetry is what a server observes itself with: Prometheus metrics
// (unless --metrics=false) and OpenTelemetry traces (when an OTLP endpoint
// is configured). Either may be nil.
type telemetry struct {
	metrics *metrics.Metrics
	tracer  *opentelemetry.Tracer
}

// setupTelemetry starts the metrics and the tracer the flags and the
// environment ask for, and has store report its writes to the metrics.
func setupTelemetry(ctx context.Context, withMetrics bool, store forge.Store, models *provider.Registry, version string, log *slog.Logger) (*telemetry, error) {
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
		tr, err := opentelemetry.New(ctx, opentelemetry.Options{Version: version, Logger: log,
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
