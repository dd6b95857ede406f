package e2e

import (
	"os"
	"testing"

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
