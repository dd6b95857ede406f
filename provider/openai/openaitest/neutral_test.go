package openaitest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

const (
	chatBody      = `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + userOnly + `}`
	responsesBody = `{"model":"m","stream":true,"input":"hi"}`
)

// streamOf posts body to path and returns the events received before the
// stream ended, and whether it ended cleanly.
func streamOf(t *testing.T, srv *openaitest.Server, path, body string) ([]string, bool) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+path, strings.NewReader(body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	var events []string
	for _, ev := range strings.Split(string(b), "\n\n") {
		if ev != "" {
			events = append(events, ev)
		}
	}
	return events, err == nil
}

// TestFromReplyPoints: a reply's points fall where they say in each
// endpoint's stream.
func TestFromReplyPoints(t *testing.T) {
	t.Parallel()
	// Chat: role, a, b, finish, usage, [DONE]. Responses: created,
	// in_progress, item added, part added, a, b, text done, part done,
	// item done, completed.
	for _, tt := range []struct {
		name            string
		p               fakeapi.Point
		chat, responses int
	}{
		{"after no delta", fakeapi.AfterDeltas(0), 0, 0},
		{"after a delta", fakeapi.AfterDeltas(1), 2, 5},
		{"after the last delta", fakeapi.AfterDeltas(2), 3, 6},
		{"before the finish", fakeapi.BeforeFinish(), 3, 9},
		{"after the finish", fakeapi.AfterFinish(), 4, 10},
		{"at the end", fakeapi.AtEnd(), 6, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.New(t)
			srv.Respond(fakeapi.Text("a", "b").CutAt(tt.p), fakeapi.Text("a", "b").CutAt(tt.p))
			if got, clean := streamOf(t, srv, "/chat/completions", chatBody); len(got) != tt.chat || clean {
				t.Errorf("chat: %d events before the cut (clean end %v), want %d: %q", len(got), clean, tt.chat, got)
			}
			if got, clean := streamOf(t, srv, "/responses", responsesBody); len(got) != tt.responses || clean {
				t.Errorf("responses: %d events before the cut (clean end %v), want %d: %q", len(got), clean, tt.responses, got)
			}
		})
	}
}

func TestFromReplyStreams(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	r := fakeapi.Reasoning("r").Text("t").Calls(fakeapi.Call{ID: "call_1", Name: "f", Args: `{"a":1}`}).
		Usage(fakeapi.Usage{Input: 9, Output: 4, CacheRead: 2, Reasoning: 1}).Finish("length").Header("X-Test", "yes")
	srv.Respond(r, r)
	got, _ := streamOf(t, srv, "/chat/completions", chatBody)
	all := strings.Join(got, "\n")
	for _, want := range []string{`"reasoning_content":"r"`, `"content":"t"`, `"id":"call_1"`, `"finish_reason":"length"`,
		`"prompt_tokens":9`, `"cached_tokens":2`, `"reasoning_tokens":1`} {
		if !strings.Contains(all, want) {
			t.Errorf("chat stream lacks %s:\n%s", want, all)
		}
	}
	got, _ = streamOf(t, srv, "/responses", responsesBody)
	if last := got[len(got)-1]; !strings.HasPrefix(last, "event: response.incomplete") || !strings.Contains(last, `"input_tokens":9`) {
		t.Errorf("responses: last event %s", last)
	}

	// The failure ends the stream where it says, in each API's terms.
	srv.Respond(fakeapi.Text("a", "b").FailAt(fakeapi.AfterDeltas(1), "boom"), fakeapi.Text("a", "b").FailAt(fakeapi.AfterDeltas(1), "boom"))
	if got, _ := streamOf(t, srv, "/chat/completions", chatBody); len(got) != 3 || !strings.Contains(got[2], `"error":{"message":"boom"`) {
		t.Errorf("chat failure %q", got)
	}
	if got, _ := streamOf(t, srv, "/responses", responsesBody); len(got) != 6 || !strings.HasPrefix(got[5], "event: response.failed") || !strings.Contains(got[5], "boom") {
		t.Errorf("responses failure %q", got)
	}

	// Unfinished: the output, then a clean end without any end marker.
	srv.Respond(fakeapi.Text("a").Unfinish(), fakeapi.Text("a").Unfinish())
	if got, clean := streamOf(t, srv, "/chat/completions", chatBody); len(got) != 2 || !clean {
		t.Errorf("chat unfinished %q", got)
	}
	if got, clean := streamOf(t, srv, "/responses", responsesBody); len(got) != 8 || !clean || strings.Contains(strings.Join(got, ""), "response.completed") {
		t.Errorf("responses unfinished %q", got)
	}
}

func TestFromReplyFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, path string
		reply      fakeapi.Reply
		status     int
		body       string
	}{
		{"message", "/chat/completions", fakeapi.Failure(503, "busy"), 503, `"message":"busy","type":"server_error"`},
		{"raw body", "/chat/completions", fakeapi.RawFailure(502, "<html>"), 502, "<html>"},
		{"chat overflow", "/chat/completions", fakeapi.ContextOverflow(), 400, `"code":"context_length_exceeded"`},
		{"responses overflow", "/responses", fakeapi.ContextOverflow(), 400, "exceeds the context window"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.New(t)
			srv.Respond(tt.reply)
			body := chatBody
			if tt.path == "/responses" {
				body = responsesBody
			}
			req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+tt.path, strings.NewReader(body))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status || !strings.Contains(string(b), tt.body) {
				t.Errorf("%d %s, want %d ~ %s", res.StatusCode, b, tt.status, tt.body)
			}
		})
	}
}

// A reply that hangs before its headers answers nothing; the request is
// in flight until the client gives up.
func TestFromReplySilent(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetDefaultReply(fakeapi.Text("a").HangAt(fakeapi.BeforeHeaders()))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL()+"/chat/completions", strings.NewReader(chatBody))
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

func TestNeutralRequests(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	post(t, srv, `{"model":"m","stream":true,"max_tokens":7,"temperature":0.5,
	  "messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
	    {"role":"assistant","content":"c","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{ \"x\": 1 }"}}]},
	    {"role":"tool","tool_call_id":"call_1","content":"out"}],
	  "tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]}`)
	seven, half := int64(7), 0.5
	chat := srv.ChatReceived()
	if len(chat) != 1 {
		t.Fatalf("%d chat requests", len(chat))
	}
	chat[0].Header = nil
	want := fakeapi.Request{Model: "m", System: "sd", Stream: true, MaxTokens: &seven, Temperature: &half,
		Parts: []fakeapi.Part{{Role: "user", Type: "text", Text: "ab"}, {Role: "assistant", Type: "text", Text: "c"},
			{Role: "assistant", Type: "tool_call", CallID: "call_1", Name: "f", Arguments: `{"x":1}`},
			{Role: "tool", Type: "tool_result", CallID: "call_1", Output: "out"}},
		Tools: []fakeapi.Tool{{Name: "f", Description: "d", Schema: json.RawMessage(`{"type":"object"}`)}}}
	if !reflect.DeepEqual(chat[0], want) {
		t.Errorf("chat request\n got %+v\nwant %+v", chat[0], want)
	}

	enc := openaitest.EncryptedContent("rs_1")
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+"/responses", strings.NewReader(`{"model":"m","stream":true,
	  "instructions":"s","max_output_tokens":7,"temperature":0.5,"store":false,"include":["reasoning.encrypted_content"],"input":[
	    {"role":"developer","content":"d"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]},
	    {"type":"reasoning","id":"rs_1","encrypted_content":"`+enc+`","summary":[{"type":"summary_text","text":"th"},{"type":"summary_text","text":"ink"}]},
	    {"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},
	    {"type":"function_call_output","call_id":"call_1","output":"out"}],
	  "tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"object"}}]}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("responses request refused: %d", res.StatusCode)
	}
	rs := srv.ResponsesReceived()
	if len(rs) != 1 {
		t.Fatalf("%d responses requests", len(rs))
	}
	rs[0].Header = nil
	want = fakeapi.Request{Model: "m", System: "sd", Stream: true, MaxTokens: &seven, Temperature: &half,
		Parts: []fakeapi.Part{{Role: "user", Type: "text", Text: "a"}, {Role: "assistant", Type: "reasoning", Text: "think", State: enc},
			{Role: "assistant", Type: "tool_call", CallID: "call_1", Name: "f", Arguments: `{}`},
			{Role: "tool", Type: "tool_result", CallID: "call_1", Output: "out"}},
		Tools: []fakeapi.Tool{{Name: "f", Schema: json.RawMessage(`{"type":"object"}`)}}}
	if !reflect.DeepEqual(rs[0], want) {
		t.Errorf("responses request\n got %+v\nwant %+v", rs[0], want)
	}
}
