package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/protocol/aisdk"
	"github.com/forge-runtime/forge/protocol/openairesp"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
)

var sseHeader = map[string]string{"Accept": "text/event-stream"}

// TestAgentModelIsChecked: an agent whose model's provider is not
// configured, or whose scripted script is invalid, is refused at POST and
// PUT with invalid_request naming the provider (and what is configured)
// or the field; nothing is stored. scripted/* is always there.
func TestAgentModelIsChecked(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *httpapi.Config) { c.Models = provider.FromEnv(func(string) string { return "" }) })
	s.call("POST", "/v1/agents", map[string]any{"name": "ok", "model": "scripted/echo"}, 201, nil)
	before := s.state()
	for _, c := range []struct {
		name, body string
		want       []string
	}{
		{"negative chunk", `{"name":"a","model":"scripted/x","model_params":{"script":[{"text":"hi","chunk":-1}]}}`,
			[]string{"model_params.script", "step 0", "chunk must not be negative"}},
		{"huge delay", `{"name":"a","model":"scripted/x","model_params":{"script":[{"text":"hi"},{"text":"x","delay_ms":1e12}]}}`,
			[]string{"model_params.script", "step 1", "delay_ms"}},
		{"delay out of range", `{"name":"a","model":"scripted/x","model_params":{"script":[{"delay_ms":600001}]}}`,
			[]string{"delay_ms must be between 0 and 600000"}},
		{"bad finish", `{"name":"a","model":"scripted/x","model_params":{"script":[{"finish":"later"}]}}`,
			[]string{"finish must be"}},
		{"empty script", `{"name":"a","model":"scripted/x","model_params":{"script":[]}}`, []string{"no steps"}},
		{"unconfigured provider", `{"name":"a","model":"openai/gpt-4.1-mini"}`,
			[]string{`provider "openai" is not configured`, "OPENAI_API_KEY", "configured providers: scripted"}},
		{"unknown provider", `{"name":"a","model":"acme/m1"}`, []string{`"acme"`, "configured providers: scripted"}},
	} {
		for _, method := range []string{"POST", "PUT"} {
			path, body := "/v1/agents", c.body
			if method == "PUT" {
				path, body = "/v1/agents/ok", strings.Replace(c.body, `"name":"a"`, `"name":"ok"`, 1)
			}
			a := s.do(req{method: method, path: path, body: body})
			if a.status != 400 || a.errCode() != "invalid_request" {
				t.Errorf("%s %s: %s", c.name, method, a)
				continue
			}
			msg := errMessage(a)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s %s: %q lacks %q", c.name, method, msg, w)
				}
			}
		}
	}
	if after := s.state(); after != before {
		t.Errorf("refused agents changed the store:\n%s\nwas\n%s", after, before)
	}
	s.call("PUT", "/v1/agents/ok", map[string]any{"model": "scripted/other", "model_params": map[string]any{
		"script": scripted.Script(scripted.Step{Text: "hi", Chunk: 2, DelayMS: 5})}}, 200, nil)
}

// TestStreamCapsRefuseWith429: over the cap of streams open on a session
// or for a tenant, every kind of event stream (a session's, a turn's, a
// streamed turn, a forum's, the Responses and AI SDK streams) is refused
// with 429 too_many_subscribers, a Retry-After and the route's JSON error,
// before anything starts; a stream that ends gives its slot back.
func TestStreamCapsRefuseWith429(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *httpapi.Config) {
		c.MaxStreamsPerSession, c.MaxStreamsPerTenant = 2, 3
		c.Protocols = []httpapi.Protocol{openairesp.Protocol{}, aisdk.Protocol{}}
	})
	s.createAgent("echo")
	a, b := s.createSession("echo"), s.createSession("echo")
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+a.ID+"/turns", msgTurn("hi"), 200, &turn)
	var forum struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)

	open := func(path string) func() {
		t.Helper()
		resp := s.stream(req{method: "GET", path: path, header: sseHeader})
		if resp.StatusCode != 200 {
			t.Fatalf("stream %s: %d", path, resp.StatusCode)
		}
		return func() { resp.Body.Close() }
	}
	refused := func(what string, r req, openAI bool) {
		t.Helper()
		got := s.do(r)
		if got.status != 429 || got.header.Get("Retry-After") != "5" || !strings.HasPrefix(got.header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %s (Retry-After %q)", what, got, got.header.Get("Retry-After"))
			return
		}
		var e struct {
			Error struct{ Code, Type, Message string }
		}
		if err := json.Unmarshal(got.body, &e); err != nil || e.Error.Code != "too_many_subscribers" || e.Error.Message == "" ||
			(openAI && e.Error.Type != "rate_limit_error") {
			t.Errorf("%s: error body %s", what, got.body)
		}
	}
	sp := "/v1/sessions/" + a.ID
	closeA := open(sp + "/events")
	open(sp + "/events?after=0")
	// The session's cap.
	refused("a third session stream", req{method: "GET", path: sp + "/events", header: sseHeader}, false)
	refused("a turn stream", req{method: "GET", path: sp + "/turns/" + turn.ID + "/events", header: sseHeader}, false)
	refused("a streamed turn", req{method: "POST", path: sp + "/turns", body: map[string]any{
		"input": msgTurn("again")["input"], "stream": true}}, false)
	refused("a Responses stream", req{method: "GET", path: "/openai/v1/responses/" + turn.ID + "?stream=true"}, true)
	var turns struct{ Data []forge.Turn }
	s.call("GET", sp+"/turns", nil, 200, &turns)
	if len(turns.Data) != 1 {
		t.Errorf("a refused streamed turn started: %d turns", len(turns.Data))
	}
	// JSON pages are no streams.
	s.call("GET", sp+"/events", nil, 200, nil)

	// The tenant's cap: a third stream elsewhere fills it.
	open("/v1/sessions/" + b.ID + "/events")
	refused("a stream of another session", req{method: "GET", path: "/v1/sessions/" + b.ID + "/events", header: sseHeader}, false)
	refused("a forum stream", req{method: "GET", path: "/v1/forums/" + forum.ID + "/events", header: sseHeader}, false)
	refused("an AI SDK chat", req{method: "POST", path: "/aisdk/v1/agents/echo/chat", body: map[string]any{
		"id": "chat1", "messages": []any{map[string]any{"id": "m1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": "hi"}}}}}}, false)

	// A stream that ends frees its slot.
	closeA()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := s.stream(req{method: "GET", path: "/v1/forums/" + forum.ID + "/events", header: sseHeader})
		if resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a closed stream is still taken: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestScriptedQuotaAnswers429: a turn over its tenant's scripted quota is
// refused with 429 rate_limited and Retry-After, in every answer mode,
// with nothing stored.
func TestScriptedQuotaAnswers429(t *testing.T) {
	t.Parallel()
	s := newStackEngine(t, t.TempDir()+"/forge.db", func(c *engine.Config) {
		c.Quota = &engine.TurnQuota{Providers: []string{scripted.ProviderName}, Running: 1}
	})
	s.createAgent("slow", scripted.Step{Text: "thinking", Hang: true})
	busy, idle := s.createSession("slow"), s.createSession("slow")
	var running forge.Turn
	s.call("POST", "/v1/sessions/"+busy.ID+"/turns", map[string]any{"input": msgTurn("go")["input"], "background": true}, 202, &running)
	for _, mode := range []map[string]any{{}, {"background": true}, {"stream": true}} {
		body := map[string]any{"input": msgTurn("go")["input"]}
		for k, v := range mode {
			body[k] = v
		}
		a := s.do(req{method: "POST", path: "/v1/sessions/" + idle.ID + "/turns", body: body})
		if a.status != 429 || a.errCode() != "rate_limited" || a.header.Get("Retry-After") != "1" {
			t.Errorf("mode %v: %s (Retry-After %q)", mode, a, a.header.Get("Retry-After"))
		}
	}
	var turns, events struct{ Data []json.RawMessage }
	s.call("GET", "/v1/sessions/"+idle.ID+"/turns", nil, 200, &turns)
	s.call("GET", "/v1/sessions/"+idle.ID+"/events", nil, 200, &events)
	if len(turns.Data) != 0 || len(events.Data) != 0 {
		t.Errorf("refused turns stored %d turns, %d events", len(turns.Data), len(events.Data))
	}
	s.call("POST", "/v1/sessions/"+busy.ID+"/cancel", nil, 200, nil)
	s.createAgent("quick")
	s.call("POST", "/v1/sessions/"+s.createSession("quick").ID+"/turns", msgTurn("hi"), 200, nil)
}

// TestSessionStreamCursorPastTheEnd: a session or forum stream resumed
// after a seq beyond the end of an idle log is invalid_request (a live
// tail from there would never send anything); at the end exactly, it is
// the normal live tail. A stream resumed while a turn runs is accepted,
// and ends with an invalid_request frame once that turn ended below the
// cursor.
func TestSessionStreamCursorPastTheEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *httpapi.Config) { c.KeepAlive = 20 * time.Millisecond })
	s.createAgent("echo")
	ses := s.createSession("echo")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	s.call("POST", sp+"/turns", msgTurn("hi"), 200, &turn)
	past := fmt.Sprint(turn.LastSeq + 1)
	for name, r := range map[string]req{
		"after":         {method: "GET", path: sp + "/events?after=" + past, header: sseHeader},
		"huge":          {method: "GET", path: sp + "/events?after=9223372036854775807", header: sseHeader},
		"Last-Event-ID": {method: "GET", path: sp + "/events", header: map[string]string{"Accept": "text/event-stream", "Last-Event-ID": past}},
	} {
		if a := s.do(r); a.status != 400 || a.errCode() != "invalid_request" || !strings.Contains(string(a.body), "cursor after the end of the log") {
			t.Errorf("%s: %s", name, a)
		}
	}
	// At the end: the live tail, which gets the next turn.
	resp := s.stream(req{method: "GET", path: fmt.Sprintf("%s/events?after=%d", sp, turn.LastSeq), header: sseHeader})
	if resp.StatusCode != 200 {
		t.Fatalf("at the end: %d", resp.StatusCode)
	}
	s.call("POST", sp+"/turns", msgTurn("again"), 200, nil)
	r := newSSEReader(resp.Body)
	for f, ok := r.next(); ; f, ok = r.next() {
		if !ok || f.event == "error" {
			t.Fatalf("the live tail at the end of the log ended: %+v", f)
		}
		if f.event == forge.EventTurnCreated {
			break
		}
	}
	resp.Body.Close()

	// A forum's log.
	var forum struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)
	if a := s.do(req{method: "GET", path: "/v1/forums/" + forum.ID + "/events?after=1000000", header: sseHeader}); a.status != 400 || a.errCode() != "invalid_request" {
		t.Errorf("forum past the end: %s", a)
	}

	// While a turn runs, any cursor may be one a client got; the stream
	// ends once the turn ended below it.
	s.createAgent("slow", scripted.Step{Text: "thinking", Hang: true})
	slow := s.createSession("slow")
	var running forge.Turn
	s.call("POST", "/v1/sessions/"+slow.ID+"/turns", map[string]any{"input": msgTurn("go")["input"], "background": true}, 202, &running)
	resp = s.stream(req{method: "GET", path: "/v1/sessions/" + slow.ID + "/events?after=1000000", header: sseHeader})
	if resp.StatusCode != 200 {
		t.Fatalf("a cursor while a turn runs: %d", resp.StatusCode)
	}
	s.call("POST", "/v1/sessions/"+slow.ID+"/cancel", nil, 200, nil)
	r = newSSEReader(resp.Body)
	for {
		f, ok := r.next()
		if !ok {
			t.Fatal("the stream ended without an error frame")
		}
		if f.comment != "" {
			continue
		}
		if f.event != "error" || !strings.Contains(f.data, "invalid_request") || !strings.Contains(f.data, "cursor after the end of the log") {
			t.Fatalf("frame %+v", f)
		}
		break
	}
	if _, ok := r.next(); ok {
		t.Error("the stream goes on after its error frame")
	}
}

// errMessage is the message of an error answer.
func errMessage(a answer) string {
	var e struct {
		Error struct{ Message string }
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Message
}

// TestHeadOfAnEventStreamEnds (found by TestRouteFuzz): a HEAD of an
// event stream answers the stream's headers and ends, freeing its slot
// and its connection for the next request, on every stream route.
func TestHeadOfAnEventStreamEnds(t *testing.T) {
	t.Parallel()
	// Two: a HEAD that kept its slot would leave none for the stream
	// after it, with the stream of the round before possibly not yet
	// released.
	s := newStack(t, func(c *httpapi.Config) {
		c.MaxStreamsPerSession = 2
		c.Protocols = []httpapi.Protocol{openairesp.Protocol{}}
	})
	s.createAgent("slow", scripted.Step{Text: "thinking", Hang: true})
	ses := s.createSession("slow")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	s.call("POST", sp+"/turns", map[string]any{"input": msgTurn("go")["input"], "background": true}, 202, &turn)
	var forum struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 5 * time.Second}
	for _, path := range []string{sp + "/events", sp + "/turns/" + turn.ID + "/events", "/v1/forums/" + forum.ID + "/events",
		"/openai/v1/responses/" + turn.ID + "?stream=true"} {
		hr := s.newRequest(req{method: "HEAD", path: path, header: sseHeader})
		resp, err := client.Do(hr)
		if err != nil {
			t.Fatalf("HEAD %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Errorf("HEAD %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// The one connection serves the next request; the HEAD's stream
		// slot is free again.
		next, err := client.Do(s.newRequest(req{method: "GET", path: sp + "/events", header: sseHeader}))
		if err != nil {
			t.Fatalf("after HEAD %s: %v", path, err)
		}
		if next.StatusCode != 200 {
			t.Errorf("a stream after HEAD %s: %d", path, next.StatusCode)
		}
		next.Body.Close()
		client.CloseIdleConnections()
	}
	s.call("POST", sp+"/cancel", nil, 200, nil)
}
