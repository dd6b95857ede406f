package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/metrics"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
)

// stack is the server as forge serve wires it with metrics: SQLite timed
// by the metrics, the engine observed by them, the HTTP API serving them.
type stack struct {
	t   *testing.T
	url string
	key string
}

// operatorKey is the stacks' operator key (httpapi.Config.OperatorKey).
const operatorKey = "operator-secret"

func newStack(t *testing.T, keys map[string]string) *stack {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/forge.db")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{})
	st.ObserveWrites(m.ObserveStoreWrite)
	// scripted/priced costs $1 per million input tokens, $2 per million
	// output tokens; scripted/echo has no prices.
	one, two := 1.0, 2.0
	models, err := provider.Build(&provider.Config{Models: []provider.ModelConfig{
		{ID: "scripted/priced", Prices: &provider.PricesConfig{Input: &one, Output: &two}},
	}}, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	eng := engine.New(engine.Config{
		Store: st, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0), Logger: logger,
		ToolCancelWait: 100 * time.Millisecond, Observer: m,
	})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Config{Store: st, Engine: eng, Logger: logger, Keys: keys, Metrics: m.Handler(),
		TenantMetrics: m.TenantHandler, OperatorKey: operatorKey})
	m.WatchSSE(api.SSESubscribers)
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Close(ctx)
		_ = st.Close(ctx)
	})
	return &stack{t: t, url: srv.URL}
}

func (s *stack) do(method, path string, body any, want int, out any) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *stack) agent(name, model string, steps ...scripted.Step) {
	s.t.Helper()
	body := map[string]any{"name": name, "model": model, "tools": []map[string]any{{"name": "echo"}, {"name": "sleep"}}}
	if len(steps) > 0 {
		body["model_params"] = map[string]any{"script": scripted.Script(steps...)}
	}
	s.do("POST", "/v1/agents", body, 201, nil)
}

func (s *stack) session(agent string) string {
	s.t.Helper()
	var ses struct{ ID string }
	s.do("POST", "/v1/sessions", map[string]any{"agent": agent}, 201, &ses)
	return ses.ID
}

func message(text string) map[string]any {
	return map[string]any{"input": []any{map[string]any{"type": "message", "text": text}}}
}

// streamUntil starts a streamed turn and reads its frames until one of
// type typ; the stream stays open (closed when the test ends).
func (s *stack) streamUntil(sid, typ string) {
	s.t.Helper()
	b, _ := json.Marshal(message("go"))
	req, _ := http.NewRequest("POST", s.url+"/v1/sessions/"+sid+"/turns", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		s.t.Fatalf("streamed turn: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: "+typ {
			return
		}
	}
	s.t.Fatalf("the stream ended before a %s event", typ)
}

// waitEvent polls the session's stored events until one of type typ holds
// want in its data.
func (s *stack) waitEvent(sid, typ, want string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var page struct {
			Data []struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"data"`
		}
		s.do("GET", "/v1/sessions/"+sid+"/events", nil, 200, &page)
		for _, ev := range page.Data {
			if ev.Type == typ && strings.Contains(string(ev.Data), want) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("no %s event with %s", typ, want)
}

// scrape reads /metrics with the operator key, in the text format, and
// parses it.
func (s *stack) scrape() map[string]*dto.MetricFamily {
	s.t.Helper()
	fams, _ := s.scrapeAs(operatorKey)
	return fams
}

// scrapeAs reads /metrics with key ("" none) and parses it; text is the
// answer as it came.
func (s *stack) scrapeAs(key string) (fams map[string]*dto.MetricFamily, text string) {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		s.t.Fatalf("GET /metrics: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err = p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		s.t.Fatalf("the scrape is not the Prometheus text format: %v", err)
	}
	return fams, string(b)
}

// value returns the value of the series of family name with exactly the
// given labels (pairs); for a histogram, its sample count. -1 when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
series:
	for _, m := range f.Metric {
		if len(m.Label) != len(want) {
			continue
		}
		for _, l := range m.Label {
			if want[l.GetName()] != l.GetValue() {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

type turnUsage struct {
	Status string      `json:"status"`
	Usage  forge.Usage `json:"usage"`
}

func TestScrapeAfterRealTurns(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"k1": "acme"})
	s.key = "k1"
	// A turn with tool calls: two echoes (one fails on its arguments),
	// then an answer. Priced.
	s.agent("tooler", "scripted/priced",
		scripted.Step{ToolCalls: []scripted.ToolCall{
			{Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)},
			{Name: "echo", Arguments: json.RawMessage(`{}`)},
		}, Usage: &scripted.Usage{InputTokens: 100, OutputTokens: 10}},
		scripted.Step{Text: "done", Usage: &scripted.Usage{InputTokens: 200, OutputTokens: 20}},
	)
	// A turn whose model call fails before any output: errored.
	s.agent("broken", "scripted/echo", scripted.Step{Error: "bad request", Status: 400})
	// A turn cancelled while the model streams, one cancelled while a
	// tool sleeps.
	s.agent("hanger", "scripted/echo", scripted.Step{Text: "thinking", Hang: true})
	s.agent("sleeper", "scripted/echo", scripted.Step{ToolCalls: []scripted.ToolCall{
		{Name: "sleep", Arguments: json.RawMessage(`{"ms":60000}`)},
	}})

	var turns []turnUsage
	var tu turnUsage
	tooler := s.session("tooler")
	s.do("POST", "/v1/sessions/"+tooler+"/turns", message("go"), 200, &tu)
	if tu.Status != "done" {
		t.Fatalf("tooler turn %+v", tu)
	}
	turns = append(turns, tu)
	broken := s.session("broken")
	s.do("POST", "/v1/sessions/"+broken+"/turns", message("go"), 200, &tu)
	if tu.Status != "errored" {
		t.Fatalf("broken turn %+v", tu)
	}
	turns = append(turns, tu)

	hanger := s.session("hanger")
	s.streamUntil(hanger, "model.message.delta")
	// The turn's stream and a session stream are open now.
	sessionStream, _ := http.NewRequest("GET", s.url+"/v1/sessions/"+tooler+"/events", nil)
	sessionStream.Header.Set("Accept", "text/event-stream")
	sessionStream.Header.Set("Authorization", "Bearer k1")
	resp, err := http.DefaultClient.Do(sessionStream)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("session stream: %v", err)
	}
	if got := value(s.scrape(), "forge_sse_subscribers"); got != 2 {
		t.Fatalf("forge_sse_subscribers = %v with two streams open", got)
	}
	if got := value(s.scrape(), "forge_turns_running", "tenant", "acme"); got != 1 {
		t.Fatalf("forge_turns_running = %v while one turn runs", got)
	}
	resp.Body.Close()
	s.do("POST", "/v1/sessions/"+hanger+"/cancel", nil, 200, &tu)
	turns = append(turns, tu)
	sleeper := s.session("sleeper")
	s.do("POST", "/v1/sessions/"+sleeper+"/turns", map[string]any{"input": message("go")["input"], "background": true}, 202, nil)
	s.waitEvent(sleeper, "tool.call", `"state":"running"`)
	s.do("POST", "/v1/sessions/"+sleeper+"/cancel", nil, 200, &tu)
	turns = append(turns, tu)

	// The streams' handlers return once they notice their end.
	for deadline := time.Now().Add(10 * time.Second); value(s.scrape(), "forge_sse_subscribers") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("forge_sse_subscribers stays above 0 after every stream closed")
		}
	}
	var sum forge.Usage
	for _, tu := range turns {
		sum.Add(tu.Usage)
	}
	fams := s.scrape()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"forge_turns_total", []string{"tenant", "acme", "status", "done"}, 1},
		{"forge_turns_total", []string{"tenant", "acme", "status", "errored"}, 1},
		{"forge_turns_total", []string{"tenant", "acme", "status", "cancelled"}, 2},
		{"forge_turn_duration_seconds", []string{"tenant", "acme", "status", "done"}, 1},
		{"forge_turn_duration_seconds", []string{"tenant", "acme", "status", "cancelled"}, 2},
		{"forge_turns_running", []string{"tenant", "acme"}, 0},
		// tooler's two steps and sleeper's step ok, broken's error, the
		// hanger's cancelled.
		{"forge_model_calls_total", []string{"tenant", "acme", "outcome", "ok"}, 3},
		{"forge_model_calls_total", []string{"tenant", "acme", "outcome", "error"}, 1},
		{"forge_model_calls_total", []string{"tenant", "acme", "outcome", "cancelled"}, 1},
		{"forge_model_call_duration_seconds", []string{"tenant", "acme"}, 5},
		// Every call but broken's streamed something.
		{"forge_model_time_to_first_token_seconds", []string{"tenant", "acme"}, 4},
		{"forge_model_tokens_total", []string{"tenant", "acme", "direction", "input"}, float64(sum.InputTokens)},
		{"forge_model_tokens_total", []string{"tenant", "acme", "direction", "output"}, float64(sum.OutputTokens)},
		{"forge_tool_calls_total", []string{"tenant", "acme", "tool", "echo", "outcome", "ok"}, 1},
		{"forge_tool_calls_total", []string{"tenant", "acme", "tool", "echo", "outcome", "error"}, 1},
		{"forge_tool_calls_total", []string{"tenant", "acme", "tool", "sleep", "outcome", "cancelled"}, 1},
		{"forge_tool_duration_seconds", []string{"tenant", "acme", "tool", "echo"}, 2},
		{"forge_tool_duration_seconds", []string{"tenant", "acme", "tool", "sleep"}, 1},
	} {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The exact tokens of tooler's steps are in the sum; the cancelled
	// call's estimate is the rest.
	if sum.InputTokens <= 300 || sum.OutputTokens < 30 {
		t.Errorf("turn usage %+v lacks the scripted tokens", sum)
	}
	// Only scripted/priced has prices: (300 × $1 + 30 × $2) per million.
	if got := value(fams, "forge_model_cost_total", "tenant", "acme"); math.Abs(got-360e-6) > 1e-12 || math.Abs(sum.Cost-got) > 1e-12 {
		t.Errorf("forge_model_cost_total = %v, turns cost %v, want 0.00036", got, sum.Cost)
	}
	// Each turn wrote several times: creation, steps, the terminal write.
	if got := value(fams, "forge_store_write_duration_seconds"); got < 10 {
		t.Errorf("forge_store_write_duration_seconds has %v samples", got)
	}
	if got := value(fams, "forge_store_write_failures_total"); got != 0 {
		t.Errorf("forge_store_write_failures_total = %v", got)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s: the runtime collectors are missing", name)
		}
	}
	// Without a key there is nothing to read.
	s.key = ""
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("metrics without a key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestToolLabelsAreBounded: tool names come from tenants (agents, MCP
// servers, subagents); however many and however odd, the scrape stays
// bounded and valid.
func TestToolLabelsAreBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	names := []string{"ok_tool", "bad\xff\xfeutf8", strings.Repeat("é", 5000), "quote\"and\nnewline", ""}
	for i := range 2 * metrics.MaxToolLabels {
		names = append(names, fmt.Sprintf("mcp_tool_%d", i))
	}
	for _, n := range names {
		m.ToolCallEnded(context.Background(), engine.ToolCallEnd{Tool: n, Outcome: engine.ToolOK, Duration: time.Millisecond})
	}
	m.ToolCallEnded(context.Background(), engine.ToolCallEnd{Tool: "ok_tool", Outcome: "made-up", Duration: time.Millisecond})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	calls := fams["forge_tool_calls_total"]
	tools := map[string]float64{}
	for _, s := range calls.Metric {
		var tool, outcome string
		for _, l := range s.Label {
			switch l.GetName() {
			case "tool":
				tool = l.GetValue()
			case "outcome":
				outcome = l.GetValue()
			}
		}
		if !utf8.ValidString(tool) || len(tool) > 128 {
			t.Fatalf("tool label %q", tool)
		}
		if outcome != "ok" && outcome != "unknown" {
			t.Fatalf("outcome label %q", outcome)
		}
		tools[tool] += s.Counter.GetValue()
	}
	if len(tools) != metrics.MaxToolLabels+1 {
		t.Fatalf("%d tool label values, want %d plus %s", len(tools), metrics.MaxToolLabels, metrics.OtherTool)
	}
	if tools["ok_tool"] != 2 || tools[metrics.OtherTool] != float64(len(names)-metrics.MaxToolLabels) {
		t.Fatalf("ok_tool %v, %s %v", tools["ok_tool"], metrics.OtherTool, tools[metrics.OtherTool])
	}
}

// TestTenantScrapeShowsOnlyItsTenant: with two tenants running turns with
// tools of their own, each tenant key's scrape holds its own series only
// (nothing naming the other tenant or its tools, and no process-wide
// series), while the operator key's holds both tenants' and the
// process's; a key that is neither is refused.
func TestTenantScrapeShowsOnlyItsTenant(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"ka": "acme", "kg": "globex"})
	run := func(key, agent, tool, args string) {
		s.key = key
		s.do("POST", "/v1/agents", map[string]any{"name": agent, "model": "scripted/echo", "tools": []any{tool},
			"model_params": map[string]any{"script": scripted.Script(
				scripted.Step{ToolCalls: []scripted.ToolCall{{Name: tool, Arguments: json.RawMessage(args)}}},
				scripted.Step{Text: "done"})}}, 201, nil)
		var tu turnUsage
		s.do("POST", "/v1/sessions/"+s.session(agent)+"/turns", message("go"), 200, &tu)
		if tu.Status != "done" {
			t.Fatalf("%s turn: %+v", agent, tu)
		}
	}
	run("ka", "acme-support", "echo", `{"text":"hi"}`)
	run("kg", "globex-secret-agent", "sleep", `{"ms":1}`)

	for _, c := range []struct {
		key, tenant, tool, otherTenant, otherTool string
	}{{"ka", "acme", "echo", "globex", "sleep"}, {"kg", "globex", "sleep", "acme", "echo"}} {
		fams, text := s.scrapeAs(c.key)
		if got := value(fams, "forge_tool_calls_total", "tenant", c.tenant, "tool", c.tool, "outcome", "ok"); got != 1 {
			t.Errorf("%s: its own tool calls = %v", c.tenant, got)
		}
		if got := value(fams, "forge_turns_total", "tenant", c.tenant, "status", "done"); got != 1 {
			t.Errorf("%s: its own turns = %v", c.tenant, got)
		}
		if strings.Contains(text, c.otherTenant) || strings.Contains(text, `tool="`+c.otherTool+`"`) {
			t.Errorf("%s's scrape shows %s or its tool %s:\n%s", c.tenant, c.otherTenant, c.otherTool, text)
		}
		for name, f := range fams {
			for _, m := range f.Metric {
				tenant := ""
				for _, l := range m.Label {
					if l.GetName() == metrics.TenantLabel {
						tenant = l.GetValue()
					}
				}
				if tenant != c.tenant {
					t.Errorf("%s's scrape has %s with tenant %q", c.tenant, name, tenant)
				}
			}
		}
		for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "forge_store_write_duration_seconds", "forge_sse_subscribers"} {
			if fams[name] != nil {
				t.Errorf("%s's scrape has the process-wide %s", c.tenant, name)
			}
		}
	}
	all := s.scrape()
	for _, c := range [][]string{{"acme", "echo"}, {"globex", "sleep"}} {
		if got := value(all, "forge_tool_calls_total", "tenant", c[0], "tool", c[1], "outcome", "ok"); got != 1 {
			t.Errorf("operator: %s's %s calls = %v", c[0], c[1], got)
		}
	}
	if all["go_goroutines"] == nil || all["forge_store_write_duration_seconds"] == nil {
		t.Error("the operator's scrape lacks the process-wide series")
	}
	for _, key := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("metrics with key %q: %d", key, resp.StatusCode)
		}
	}
	// The operator key is no tenant's: the API refuses it.
	s.key = operatorKey
	s.do("GET", "/v1/agents", nil, 401, nil)
}

// TestToolLabelsAreCappedPerTenant: a tenant that defines many tools
// fills its own label values, not another tenant's.
func TestToolLabelsAreCappedPerTenant(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	for i := range 2 * metrics.MaxToolLabels {
		m.ToolCallEnded(context.Background(), engine.ToolCallEnd{Tenant: "noisy", Tool: fmt.Sprintf("t%d", i), Outcome: engine.ToolOK})
	}
	m.ToolCallEnded(context.Background(), engine.ToolCallEnd{Tenant: "quiet", Tool: "lookup", Outcome: engine.ToolOK})
	srv := httptest.NewServer(m.TenantHandler("quiet"))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `forge_tool_calls_total{outcome="ok",tenant="quiet",tool="lookup"} 1`) || strings.Contains(string(b), "noisy") {
		t.Fatalf("quiet's scrape:\n%s", b)
	}
}
