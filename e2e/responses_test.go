package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// startResponses runs forge serve with a forge.yaml that declares the
// provider "oai" of kind openai-responses, pointed at the fake.
func startResponses(t *testing.T) (*server, *openaitest.Server) {
	t.Helper()
	model := openaitest.New(t)
	model.SetAPIKey("sk-resp")

	cfg := t.TempDir() + "/forge.yaml"
	yaml := "providers:\n  - name: oai\n    kind: openai-responses\n    base_url: " + model.URL() + "\n    api_key_env: E2E_RESPONSES_KEY\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startEnv(t, t.TempDir()+"/forge.db", model, []string{"E2E_RESPONSES_KEY=sk-resp"}, "--config", cfg), model
}

func TestResponsesToolRoundTripAndStream(t *testing.T) {
	t.Parallel()
	s, model := startResponses(t)
	s.agent(obj{"name": "r", "model": "oai/gpt-test", "instructions": "be brief", "tools": []any{"echo"}})
	sid := s.session("r")
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"ping"}`}).Usage(50, 10),
		openaitest.Text("got ", "ping").Usage(70, 5),
	)
	ch, cancel := s.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "echo ping"}}, "stream": true})
	defer cancel()
	evs := collect(t, ch)
	assertIncreasing(t, evs)
	if got := deltaText(evs); got != "got ping" {
		t.Fatalf("streamed %q", got)
	}
	done := evs[len(evs)-1].Data["data"].(obj)
	if done["status"] != "done" || done["output"].(obj)["text"] != "got ping" || done["iterations"] != 2.0 {
		t.Fatalf("turn.done %v", done)
	}
	if u := done["usage"].(obj); u["input_tokens"] != 120.0 || u["output_tokens"] != 15.0 {
		t.Fatalf("usage %v", u)
	}
	reqs := model.ResponsesRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d Responses requests", len(reqs))
	}
	second := reqs[1]
	if second.Model != "gpt-test" || second.Instructions != "be brief" || second.Store == nil || *second.Store {
		t.Fatalf("second request %+v", second)
	}
	// user message, function_call, function_call_output
	in := second.Input
	if len(in) != 3 || in[1].Type != "function_call" || in[1].Name != "echo" || in[2].Type != "function_call_output" ||
		in[2].CallID != in[1].CallID || in[2].Output != "ping" {
		t.Fatalf("input items %+v", in)
	}
}

// TestResponsesResumeAfterKill9: a client streaming a response through
// the Responses facade sees text that no checkpoint stored yet; forge
// serve is killed (-9) and restarted, and recovery closes the part with
// the shorter, checkpointed text. A resume after the last
// sequence_number the client saw must still end the response: the
// closing events and response.incomplete, each numbered above it.
func TestResponsesResumeAfterKill9(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "slow", "model": "openai/gpt-test"})
	// Checkpoints run about once a second from the part's start (~0.4 s):
	// the one at ~1.4 s holds "a1 b2 c3 ", the last piece comes at ~1.6 s.
	const full = "a1 b2 c3 d4"
	model.Enqueue(openaitest.Text("a1 ", "b2 ", "c3 ", "d4").DelayBetweenChunks(400 * time.Millisecond).HangAfter(5))
	ch, cancel := s.stream("POST", "/openai/v1/responses", obj{"model": "slow", "input": "go", "stream": true})
	defer cancel()
	responseText := func(evs []event) string {
		var b strings.Builder
		for _, ev := range evs {
			if ev.Type == "response.output_text.delta" {
				b.WriteString(ev.Data["delta"].(string))
			}
		}
		return b.String()
	}
	seen := until(t, ch, func(evs []event) bool { return responseText(evs) == full })
	s.kill9()
	id := seen[0].Data["response"].(obj)["id"].(string)
	last := int64(seen[len(seen)-1].Data["sequence_number"].(float64))

	s2 := start(t, db, model)
	ch2, cancel2 := s2.stream("GET", "/openai/v1/responses/"+id+"?stream=true&starting_after="+itoa(last), nil)
	defer cancel2()
	rest := collect(t, ch2)
	prev := last
	var types []string
	for _, ev := range rest {
		n := int64(ev.Data["sequence_number"].(float64))
		if n <= prev {
			t.Fatalf("resume after %d: %s numbered %d after %d", last, ev.Type, n, prev)
		}
		prev = n
		types = append(types, ev.Type)
	}
	if len(rest) == 0 || rest[len(rest)-1].Type != "response.incomplete" {
		t.Fatalf("resume after %d: %v, want the closing events and response.incomplete", last, types)
	}
	final := rest[len(rest)-1].Data["response"].(obj)
	if final["status"] != "cancelled" {
		t.Fatalf("recovered response status %v", final["status"])
	}
	var stored string
	for _, ev := range rest {
		if ev.Type == "response.output_text.done" {
			stored = ev.Data["text"].(string)
		}
	}
	if stored == "" || !strings.HasPrefix(full, stored) {
		t.Fatalf("recovered text %q, want a prefix of %q", stored, full)
	}
	t.Logf("client saw %q up to %d; recovery kept %q; resume sent %v", full, last, stored, types)
}
