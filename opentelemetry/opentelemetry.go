// Package opentelemetry exports Forge's turns as OpenTelemetry traces
// (the SDK, with its OTLP/HTTP exporter), following the GenAI semantic
// conventions (API.md, Operations):
//
//	invoke_agent {agent}          one per turn (INTERNAL)
//	├── chat {model}              one per model call, model id as sent (CLIENT)
//	└── execute_tool {tool}       one per server-side tool call (INTERNAL)
//	    └── chat {model}          a subagent's calls nest under its delegation
//
// with gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model,
// gen_ai.conversation.id (the session), gen_ai.agent.*, gen_ai.usage.*,
// gen_ai.response.finish_reasons, gen_ai.tool.name and gen_ai.tool.call.id.
// Contents (prompts, outputs, tool arguments) are never recorded.
//
// The standard OTEL_* variables configure it: OTEL_EXPORTER_OTLP_ENDPOINT
// (or _TRACES_ENDPOINT) turns it on, _HEADERS, _TIMEOUT, _COMPRESSION and
// _CERTIFICATE shape the export, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES the resource, OTEL_TRACES_SAMPLER(_ARG) the
// sampling, OTEL_BSP_* the batching, OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turn it off. Only the http/protobuf protocol is
// spoken.
//
// The Tracer is not registered as OpenTelemetry's global provider: SDKs
// that trace through the global one (the Anthropic SDK does) would
// otherwise add spans of their own beside Forge's chat spans.
package opentelemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

var _ engine.Observer = (*Tracer)(nil)

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set, and neither OTEL_SDK_DISABLED=true nor
// OTEL_TRACES_EXPORTER=none says otherwise.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// Options configure a Tracer.
type Options struct {
	// Getenv reads the environment for the checks New makes (nil:
	// os.Getenv through the SDK, which reads the OTEL_* variables itself).
	Getenv func(string) string
	// Version is the service.version of the resource.
	Version string
	// Logger receives the SDK's errors (a failed export).
	Logger *slog.Logger
	// ProviderName maps a model provider's configured name (the prefix of
	// "provider/model") to gen_ai.provider.name, e.g. a provider "local"
	// of kind openai to "openai". Nil, or "" from it, uses the name.
	ProviderName func(name string) string
}

// Tracer turns the engine's observations into spans and exports them.
type Tracer struct {
	tp           *sdktrace.TracerProvider
	tracer       trace.Tracer
	providerName func(string) string
	propagator   propagation.TextMapPropagator
}

// New starts the OTLP/HTTP exporter and a batch span processor. Close
// flushes and stops them.
func New(ctx context.Context, opts Options) (*Tracer, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: Forge exports traces over OTLP/HTTP only (http/protobuf)", name, p)
			}
			break
		}
	}
	if opts.Logger != nil {
		// The SDK reports failed exports through these globals; they only
		// log, and there is one logger per process anyway.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			opts.Logger.Warn("opentelemetry: "+err.Error(), "component", "opentelemetry")
		}))
		otel.SetLogger(logr.FromSlogHandler(opts.Logger.Handler()))
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("opentelemetry: exporter: %w", err)
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	// Defaults first: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("forge"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("opentelemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{
		tp:           tp,
		tracer:       tp.Tracer("github.com/forge-runtime/forge", trace.WithInstrumentationVersion(version)),
		providerName: opts.ProviderName,
		propagator:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// ForceFlush exports the spans ended so far.
func (t *Tracer) ForceFlush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// Close exports what is left and stops the exporter.
func (t *Tracer) Close(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// Middleware continues a caller's trace: a request carrying W3C
// traceparent (and baggage) headers gets them in its context, so a turn it
// starts is a child of the caller's span.
func (t *Tracer) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Traceparent") != "" {
			r = r.WithContext(t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

func (t *Tracer) provider(name string) string {
	if t.providerName != nil {
		if p := t.providerName(name); p != "" {
			return p
		}
	}
	return name
}

// Forge's own attributes, beside the GenAI ones.
const (
	attrTenant       = attribute.Key("forge.tenant")
	attrTurnID       = attribute.Key("forge.turn.id")
	attrTurnStatus   = attribute.Key("forge.turn.status")
	attrCancelReason = attribute.Key("forge.turn.cancel_reason")
	attrIterations   = attribute.Key("forge.turn.iterations")
	attrRecovered    = attribute.Key("forge.turn.recovered")
	attrThreadID     = attribute.Key("forge.thread.id")
	attrIteration    = attribute.Key("forge.iteration")
	attrSummary      = attribute.Key("forge.compaction.summary")
	attrToolOutcome  = attribute.Key("forge.tool.outcome")
	attrSubagent     = attribute.Key("forge.subagent")
	attrEstimated    = attribute.Key("forge.usage.estimated")
	attrCost         = attribute.Key("forge.usage.cost")
)

// TurnStarted implements engine.Observer: the invoke_agent span.
func (t *Tracer) TurnStarted(ctx context.Context, s engine.TurnStart) context.Context {
	provider, model, _ := strings.Cut(s.Model, "/")
	ctx, _ = t.tracer.Start(ctx, "invoke_agent "+s.Agent,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(s.Start),
		trace.WithAttributes(
			semconv.GenAIOperationNameInvokeAgent,
			semconv.GenAIProviderNameKey.String(t.provider(provider)),
			semconv.GenAIRequestModel(model),
			semconv.GenAIAgentName(s.Agent),
			semconv.GenAIAgentID(s.AgentID),
			semconv.GenAIAgentVersion(strconv.Itoa(s.AgentVersion)),
			semconv.GenAIConversationID(s.SessionID),
			attrTenant.String(s.Tenant),
			attrTurnID.String(s.TurnID),
		))
	return ctx
}

// TurnEnded implements engine.Observer.
func (t *Tracer) TurnEnded(ctx context.Context, e engine.TurnEnd) {
	span := trace.SpanFromContext(ctx)
	if e.Recovered {
		// The turn ran in a process that died; its spans died with it.
		// Recovery is a short span of its own, so the end is visible.
		name := "invoke_agent"
		if e.Agent != "" {
			name += " " + e.Agent
		}
		_, span = t.tracer.Start(ctx, name, trace.WithTimestamp(e.End),
			trace.WithAttributes(semconv.GenAIOperationNameInvokeAgent, semconv.GenAIConversationID(e.SessionID),
				attrTenant.String(e.Tenant), attrTurnID.String(e.TurnID), attrRecovered.Bool(true)))
	}
	if !span.IsRecording() {
		return
	}
	if e.NotCreated {
		span.SetStatus(codes.Error, "the turn was not created: "+e.ErrorMessage)
		span.End(trace.WithTimestamp(e.End))
		return
	}
	span.SetAttributes(
		semconv.GenAIUsageInputTokens(int(e.Usage.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(e.Usage.OutputTokens)),
		attrTurnStatus.String(e.Status),
		attrIterations.Int(e.Iterations),
	)
	if e.Usage.Cost > 0 {
		span.SetAttributes(attrCost.Float64(e.Usage.Cost))
	}
	if e.CancelReason != "" {
		span.SetAttributes(attrCancelReason.String(e.CancelReason))
	}
	if e.Status == forge.TurnErrored {
		span.SetAttributes(semconv.ErrorTypeKey.String(e.ErrorCode))
		span.SetStatus(codes.Error, e.ErrorMessage)
	}
	span.End(trace.WithTimestamp(e.End))
}

// ModelCallStarted implements engine.Observer: the chat span.
func (t *Tracer) ModelCallStarted(ctx context.Context, c engine.ModelCallStart) context.Context {
	ctx, _ = t.tracer.Start(ctx, "chat "+c.Model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(c.Start),
		trace.WithAttributes(
			semconv.GenAIOperationNameChat,
			semconv.GenAIProviderNameKey.String(t.provider(c.Provider)),
			semconv.GenAIRequestModel(c.Model),
			semconv.GenAIConversationID(c.SessionID),
			semconv.GenAIAgentName(c.Agent),
			attrThreadID.String(c.ThreadID),
			attrIteration.Int(c.Iteration),
		))
	if c.Summary {
		trace.SpanFromContext(ctx).SetAttributes(attrSummary.Bool(true))
	}
	return ctx
}

// ModelCallEnded implements engine.Observer.
func (t *Tracer) ModelCallEnded(ctx context.Context, c engine.ModelCallEnd) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		semconv.GenAIResponseFinishReasons(c.Finish),
		semconv.GenAIUsageInputTokens(int(c.Usage.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(c.Usage.OutputTokens)),
	)
	if c.Usage.CacheReadTokens > 0 {
		span.SetAttributes(semconv.GenAIUsageCacheReadInputTokens(int(c.Usage.CacheReadTokens)))
	}
	if c.Usage.CacheWriteTokens > 0 {
		span.SetAttributes(semconv.GenAIUsageCacheCreationInputTokens(int(c.Usage.CacheWriteTokens)))
	}
	if c.Usage.Estimated {
		span.SetAttributes(attrEstimated.Bool(true))
	}
	if c.Usage.Cost > 0 {
		span.SetAttributes(attrCost.Float64(c.Usage.Cost))
	}
	if c.FirstToken > 0 {
		span.AddEvent("gen_ai.first_token", trace.WithTimestamp(c.End.Add(c.FirstToken-c.Duration)))
	}
	switch {
	case c.Cancelled:
		span.SetAttributes(semconv.ErrorTypeKey.String("cancelled"))
	case c.Err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(modelErrorType(c.Err)))
		span.SetStatus(codes.Error, c.Err.Error())
	}
	span.End(trace.WithTimestamp(c.End))
}

// modelErrorType is error.type of a failed model call: the HTTP status
// when the provider answered one.
func modelErrorType(err error) string {
	var me *forge.ModelError
	if errors.As(err, &me) {
		if me.ContextOverflow {
			return "context_overflow"
		}
		if me.StatusCode > 0 {
			return strconv.Itoa(me.StatusCode)
		}
	}
	return "model_error"
}

// ToolCallStarted implements engine.Observer: the execute_tool span.
func (t *Tracer) ToolCallStarted(ctx context.Context, c engine.ToolCallStart) context.Context {
	ctx, span := t.tracer.Start(ctx, "execute_tool "+c.Tool,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(c.Start),
		trace.WithAttributes(
			semconv.GenAIOperationNameExecuteTool,
			semconv.GenAIToolName(c.Tool),
			semconv.GenAIToolCallID(c.CallID),
			semconv.GenAIToolTypeKey.String("function"),
			semconv.GenAIConversationID(c.SessionID),
			attrThreadID.String(c.ThreadID),
		))
	if c.Subagent != "" {
		span.SetAttributes(attrSubagent.String(c.Subagent))
	}
	return ctx
}

// ToolCallEnded implements engine.Observer.
func (t *Tracer) ToolCallEnded(ctx context.Context, c engine.ToolCallEnd) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrToolOutcome.String(c.Outcome))
	switch c.Outcome {
	case engine.ToolOK, engine.ToolPaused, engine.ToolAuthRequired:
	default:
		span.SetAttributes(semconv.ErrorTypeKey.String(c.Outcome))
		msg := c.Outcome
		if c.Err != nil {
			msg = c.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(c.End))
}
