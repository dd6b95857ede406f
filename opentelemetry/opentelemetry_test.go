package opentelemetry_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/opentelemetry"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
)

// receiver is a loopback OTLP/HTTP trace receiver: it decodes the export
// requests (protobuf, gzip or not) as a collector would.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []map[string]string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != "POST" || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		r.t.Errorf("receiver: %s %s %s", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
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
		http.Error(w, err.Error(), http.StatusBadRequest)
		r.t.Errorf("receiver: the export is not an ExportTraceServiceRequest: %v", err)
		return
	}
	r.mu.Lock()
	for _, rs := range export.ResourceSpans {
		r.resources = append(r.resources, attrs(rs.GetResource().GetAttributes()))
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *receiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// attrs flattens attributes to strings (arrays as JSON).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.Key] = anyString(kv.Value)
	}
	return out
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		b, _ := json.Marshal(x.IntValue)
		return string(b)
	case *commonpb.AnyValue_BoolValue:
		b, _ := json.Marshal(x.BoolValue)
		return string(b)
	case *commonpb.AnyValue_DoubleValue:
		b, _ := json.Marshal(x.DoubleValue)
		return string(b)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyString(e))
		}
		b, _ := json.Marshal(parts)
		return string(b)
	}
	return ""
}

// traced is a server wired as forge serve wires it with tracing on.
type traced struct {
	t      *testing.T
	url    string
	tracer *opentelemetry.Tracer
}

func newTraced(t *testing.T) *traced {
	t.Helper()
	ctx := context.Background()
	tracer, err := opentelemetry.New(ctx, opentelemetry.Options{
		Version: "test",
		Logger:  slog.New(slog.DiscardHandler),
		ProviderName: func(name string) string {
			if name == scripted.ProviderName {
				return "forge.scripted"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, t.TempDir()+"/forge.db")
	if err != nil {
		t.Fatal(err)
	}
	models, err := provider.Build(nil, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	eng := engine.New(engine.Config{Store: st, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: logger, Observer: tracer})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Config{Store: st, Engine: eng, Logger: logger})
	srv := httptest.NewServer(tracer.Middleware(api.Handler()))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Close(ctx)
		_ = st.Close(ctx)
		_ = tracer.Close(ctx)
	})
	return &traced{t: t, url: srv.URL, tracer: tracer}
}

func (s *traced) post(path string, body any, want int, out any, headers ...string) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", s.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
	}
	if out != nil {
		_ = json.Unmarshal(raw, out)
	}
}

func message(text string) map[string]any {
	return map[string]any{"input": []any{map[string]any{"type": "message", "text": text}}}
}

func spanID(b []byte) string { return hex.EncodeToString(b) }

// The OTLP exporter reads OTEL_EXPORTER_OTLP_ENDPOINT: these tests set it
// and cannot run in parallel.

func TestSpansFollowTheGenAIConventions(t *testing.T) {
	rcv := newReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	s := newTraced(t)
	s.post("/v1/agents", map[string]any{"name": "writer", "model": "scripted/echo", "model_params": map[string]any{
		"script": scripted.Script(scripted.Step{Text: "prose marker", Usage: &scripted.Usage{InputTokens: 5, OutputTokens: 1}})}}, 201, nil)
	s.post("/v1/agents", map[string]any{"name": "lead", "model": "scripted/echo", "tools": []any{map[string]any{"name": "echo"}},
		"subagents": []string{"writer"}, "model_params": map[string]any{"script": scripted.Script(
			scripted.Step{ToolCalls: []scripted.ToolCall{
				{Name: "echo", Arguments: json.RawMessage(`{"text":"arguments marker"}`)},
				{Name: "subagent_writer", Arguments: json.RawMessage(`{"task":"task marker"}`)},
			}, Usage: &scripted.Usage{InputTokens: 100, OutputTokens: 10}},
			scripted.Step{Text: "final marker", Usage: &scripted.Usage{InputTokens: 200, OutputTokens: 20}},
		)}}, 201, nil)
	s.post("/v1/agents", map[string]any{"name": "broken", "model": "scripted/echo", "model_params": map[string]any{
		"script": scripted.Script(scripted.Step{Error: "refused", Status: 400})}}, 201, nil)

	var ses, turn struct{ ID, Status string }
	s.post("/v1/sessions", map[string]any{"agent": "lead"}, 201, &ses)
	// The caller's trace continues into the turn.
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	s.post("/v1/sessions/"+ses.ID+"/turns", message("input marker"), 200, &turn, "traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	if turn.Status != "done" {
		t.Fatalf("turn %+v", turn)
	}
	var broken, failed struct{ ID, Status string }
	s.post("/v1/sessions", map[string]any{"agent": "broken"}, 201, &broken)
	s.post("/v1/sessions/"+broken.ID+"/turns", message("go"), 200, &failed)
	if failed.Status != "errored" {
		t.Fatalf("broken turn %+v", failed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	byName := map[string][]*tracepb.Span{}
	for _, sp := range rcv.all() {
		byName[sp.Name] = append(byName[sp.Name], sp)
	}
	var names []string
	for n, l := range byName {
		for range l {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	want := []string{"chat echo", "chat echo", "chat echo", "chat echo", "execute_tool echo", "execute_tool subagent_writer",
		"invoke_agent broken", "invoke_agent lead"}
	if !slices.Equal(names, want) {
		t.Fatalf("spans\n got %v\nwant %v", names, want)
	}
	root := byName["invoke_agent lead"][0]
	if hex.EncodeToString(root.TraceId) != traceID || spanID(root.ParentSpanId) != callerSpan {
		t.Fatalf("invoke_agent is not the caller's child: trace %x parent %x", root.TraceId, root.ParentSpanId)
	}
	ra := attrs(root.Attributes)
	for k, v := range map[string]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "forge.scripted", "gen_ai.request.model": "echo",
		"gen_ai.agent.name": "lead", "gen_ai.conversation.id": ses.ID, "forge.turn.id": turn.ID, "forge.turn.status": "done",
		"gen_ai.usage.input_tokens": "305", "gen_ai.usage.output_tokens": "31",
	} {
		if ra[k] != v {
			t.Errorf("invoke_agent %s = %q, want %q", k, ra[k], v)
		}
	}
	if root.Kind != tracepb.Span_SPAN_KIND_INTERNAL || root.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("invoke_agent kind %v status %v", root.Kind, root.Status)
	}
	delegation := byName["execute_tool subagent_writer"][0]
	var leadChats, writerChats int
	for _, sp := range byName["chat echo"] {
		a := attrs(sp.Attributes)
		if a["gen_ai.operation.name"] != "chat" || a["gen_ai.provider.name"] != "forge.scripted" || a["gen_ai.request.model"] != "echo" ||
			sp.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("chat span %v kind %v", a, sp.Kind)
		}
		switch a["gen_ai.agent.name"] {
		case "lead":
			leadChats++
			if spanID(sp.ParentSpanId) != spanID(root.SpanId) || !bytes.Equal(sp.TraceId, root.TraceId) {
				t.Errorf("lead's chat span is not under invoke_agent")
			}
			wantFinish, in, out := `["tool_calls"]`, "100", "10"
			if a["forge.iteration"] == "2" {
				wantFinish, in, out = `["stop"]`, "200", "20"
			}
			if a["gen_ai.response.finish_reasons"] != wantFinish || a["gen_ai.usage.input_tokens"] != in || a["gen_ai.usage.output_tokens"] != out {
				t.Errorf("lead's chat span %v", a)
			}
			if !slices.ContainsFunc(sp.Events, func(e *tracepb.Span_Event) bool { return e.Name == "gen_ai.first_token" }) {
				t.Errorf("lead's chat span has no first token event")
			}
		case "writer":
			writerChats++
			if spanID(sp.ParentSpanId) != spanID(delegation.SpanId) {
				t.Errorf("the subagent's chat span is not under its execute_tool span")
			}
		case "broken":
			if sp.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || a["error.type"] != "400" ||
				a["gen_ai.response.finish_reasons"] != `["error"]` {
				t.Errorf("failed chat span %v status %v", a, sp.Status)
			}
		}
	}
	if leadChats != 2 || writerChats != 1 {
		t.Errorf("%d lead chats, %d writer chats", leadChats, writerChats)
	}
	for _, name := range []string{"execute_tool echo", "execute_tool subagent_writer"} {
		sp := byName[name][0]
		a := attrs(sp.Attributes)
		tool := strings.TrimPrefix(name, "execute_tool ")
		if spanID(sp.ParentSpanId) != spanID(root.SpanId) || a["gen_ai.operation.name"] != "execute_tool" ||
			a["gen_ai.tool.name"] != tool || !strings.HasPrefix(a["gen_ai.tool.call.id"], "call_") || a["forge.tool.outcome"] != "ok" {
			t.Errorf("%s: parent %x attributes %v", name, sp.ParentSpanId, a)
		}
	}
	bad := byName["invoke_agent broken"][0]
	if ba := attrs(bad.Attributes); bad.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || ba["error.type"] != "model_error" ||
		ba["forge.turn.status"] != "errored" || len(bad.ParentSpanId) != 0 {
		t.Errorf("errored turn span %v status %v parent %x", ba, bad.Status, bad.ParentSpanId)
	}
	res := rcv.resources[0]
	if res["service.name"] != "forge" || res["service.version"] != "test" || res["deployment.environment.name"] != "test" {
		t.Errorf("resource %v", res)
	}
	// No content leaves: the input, the texts, the tool arguments.
	for _, sp := range rcv.all() {
		for k, v := range attrs(sp.Attributes) {
			if strings.Contains(v, "marker") {
				t.Errorf("span %s carries content: %s = %q", sp.Name, k, v)
			}
		}
	}
}

func TestEnabledFollowsTheStandardVariables(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, false},
	} {
		if got := opentelemetry.Enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: Enabled %v", c.env, got)
		}
	}
}

func TestOnlyHTTPProtobufIsSpoken(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
	} {
		_, err := opentelemetry.New(context.Background(), opentelemetry.Options{Getenv: func(k string) string { return env[k] }})
		if err == nil || !strings.Contains(err.Error(), "http/protobuf") {
			t.Errorf("%v: %v", env, err)
		}
	}
}
