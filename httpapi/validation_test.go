package httpapi_test

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// badCase is a request the server must refuse with status and code,
// storing nothing.
type badCase struct {
	name   string
	req    req
	status int
	code   string
	// msg, when set, must appear in the error message.
	msg string
}

func agentBody(extra map[string]any) map[string]any {
	b := map[string]any{"name": "new", "model": "scripted/echo"}
	for k, v := range extra {
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
	}
	return b
}

func TestBadRequestsAreRefusedAndStoreNothing(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	var done forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("hi"), 200, &done)
	sid, tid := ses.ID, done.ID
	sp := "/v1/sessions/" + sid

	post := func(path string, body any) req { return req{method: "POST", path: path, body: body} }
	put := func(path string, body any) req { return req{method: "PUT", path: path, body: body} }
	get := func(path string) req { return req{method: "GET", path: path} }
	input := func(items ...any) map[string]any { return map[string]any{"input": items} }
	msg := map[string]any{"type": "message", "text": "hi"}
	approval := map[string]any{"type": "approval", "call_id": "call_x", "approved": true}
	long := strings.Repeat("c", 2000)
	big := `{"name":"big","model":"scripted/echo","instructions":"` + strings.Repeat("x", 5<<20) + `"}`

	const (
		invalid  = "invalid_request"
		notFound = "not_found"
	)
	cases := []badCase{
		// Agents: JSON shape.
		{"agent malformed JSON", post("/v1/agents", `{"name":`), 400, invalid, "malformed JSON"},
		{"agent not JSON", post("/v1/agents", `name=x`), 400, invalid, "malformed JSON"},
		{"agent empty body", post("/v1/agents", ""), 400, invalid, "body is required"},
		{"agent array body", post("/v1/agents", `[]`), 400, invalid, "JSON object"},
		{"agent null body", post("/v1/agents", `null`), 400, invalid, "JSON object"},
		{"agent trailing data", post("/v1/agents", `{"name":"new","model":"scripted/echo"} {}`), 400, invalid, "single JSON value"},
		{"agent trailing garbage", post("/v1/agents", `{"name":"new","model":"scripted/echo"}x`), 400, invalid, ""},
		{"agent unknown field", post("/v1/agents", agentBody(map[string]any{"colour": "red"})), 400, invalid, `unknown field "colour"`},
		{"agent nested unknown field", post("/v1/agents", agentBody(map[string]any{"compaction": map[string]any{"enabld": true}})), 400, invalid, `"compaction.enabld"`},
		{"agent field case", post("/v1/agents", `{"Name":"new","model":"scripted/echo"}`), 400, invalid, `did you mean "name"`},
		{"agent duplicate field", post("/v1/agents", `{"name":"new","name":"x","model":"scripted/echo"}`), 400, invalid, "more than once"},
		{"agent name wrong type", post("/v1/agents", agentBody(map[string]any{"name": 5})), 400, invalid, `"name" must be a string`},
		{"agent nested wrong type", post("/v1/agents", agentBody(map[string]any{"model_params": map[string]any{"temperature": "hot"}})), 400, invalid, `"model_params.temperature" must be a number`},
		{"agent tools wrong type", post("/v1/agents", agentBody(map[string]any{"tools": []any{5}})), 400, invalid, `"tools[0]"`},
		{"agent tool unknown field", post("/v1/agents", agentBody(map[string]any{"tools": []any{map[string]any{"name": "ask", "client": true, "x": 1}}})), 400, invalid, `"tools[0].x"`},
		{"agent approval wrong type", post("/v1/agents", agentBody(map[string]any{"approval": map[string]any{"*": true}})), 400, invalid, `approval.*`},
		{"agent oversized", post("/v1/agents", big), 413, "payload_too_large", ""},
		// Agents: values.
		{"agent no name", post("/v1/agents", agentBody(map[string]any{"name": nil})), 400, invalid, "name is required"},
		{"agent no model", post("/v1/agents", agentBody(map[string]any{"model": nil})), 400, invalid, "model is required"},
		{"agent bad model", post("/v1/agents", agentBody(map[string]any{"model": "gpt4"})), 400, invalid, "provider/model"},
		{"agent bad name", post("/v1/agents", agentBody(map[string]any{"name": "a b"})), 400, invalid, ""},
		{"agent iteration_limit 0", post("/v1/agents", agentBody(map[string]any{"iteration_limit": 0})), 400, invalid, "iteration_limit"},
		{"agent iteration_limit 1025", post("/v1/agents", agentBody(map[string]any{"iteration_limit": 1025})), 400, invalid, "iteration_limit"},
		{"agent iteration_limit -1", post("/v1/agents", agentBody(map[string]any{"iteration_limit": -1})), 400, invalid, "iteration_limit"},
		{"agent session_ttl under a second", post("/v1/agents", agentBody(map[string]any{"retention": map[string]any{"session_ttl": "500ms"}})), 400, invalid, "retention.session_ttl"},
		{"agent session_ttl over ten years", post("/v1/agents", agentBody(map[string]any{"retention": map[string]any{"session_ttl": "100000h"}})), 400, invalid, "retention.session_ttl"},
		{"agent session_ttl not a duration", post("/v1/agents", agentBody(map[string]any{"retention": map[string]any{"session_ttl": "soon"}})), 400, invalid, "duration"},
		{"agent session_ttl a number", post("/v1/agents", agentBody(map[string]any{"retention": map[string]any{"session_ttl": 3600}})), 400, invalid, "duration"},
		{"agent iteration_limit 1.5", post("/v1/agents", agentBody(map[string]any{"iteration_limit": 1.5})), 400, invalid, "integer"},
		{"agent iteration_limit huge", post("/v1/agents", `{"name":"new","model":"scripted/echo","iteration_limit":1e400}`), 400, invalid, "iteration_limit"},
		{"agent max_tokens 0", post("/v1/agents", agentBody(map[string]any{"model_params": map[string]any{"max_tokens": 0}})), 400, invalid, "max_tokens"},
		{"agent temperature 3", post("/v1/agents", agentBody(map[string]any{"model_params": map[string]any{"temperature": 3}})), 400, invalid, "temperature"},
		{"agent reasoning_effort empty", post("/v1/agents", agentBody(map[string]any{"model_params": map[string]any{"reasoning_effort": ""}})), 400, invalid, "reasoning_effort"},
		{"agent threshold 0", post("/v1/agents", agentBody(map[string]any{"compaction": map[string]any{"threshold": 0}})), 400, invalid, "threshold"},
		{"agent context_window 0", post("/v1/agents", agentBody(map[string]any{"compaction": map[string]any{"context_window": 0}})), 400, invalid, "context_window"},
		{"agent unknown builtin", post("/v1/agents", agentBody(map[string]any{"tools": []any{"no_such_tool"}})), 400, invalid, "built-in"},
		{"agent bad policy", post("/v1/agents", agentBody(map[string]any{"approval": map[string]any{"*": "maybe"}})), 400, invalid, "allow, ask or deny"},
		{"agent mcp command and url", post("/v1/agents", agentBody(map[string]any{"mcp_servers": []any{map[string]any{"name": "m", "command": []string{"x"}, "url": "http://h"}}})), 400, invalid, "exactly one"},
		{"agent mcp neither command nor url", post("/v1/agents", agentBody(map[string]any{"mcp_servers": []any{map[string]any{"name": "m"}}})), 400, invalid, "exactly one"},
		{"agent mcp duplicate names", post("/v1/agents", agentBody(map[string]any{"mcp_servers": []any{map[string]any{"name": "m", "url": "http://h"}, map[string]any{"name": "m", "command": []string{"x"}}}})), 400, invalid, "duplicate"},
		{"agent mcp bad url", post("/v1/agents", agentBody(map[string]any{"mcp_servers": []any{map[string]any{"name": "m", "url": "ftp://h"}}})), 400, invalid, "http"},
		{"agent mcp empty command", post("/v1/agents", agentBody(map[string]any{"mcp_servers": []any{map[string]any{"name": "m", "command": []string{""}}}})), 400, invalid, "command[0]"},
		{"agent redaction placeholder", post("/v1/agents", agentBody(map[string]any{"mcp_servers": []any{map[string]any{"name": "m", "url": "http://h", "headers": map[string]string{"k": "[redacted]"}}}})), 400, invalid, "placeholder"},
		{"agent read-only id", post("/v1/agents", agentBody(map[string]any{"id": "ag_x"})), 400, invalid, "assigned by the server"},
		{"agent exists", post("/v1/agents", agentBody(map[string]any{"name": "a"})), 409, "conflict", "already exists"},
		{"agent put unknown", put("/v1/agents/nope", agentBody(map[string]any{"name": nil})), 404, notFound, `"nope"`},
		{"agent put rename", put("/v1/agents/a", agentBody(map[string]any{"name": "b"})), 400, invalid, "renamed"},
		{"agent put stale version", put("/v1/agents/a", agentBody(map[string]any{"name": nil, "version": 7})), 409, "conflict", "version"},
		{"agent put malformed", put("/v1/agents/a", `{"model":`), 400, invalid, ""},
		{"agent put iteration_limit 0", put("/v1/agents/a", agentBody(map[string]any{"name": nil, "iteration_limit": 0})), 400, invalid, "iteration_limit"},
		{"agent get unknown", get("/v1/agents/nope"), 404, notFound, `"nope"`},
		{"agent delete unknown", req{method: "DELETE", path: "/v1/agents/nope"}, 404, notFound, ""},
		{"agents limit 0", get("/v1/agents?limit=0"), 400, invalid, "limit"},
		{"agents limit -1", get("/v1/agents?limit=-1"), 400, invalid, "limit"},
		{"agents limit text", get("/v1/agents?limit=ten"), 400, invalid, "limit"},
		{"agents limit empty", get("/v1/agents?limit="), 400, invalid, "limit"},
		{"agents limit over max", get("/v1/agents?limit=10001"), 400, invalid, "limit"},
		{"agents cursor too long", get("/v1/agents?cursor=" + long), 400, invalid, "cursor"},
		{"agents method", req{method: "PATCH", path: "/v1/agents"}, 405, "method_not_allowed", "allowed"},
		{"unknown path", get("/v1/nothing"), 404, notFound, "no such endpoint"},

		// Sessions.
		{"session no agent", post("/v1/sessions", map[string]any{"title": "t"}), 400, invalid, "agent is required"},
		{"session empty agent", post("/v1/sessions", map[string]any{"agent": ""}), 400, invalid, "agent is required"},
		{"session unknown agent", post("/v1/sessions", map[string]any{"agent": "nope"}), 404, notFound, `agent "nope"`},
		{"session unknown field", post("/v1/sessions", map[string]any{"agent": "a", "kind": "forum"}), 400, invalid, `"kind"`},
		{"session title type", post("/v1/sessions", map[string]any{"agent": "a", "title": 5}), 400, invalid, `"title"`},
		{"session metadata array", post("/v1/sessions", map[string]any{"agent": "a", "metadata": []int{1}}), 400, invalid, "metadata"},
		{"session metadata string", post("/v1/sessions", map[string]any{"agent": "a", "metadata": "x"}), 400, invalid, "metadata"},
		{"session malformed", post("/v1/sessions", `{"agent":"a"`), 400, invalid, ""},
		{"session get unknown", get("/v1/sessions/ses_nope"), 404, notFound, "ses_nope"},
		{"session delete unknown", req{method: "DELETE", path: "/v1/sessions/ses_nope"}, 404, notFound, ""},
		{"sessions limit 0", get("/v1/sessions?limit=0"), 400, invalid, "limit"},
		{"sessions cursor too long", get("/v1/sessions?cursor=" + long), 400, invalid, "cursor"},
		{"messages bad view", get(sp + "/messages?view=raw"), 400, invalid, "view"},
		{"messages limit 0", get(sp + "/messages?limit=0"), 400, invalid, "limit"},
		{"messages cursor too long", get(sp + "/messages?cursor=" + long), 400, invalid, "cursor"},
		{"messages unknown session", get("/v1/sessions/ses_nope/messages"), 404, notFound, ""},
		{"model view unknown session", get("/v1/sessions/ses_nope/messages?view=model"), 404, notFound, ""},

		// Turns.
		{"turn empty body", post(sp+"/turns", ""), 400, invalid, ""},
		{"turn no input", post(sp+"/turns", map[string]any{}), 400, invalid, "input"},
		{"turn null input", post(sp+"/turns", map[string]any{"input": nil}), 400, invalid, "input"},
		{"turn empty input", post(sp+"/turns", input()), 400, invalid, "at least one"},
		{"turn input not array", post(sp+"/turns", map[string]any{"input": "hi"}), 400, invalid, `"input" must be an array`},
		{"turn item not object", post(sp+"/turns", input("hi")), 400, invalid, `"input[0]" must be an object`},
		{"turn item no type", post(sp+"/turns", input(map[string]any{"text": "hi"})), 400, invalid, "input[0].type"},
		{"turn item bad type", post(sp+"/turns", input(map[string]any{"type": "note", "text": "hi"})), 400, invalid, "input[0].type"},
		{"turn item unknown field", post(sp+"/turns", input(map[string]any{"type": "message", "text": "hi", "role": "user"})), 400, invalid, `"input[0].role"`},
		{"turn message no text", post(sp+"/turns", input(map[string]any{"type": "message"})), 400, invalid, "text"},
		{"turn message empty text", post(sp+"/turns", input(map[string]any{"type": "message", "text": ""})), 400, invalid, "text"},
		{"turn message blank text", post(sp+"/turns", input(map[string]any{"type": "message", "text": " \n"})), 400, invalid, "text"},
		{"turn message text type", post(sp+"/turns", input(map[string]any{"type": "message", "text": 5})), 400, invalid, `"input[0].text" must be a string`},
		{"turn message with call_id", post(sp+"/turns", input(map[string]any{"type": "message", "text": "hi", "call_id": "c"})), 400, invalid, "does not apply"},
		{"turn two messages", post(sp+"/turns", input(msg, msg)), 400, invalid, "one message"},
		{"turn message and resolution", post(sp+"/turns", input(msg, approval)), 400, invalid, "mixes"},
		{"turn approval no approved", post(sp+"/turns", input(map[string]any{"type": "approval", "call_id": "c"})), 400, invalid, "approved"},
		{"turn approval no call_id", post(sp+"/turns", input(map[string]any{"type": "approval", "approved": true})), 400, invalid, "call_id"},
		{"turn approval approved type", post(sp+"/turns", input(map[string]any{"type": "approval", "call_id": "c", "approved": "yes"})), 400, invalid, "boolean"},
		{"turn tool_result no output", post(sp+"/turns", input(map[string]any{"type": "tool_result", "call_id": "c"})), 400, invalid, "output"},
		{"turn tool_result with token", post(sp+"/turns", input(map[string]any{"type": "tool_result", "call_id": "c", "output": "o", "token": "t"})), 400, invalid, "does not apply"},
		{"turn auth no token", post(sp+"/turns", input(map[string]any{"type": "auth", "call_id": "c"})), 400, invalid, "token"},
		{"turn auth empty token", post(sp+"/turns", input(map[string]any{"type": "auth", "call_id": "c", "token": ""})), 400, invalid, "token"},
		{"turn previous empty", post(sp+"/turns", map[string]any{"input": []any{msg}, "previous_turn_id": ""}), 400, invalid, "previous_turn_id"},
		{"turn previous and new_root", post(sp+"/turns", map[string]any{"input": []any{msg}, "previous_turn_id": tid, "new_root": true}), 400, invalid, "new_root"},
		{"turn stream and background", post(sp+"/turns", map[string]any{"input": []any{msg}, "stream": true, "background": true}), 400, invalid, "exclude"},
		{"turn accept sse and background", req{method: "POST", path: sp + "/turns", body: map[string]any{"input": []any{msg}, "background": true},
			header: map[string]string{"Accept": "text/event-stream"}}, 400, invalid, "Accept"},
		{"turn new_root type", post(sp+"/turns", map[string]any{"input": []any{msg}, "new_root": "yes"}), 400, invalid, `"new_root" must be a boolean`},
		{"turn unknown field", post(sp+"/turns", map[string]any{"input": []any{msg}, "model": "x"}), 400, invalid, `"model"`},
		{"turn idempotency key too long", req{method: "POST", path: sp + "/turns", body: msgTurn("hi"),
			header: map[string]string{"Idempotency-Key": strings.Repeat("k", 300)}}, 400, invalid, "Idempotency-Key"},
		{"turn oversized", post(sp+"/turns", `{"input":[{"type":"message","text":"`+strings.Repeat("x", 5<<20)+`"}]}`), 413, "payload_too_large", ""},
		{"turn unknown session", post("/v1/sessions/ses_nope/turns", msgTurn("hi")), 404, notFound, "ses_nope"},
		{"turn unknown previous", post(sp+"/turns", map[string]any{"input": []any{msg}, "previous_turn_id": "turn_nope"}), 404, notFound, "turn_nope"},
		{"turn unknown call", post(sp+"/turns", input(approval)), 400, "unknown_call", ""},
		{"turns limit 0", get(sp + "/turns?limit=0"), 400, invalid, "limit"},
		{"turns cursor too long", get(sp + "/turns?cursor=" + long), 400, invalid, "cursor"},
		{"turns unknown session", get("/v1/sessions/ses_nope/turns"), 404, notFound, ""},
		{"turn get unknown", get(sp + "/turns/turn_nope"), 404, notFound, "turn_nope"},
		{"turn get wrong session", get("/v1/sessions/ses_nope/turns/" + tid), 404, notFound, ""},
		{"turns method", req{method: "DELETE", path: sp + "/turns"}, 405, "method_not_allowed", ""},

		// Cancel and compact.
		{"cancel idle", post(sp+"/cancel", nil), 409, "conflict", "no turn is running"},
		{"cancel unknown session", post("/v1/sessions/ses_nope/cancel", nil), 404, notFound, ""},
		{"cancel reason type", post(sp+"/cancel", map[string]any{"reason": 5}), 400, invalid, `"reason"`},
		{"cancel unknown field", post(sp+"/cancel", map[string]any{"why": "x"}), 400, invalid, `"why"`},
		{"cancel malformed", post(sp+"/cancel", `{`), 400, invalid, ""},
		{"compact unknown session", post("/v1/sessions/ses_nope/compact", nil), 404, notFound, ""},
		{"compact bad body", post(sp+"/compact", map[string]any{"background": "yes"}), 400, invalid, "background"},

		// Events.
		{"events after negative", get(sp + "/events?after=-1"), 400, invalid, "after"},
		{"events after text", get(sp + "/events?after=x"), 400, invalid, "after"},
		{"events after empty", get(sp + "/events?after="), 400, invalid, "after"},
		{"events last-event-id text", req{method: "GET", path: sp + "/events", header: map[string]string{"Last-Event-ID": "abc"}}, 400, invalid, "Last-Event-ID"},
		{"events limit 0", get(sp + "/events?limit=0"), 400, invalid, "limit"},
		{"events limit over max", get(sp + "/events?limit=10001"), 400, invalid, "limit"},
		{"events bad cursor", get(sp + "/events?cursor=x"), 400, invalid, "cursor"},
		{"events unknown session", get("/v1/sessions/ses_nope/events"), 404, notFound, ""},
		{"turn events unknown turn", get(sp + "/turns/turn_nope/events"), 404, notFound, "turn_nope"},
		{"sse unknown session", req{method: "GET", path: "/v1/sessions/ses_nope/events", header: map[string]string{"Accept": "text/event-stream"}}, 404, notFound, ""},
		{"sse bad after", req{method: "GET", path: sp + "/events?after=-5", header: map[string]string{"Accept": "text/event-stream"}}, 400, invalid, ""},
	}
	before := s.state()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := s.do(c.req)
			if a.status != c.status || a.errCode() != c.code {
				t.Fatalf("got %s\nwant status %d code %s", a, c.status, c.code)
			}
			var e struct {
				Error struct{ Message string }
			}
			if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("error body %s has no message", a.body)
			}
			if !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("message %q does not mention %q", e.Error.Message, c.msg)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if after := s.state(); after != before {
				t.Fatalf("stored state changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestNoMalformedRequestIsA5xx throws random mutations of valid bodies at
// every endpoint that takes one.
func TestNoMalformedRequestIsA5xx(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	bodies := []struct{ method, path, body string }{
		{"POST", "/v1/agents", `{"name":"z","model":"scripted/echo","model_params":{"max_tokens":5,"temperature":0.5},"tools":[{"name":"ask","client":true,"input_schema":{"type":"object"}}],"approval":{"*":"ask"},"mcp_servers":[{"name":"m","url":"http://h","headers":{"a":"b"}}],"iteration_limit":3,"compaction":{"enabled":false,"threshold":0.5}}`},
		{"PUT", "/v1/agents/a", `{"model":"scripted/echo","iteration_limit":5,"tools":["echo"],"subagents":["a"]}`},
		{"POST", "/v1/sessions", `{"agent":"a","title":"t","metadata":{"k":[1,2]}}`},
		{"POST", sp + "/turns", `{"input":[{"type":"approval","call_id":"c","approved":true,"reason":"r"},{"type":"tool_result","call_id":"d","output":"o","is_error":true}],"supersede":true,"background":true}`},
		{"POST", sp + "/cancel", `{"reason":"r"}`},
		{"POST", sp + "/compact", `{"background":true}`},
	}
	rng := rand.New(rand.NewSource(1))
	junk := []string{"", "{", "}", "[", "]", `"`, ",", ":", "0", "-1", "1e999", "null", "true", `\u0000`, "\xff", " ", `"x"`, "{}", "[]"}
	for i := 0; i < 600; i++ {
		b := bodies[i%len(bodies)]
		body := []byte(b.body)
		for n := rng.Intn(3) + 1; n > 0; n-- {
			p := rng.Intn(len(body) + 1)
			switch rng.Intn(3) {
			case 0: // insert junk
				body = append(body[:p:p], append([]byte(junk[rng.Intn(len(junk))]), body[p:]...)...)
			case 1: // delete a span
				q := min(len(body), p+rng.Intn(8))
				body = append(body[:p:p], body[q:]...)
			case 2: // truncate
				body = body[:p]
			}
		}
		a := s.do(req{method: b.method, path: b.path, body: body})
		if a.status >= 500 && a.errCode() != "not_implemented" {
			t.Fatalf("%s %s %q: %s", b.method, b.path, body, a)
		}
		if a.status >= 400 && a.errCode() == "" {
			t.Fatalf("%s %s %q: error without code: %s", b.method, b.path, body, a)
		}
	}
}

func TestUnknownSubagentIsInvalid(t *testing.T) {
	s := newStack(t)
	for _, body := range []string{
		`{"name":"lead","model":"scripted/echo","subagents":["ghost"]}`,
		`{"name":"lead","model":"scripted/echo","subagents":["lead"]}`,
	} {
		resp := s.do(req{method: "POST", path: "/v1/agents", body: body})
		if resp.status != 400 || resp.errCode() != "invalid_request" {
			t.Fatalf("%s: %d %s", body, resp.status, resp.body)
		}
	}
	s.do(req{method: "POST", path: "/v1/agents", body: `{"name":"researcher","model":"scripted/echo"}`})
	if resp := s.do(req{method: "POST", path: "/v1/agents", body: `{"name":"lead","model":"scripted/echo","subagents":["researcher"]}`}); resp.status != 201 {
		t.Fatalf("known subagent refused: %d %s", resp.status, resp.body)
	}
}

// TestAgentRetentionRoundTrips: an agent's retention.session_ttl is kept
// and shown as a duration; PUT without it removes it.
func TestAgentRetentionRoundTrips(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	var a forge.Agent
	s.call("POST", "/v1/agents", map[string]any{"name": "kept", "model": "scripted/echo",
		"retention": map[string]any{"session_ttl": "720h"}}, 201, &a)
	if a.Retention == nil || time.Duration(a.Retention.SessionTTL) != 720*time.Hour {
		t.Fatalf("created with retention %+v", a.Retention)
	}
	var got map[string]any
	s.call("GET", "/v1/agents/kept", nil, 200, &got)
	if r, _ := got["retention"].(map[string]any); r["session_ttl"] != "720h0m0s" {
		t.Fatalf("GET retention = %v", got["retention"])
	}
	var put forge.Agent
	s.call("PUT", "/v1/agents/kept", map[string]any{"model": "scripted/echo"}, 200, &put)
	if put.Retention != nil {
		t.Fatalf("PUT without retention kept %+v", put.Retention)
	}
}
