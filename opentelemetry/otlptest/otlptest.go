// Package otlptest is a loopback OTLP/HTTP trace receiver for tests: it
// decodes the export requests an exporter sends (protobuf, gzip or not,
// as a collector would) and keeps their spans. Point
// OTEL_EXPORTER_OTLP_ENDPOINT at URL().
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, flattened.
type Span struct {
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; "" for a root
	// Attrs are the span's attributes as strings (numbers and booleans in
	// JSON, arrays as JSON arrays of strings).
	Attrs  map[string]string
	Events []string
	// Error is set when the span's status is Error; Message is its text.
	Error   bool
	Message string
	// Resource is the attributes of the span's resource.
	Resource map[string]string
	// StartNano and EndNano are the span's times (Unix nanoseconds).
	StartNano, EndNano uint64
}

// Receiver is the loopback receiver. Its methods are safe for concurrent
// use.
type Receiver struct {
	t   testing.TB
	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	requests int
	changed  chan struct{} // closed and replaced on each export
}

// New starts a receiver on 127.0.0.1, closed by t.Cleanup.
func New(t testing.TB) *Receiver {
	r := &Receiver{t: t, changed: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the base URL for OTEL_EXPORTER_OTLP_ENDPOINT (traces go to
// URL()+"/v1/traces").
func (r *Receiver) URL() string { return r.srv.URL }

// Spans returns the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Changed returns a channel closed at the next export.
func (r *Receiver) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.t.Errorf("otlptest: unexpected request %s %s (%s)", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		r.t.Errorf("otlptest: the export is not an ExportTraceServiceRequest: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range export.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s := Span{Name: sp.Name, Kind: sp.Kind, TraceID: hex.EncodeToString(sp.TraceId),
					SpanID: hex.EncodeToString(sp.SpanId), ParentID: hex.EncodeToString(sp.ParentSpanId),
					Attrs: attrs(sp.Attributes), Resource: res, StartNano: sp.StartTimeUnixNano, EndNano: sp.EndTimeUnixNano,
					Error: sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Message: sp.GetStatus().GetMessage()}
				for _, e := range sp.Events {
					s.Events = append(s.Events, e.Name)
				}
				got = append(got, s)
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.Key] = anyString(kv.Value)
	}
	return out
}

func anyString(v *commonpb.AnyValue) string {
	var x any
	switch val := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return val.StringValue
	case *commonpb.AnyValue_IntValue:
		x = val.IntValue
	case *commonpb.AnyValue_BoolValue:
		x = val.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		x = val.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		parts := []string{}
		for _, e := range val.ArrayValue.Values {
			parts = append(parts, anyString(e))
		}
		x = parts
	default:
		return ""
	}
	b, _ := json.Marshal(x)
	return string(b)
}
