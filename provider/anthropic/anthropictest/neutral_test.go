package anthropictest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// events posts hi and returns the events received before the stream
// ended, and whether it ended cleanly.
func events(t *testing.T, srv *anthropictest.Server) ([]string, bool) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+"/v1/messages", strings.NewReader(hi))
	req.Header.Set("anthropic-version", "2026-10-21")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	var out []string
	for _, ev := range strings.Split(string(b), "\n\n") {
		if ev != "" {
			out = append(out, ev)
		}
	}
	return out, err == nil
}

// TestFromReplyPoints: a reply's points fall where they say.
func TestFromReplyPoints(t *testing.T) {
	t.Parallel()
	// message_start, content_block_start, ping, a, b, content_block_stop,
	// message_delta, message_stop.
	for _, tt := range []struct {
		name string
		p    fakeapi.Point
		want int
	}{
		{"after no delta", fakeapi.AfterDeltas(0), 0},
		{"after a delta", fakeapi.AfterDeltas(1), 4},
		{"past the last delta", fakeapi.AfterDeltas(3), 6},
		{"before the finish", fakeapi.BeforeFinish(), 6},
		{"after the finish", fakeapi.AfterFinish(), 7},
		{"at the end", fakeapi.AtEnd(), 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := anthropictest.New(t)
			srv.Respond(fakeapi.Text("a", "b").CutAt(tt.p))
			if got, clean := events(t, srv); len(got) != tt.want || clean {
				t.Errorf("%d events before the cut (clean end %v), want %d: %q", len(got), clean, tt.want, got)
			}
		})
	}
}

func TestFromReplyStreams(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	// Input counts the whole prompt: input_tokens is what is left of it.
	srv.Respond(fakeapi.Reasoning("r").Text("t").Calls(fakeapi.Call{ID: "toolu_1", Name: "f", Args: `{"a":1}`}).
		Usage(fakeapi.Usage{Input: 20, Output: 4, CacheRead: 7, CacheWrite: 3, Reasoning: 1}).Finish("content_filter"))
	got, _ := events(t, srv)
	all := strings.Join(got, "\n")
	for _, want := range []string{`"thinking":"r"`, `"signature":"` + anthropictest.Sign("r"), `"text":"t"`, `"id":"toolu_1"`,
		`"stop_reason":"refusal"`, `"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":7,"output_tokens":4,"output_tokens_details":{"thinking_tokens":1}`} {
		if !strings.Contains(all, want) {
			t.Errorf("stream lacks %s:\n%s", want, all)
		}
	}
	srv.Respond(fakeapi.Text("a", "b").FailAt(fakeapi.AfterDeltas(1), "boom"))
	if got, _ := events(t, srv); len(got) != 5 || got[4] != "event: error\n"+`data: {"type":"error","error":{"type":"api_error","message":"boom"}}` {
		t.Errorf("failure %q", got)
	}
	srv.Respond(fakeapi.Text("a").Unfinish())
	if got, clean := events(t, srv); len(got) != 5 || !clean || strings.Contains(strings.Join(got, ""), "message_delta") {
		t.Errorf("unfinished %q", got)
	}
	for _, tt := range []struct {
		reply  fakeapi.Reply
		status int
		body   string
	}{
		{fakeapi.Failure(529, "busy"), 529, `{"type":"overloaded_error","message":"busy"}`},
		{fakeapi.RawFailure(502, "<html>"), 502, "<html>"},
		{fakeapi.ContextOverflow(), 400, "prompt is too long"},
	} {
		srv.Respond(tt.reply)
		res, body := post(t, srv, hi)
		if res.StatusCode != tt.status || !strings.Contains(body, tt.body) {
			t.Errorf("%d %s, want %d ~ %s", res.StatusCode, body, tt.status, tt.body)
		}
	}
}

// A reply that hangs before its headers answers nothing; the request is
// in flight until the client gives up.
func TestFromReplySilent(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.SetDefaultReply(fakeapi.Text("a").HangAt(fakeapi.BeforeHeaders()))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL()+"/v1/messages", strings.NewReader(hi))
	req.Header.Set("anthropic-version", "2026-10-21")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("answered %d", res.StatusCode)
	}
	for deadline := time.Now().Add(5 * time.Second); srv.InFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned request is still in flight")
		}
	}
}

func TestNeutralRequest(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	sig := anthropictest.Sign("plan")
	post(t, srv, `{"model":"m","max_tokens":7,"stream":true,"system":[{"type":"text","text":"s"}],
	  "messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
	    {"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"`+sig+`"},{"type":"redacted_thinking","data":"ZW5j"},
	      {"type":"text","text":"c"},{"type":"tool_use","id":"t1","name":"f","input":{ "x": 1 }}]},
	    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out","is_error":true},{"type":"text","text":"d"}]}],
	  "tools":[{"name":"f","description":"desc","input_schema":{"type":"object"}}]}`)
	got := srv.Received()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	got[0].Header = nil
	seven := int64(7)
	want := fakeapi.Request{Model: "m", System: "s", Stream: true, MaxTokens: &seven,
		Parts: []fakeapi.Part{{Role: "user", Type: "text", Text: "ab"},
			{Role: "assistant", Type: "reasoning", Text: "plan", State: sig}, {Role: "assistant", Type: "reasoning", State: "ZW5j"},
			{Role: "assistant", Type: "text", Text: "c"}, {Role: "assistant", Type: "tool_call", CallID: "t1", Name: "f", Arguments: `{"x":1}`},
			{Role: "tool", Type: "tool_result", CallID: "t1", Output: "out", IsError: true}, {Role: "user", Type: "text", Text: "d"}},
		Tools: []fakeapi.Tool{{Name: "f", Description: "desc", Schema: json.RawMessage(`{"type":"object"}`)}}}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("request\n got %+v\nwant %+v", got[0], want)
	}
}
