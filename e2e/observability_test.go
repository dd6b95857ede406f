package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge/opentelemetry/otlptest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// jsonLines parses every line of a --log-format json log, failing the test
// on any line that is not one JSON object.
func jsonLines(t *testing.T, log string) []obj {
	t.Helper()
	var out []obj
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec obj
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not a JSON object: %q (%v)", sc.Text(), err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Fatalf("log line without %s: %q", k, sc.Text())
			}
		}
		out = append(out, rec)
	}
	return out
}

var turnIDRE = regexp.MustCompile(`turn_[0-9A-Z]{26}`)

// checkTurnKeys checks that a line naming a turn anywhere says which in
// its turn_id and session_id keys.
func checkTurnKeys(t *testing.T, recs []obj) {
	t.Helper()
	for _, rec := range recs {
		for k, v := range rec {
			str, ok := v.(string)
			if !ok || k == "turn_id" {
				continue
			}
			if id := turnIDRE.FindString(str); id != "" && (rec["turn_id"] != id || rec["session_id"] == nil) {
				t.Errorf("a line about turn %s lacks its turn_id/session_id keys: %v", id, rec)
			}
		}
	}
}

func findLog(recs []obj, msg, turnID string) obj {
	for _, rec := range recs {
		if rec["msg"] == msg && rec["turn_id"] == turnID {
			return rec
		}
	}
	return nil
}

// TestJSONLogsNameSessionAndTurn runs forge serve --log-format json: every
// line on stderr is one JSON object; an errored turn and a turn abandoned
// by a kill -9 are logged with their session_id and turn_id.
func TestJSONLogsNameSessionAndTurn(t *testing.T) {
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model, "--log-format", "json")
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"echo"}})

	failing := s.session("a")
	model.Enqueue(openaitest.Status(400, `{"error":{"message":"this model refuses","type":"invalid_request_error"}}`))
	errored := s.must(200, "POST", "/v1/sessions/"+failing+"/turns", message("fail"))
	if errored["status"] != "errored" {
		t.Fatalf("turn %v", errored)
	}
	working := s.session("a")
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"x"}`}), openaitest.Text("ok"))
	done := s.must(200, "POST", "/v1/sessions/"+working+"/turns", message("work"))
	crashed := s.session("a")
	model.Enqueue(openaitest.Text("partial ", "never").HangAfter(2))
	running := s.must(202, "POST", "/v1/sessions/"+crashed+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	waitFor(t, func() bool { return model.Pending() == 0 })
	s.kill9()

	s2 := start(t, db, model, "--log-format", "json")
	if err := s2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-s2.waitExit(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}

	first, second := jsonLines(t, s.logs.String()), jsonLines(t, s2.logs.String())
	// stdout too: under a container runtime it is the same log.
	for _, out := range []*syncBuffer{s.stdout, s2.stdout} {
		if recs := jsonLines(t, out.String()); len(recs) == 0 || !strings.HasPrefix(recs[0]["msg"].(string), "forge listening on http://") {
			t.Errorf("stdout with --log-format json: %q", out.String())
		}
	}
	if rec := findLog(first, "turn errored", errored["id"].(string)); rec == nil || rec["session_id"] != failing ||
		rec["level"] != "WARN" || rec["code"] != "model_error" || !strings.Contains(rec["error"].(string), "this model refuses") {
		t.Errorf("errored turn logged as %v", rec)
	}
	if rec := findLog(second, "turn abandoned: its executor stopped; ended cancelled", running["id"].(string)); rec == nil ||
		rec["session_id"] != crashed || rec["level"] != "WARN" {
		t.Errorf("abandoned turn logged as %v", rec)
	}
	if rec := findLog(first, "http request", done["id"].(string)); rec == nil || rec["session_id"] != working || rec["method"] != "POST" {
		t.Errorf("the request of a turn logged as %v", rec)
	}
	checkTurnKeys(t, append(first, second...))
	// The shutdown is logged too, in JSON.
	if !slices.ContainsFunc(second, func(r obj) bool { return r["msg"] == "stopped" }) {
		t.Error("no stopped line after SIGTERM")
	}
}

// TestStartupFailureIsLoggedAsJSON: a server that cannot start says why
// on stderr in the format asked for, and nothing else.
func TestStartupFailureIsLoggedAsJSON(t *testing.T) {
	model := openaitest.New(t)
	_, err := tryStart(t, t.TempDir()+"/forge.db", model, "--log-format", "json", "--addr", "0.0.0.0:0")
	if err == nil {
		t.Fatal("a public address without keys started")
	}
	log := err.Error()[strings.Index(err.Error(), "\n")+1:]
	recs := jsonLines(t, log)
	if !slices.ContainsFunc(recs, func(r obj) bool {
		return r["level"] == "ERROR" && strings.Contains(r["err"].(string), "without API keys")
	}) {
		t.Fatalf("no JSON line says why: %s", log)
	}
}

// TestSIGTERMFailsReadinessWhileTurnsFinish: on SIGTERM /readyz answers
// 503 draining at once while the server keeps serving; a running turn
// finishes within the grace, a new one is refused with 503.
func TestSIGTERMFailsReadinessWhileTurnsFinish(t *testing.T) {
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model, "--shutdown-grace", "30s")
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid, other := s.session("a"), s.session("a")
	if ready := s.must(200, "GET", "/readyz", nil); ready["status"] != "ready" || ready["checks"].(obj)["store"] != "ok" {
		t.Fatalf("readyz %v", ready)
	}
	// About 3 s of streaming: the turn outlasts the checks below.
	model.Enqueue(openaitest.Text("fin", "ished", " in", " time", ".").DelayBetweenChunks(600 * time.Millisecond))
	bg := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	tid := bg["id"].(string)
	waitFor(t, func() bool { return model.Pending() == 0 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		status, _ := s.call("GET", "/readyz", nil)
		return status == 503
	})
	if turn := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil); turn["status"] != "running" {
		t.Fatalf("readiness failed only after the turn ended: %v", turn)
	}
	if ready := s.must(503, "GET", "/readyz", nil); ready["status"] != "draining" {
		t.Fatalf("readyz while draining %v", ready)
	}
	s.must(200, "GET", "/healthz", nil)
	if refused := s.must(503, "POST", "/v1/sessions/"+other+"/turns", message("late")); refused["error"].(obj)["code"] != "unavailable" {
		t.Fatalf("a new turn while draining: %v", refused)
	}
	if err := <-s.waitExit(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	s2 := start(t, db, model)
	if turn := s2.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil); turn["status"] != "done" || turn["output"].(obj)["text"] != "finished in time." {
		t.Fatalf("turn after the drain %v", turn)
	}
}

// TestMetricsAndTracesOfServe: a real forge serve scraped after a turn,
// and its spans exported to a loopback OTLP receiver configured by the
// standard environment variables.
func TestMetricsAndTracesOfServe(t *testing.T) {
	model := openaitest.New(t)
	rcv := otlptest.New(t)
	db := t.TempDir() + "/forge.db"
	s := startEnv(t, db, model, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL(), "OTEL_SERVICE_NAME=forge-e2e", "OTEL_BSP_SCHEDULE_DELAY=50"})
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"echo"}})
	sid := s.session("a")
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"x"}`}).Usage(40, 4), openaitest.Text("ok").Usage(60, 6))
	turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("go"))

	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d %s", resp.StatusCode, body)
	}
	for _, line := range []string{
		`forge_turns_total{status="done",tenant="default"} 1`,
		`forge_model_tokens_total{direction="input",tenant="default"} 100`,
		`forge_model_tokens_total{direction="output",tenant="default"} 10`,
		`forge_tool_calls_total{outcome="ok",tenant="default",tool="echo"} 1`,
		`forge_turn_duration_seconds_count{status="done",tenant="default"} 1`,
		`forge_model_time_to_first_token_seconds_count{tenant="default"} 2`,
		`forge_sse_subscribers 0`,
	} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("the scrape lacks %s", line)
		}
	}
	if !strings.Contains(string(body), "forge_store_write_duration_seconds_count ") {
		t.Error("the scrape lacks forge_store_write_duration_seconds")
	}

	// Shutting down exports what is left.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-s.waitExit(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	var root otlptest.Span
	names := map[string]int{}
	for _, sp := range rcv.Spans() {
		names[sp.Name]++
		if sp.Name == "invoke_agent a" {
			root = sp
		}
	}
	if names["invoke_agent a"] != 1 || names["chat gpt-test"] != 2 || names["execute_tool echo"] != 1 {
		t.Fatalf("spans %v", names)
	}
	if root.Attrs["forge.turn.id"] != turn["id"] || root.Attrs["gen_ai.provider.name"] != "openai" ||
		root.Attrs["gen_ai.usage.input_tokens"] != "100" || root.Resource["service.name"] != "forge-e2e" {
		t.Fatalf("invoke_agent %v resource %v", root.Attrs, root.Resource)
	}
	for _, sp := range rcv.Spans() {
		if sp.Name != root.Name && (sp.ParentID != root.SpanID || sp.TraceID != root.TraceID) {
			t.Errorf("%s is not a child of invoke_agent", sp.Name)
		}
		if sp.Name == "chat gpt-test" && (sp.Attrs["gen_ai.request.model"] != "gpt-test" || sp.Attrs["gen_ai.provider.name"] != "openai") {
			t.Errorf("chat span %v", sp.Attrs)
		}
	}
}
