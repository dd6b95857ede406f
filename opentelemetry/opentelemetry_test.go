package opentelemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/opentelemetry"
	"github.com/forge-runtime/forge/opentelemetry/otlptest"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
)

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

// The OTLP exporter reads OTEL_EXPORTER_OTLP_ENDPOINT: these tests set it
// and cannot run in parallel.

func TestSpansFollowTheGenAIConventions(t *testing.T) {
	rcv := otlptest.New(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL())
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

	byName := map[string][]otlptest.Span{}
	var names []string
	for _, sp := range rcv.Spans() {
		byName[sp.Name] = append(byName[sp.Name], sp)
		names = append(names, sp.Name)
	}
	slices.Sort(names)
	want := []string{"chat echo", "chat echo", "chat echo", "chat echo", "execute_tool echo", "execute_tool subagent_writer",
		"invoke_agent broken", "invoke_agent lead"}
	if !slices.Equal(names, want) {
		t.Fatalf("spans\n got %v\nwant %v", names, want)
	}
	root := byName["invoke_agent lead"][0]
	if root.TraceID != traceID || root.ParentID != callerSpan {
		t.Fatalf("invoke_agent is not the caller's child: trace %s parent %s", root.TraceID, root.ParentID)
	}
	for k, v := range map[string]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "forge.scripted", "gen_ai.request.model": "echo",
		"gen_ai.agent.name": "lead", "gen_ai.conversation.id": ses.ID, "forge.turn.id": turn.ID, "forge.turn.status": "done",
		"gen_ai.usage.input_tokens": "305", "gen_ai.usage.output_tokens": "31",
	} {
		if root.Attrs[k] != v {
			t.Errorf("invoke_agent %s = %q, want %q", k, root.Attrs[k], v)
		}
	}
	if root.Kind != tracepb.Span_SPAN_KIND_INTERNAL || root.Error {
		t.Errorf("invoke_agent kind %v error %v", root.Kind, root.Error)
	}
	delegation := byName["execute_tool subagent_writer"][0]
	var leadChats, writerChats int
	for _, sp := range byName["chat echo"] {
		a := sp.Attrs
		if a["gen_ai.operation.name"] != "chat" || a["gen_ai.provider.name"] != "forge.scripted" || a["gen_ai.request.model"] != "echo" ||
			sp.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("chat span %v kind %v", a, sp.Kind)
		}
		switch a["gen_ai.agent.name"] {
		case "lead":
			leadChats++
			if sp.ParentID != root.SpanID || sp.TraceID != root.TraceID {
				t.Errorf("lead's chat span is not under invoke_agent")
			}
			wantFinish, in, out := `["tool_calls"]`, "100", "10"
			if a["forge.iteration"] == "2" {
				wantFinish, in, out = `["stop"]`, "200", "20"
			}
			if a["gen_ai.response.finish_reasons"] != wantFinish || a["gen_ai.usage.input_tokens"] != in || a["gen_ai.usage.output_tokens"] != out {
				t.Errorf("lead's chat span %v", a)
			}
			if !slices.Contains(sp.Events, "gen_ai.first_token") {
				t.Errorf("lead's chat span has no first token event")
			}
			if sp.StartNano < root.StartNano || sp.EndNano > root.EndNano {
				t.Errorf("lead's chat span is not within invoke_agent")
			}
		case "writer":
			writerChats++
			if sp.ParentID != delegation.SpanID {
				t.Errorf("the subagent's chat span is not under its execute_tool span")
			}
		case "broken":
			if !sp.Error || a["error.type"] != "400" || a["gen_ai.response.finish_reasons"] != `["error"]` {
				t.Errorf("failed chat span %v error %v", a, sp.Error)
			}
		}
	}
	if leadChats != 2 || writerChats != 1 {
		t.Errorf("%d lead chats, %d writer chats", leadChats, writerChats)
	}
	for _, name := range []string{"execute_tool echo", "execute_tool subagent_writer"} {
		sp := byName[name][0]
		a := sp.Attrs
		tool := strings.TrimPrefix(name, "execute_tool ")
		if sp.ParentID != root.SpanID || a["gen_ai.operation.name"] != "execute_tool" ||
			a["gen_ai.tool.name"] != tool || !strings.HasPrefix(a["gen_ai.tool.call.id"], "call_") || a["forge.tool.outcome"] != "ok" {
			t.Errorf("%s: parent %s attributes %v", name, sp.ParentID, a)
		}
	}
	bad := byName["invoke_agent broken"][0]
	if ba := bad.Attrs; !bad.Error || ba["error.type"] != "model_error" || ba["forge.turn.status"] != "errored" || bad.ParentID != "" {
		t.Errorf("errored turn span %v error %v parent %s", ba, bad.Error, bad.ParentID)
	}
	res := root.Resource
	if res["service.name"] != "forge" || res["service.version"] != "test" || res["deployment.environment.name"] != "test" {
		t.Errorf("resource %v", res)
	}
	// No content leaves: the input, the texts, the tool arguments.
	for _, sp := range rcv.Spans() {
		for k, v := range sp.Attrs {
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

func TestRecoveredTurnIsASpanOfItsOwn(t *testing.T) {
	rcv := otlptest.New(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL())
	ctx := context.Background()
	tr, err := opentelemetry.New(ctx, opentelemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	tr.TurnEnded(ctx, engine.TurnEnd{Tenant: "acme", SessionID: "ses_1", TurnID: "turn_1", Status: "cancelled",
		CancelReason: "abandoned", Recovered: true, End: time.Now()})
	if err := tr.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if len(spans) != 1 {
		t.Fatalf("spans %v", spans)
	}
	a := spans[0].Attrs
	if spans[0].Name != "invoke_agent" || a["forge.turn.recovered"] != "true" || a["forge.turn.cancel_reason"] != "abandoned" ||
		a["forge.turn.id"] != "turn_1" || a["gen_ai.conversation.id"] != "ses_1" || spans[0].Error {
		t.Fatalf("recovered turn span %s %v", spans[0].Name, a)
	}
}
