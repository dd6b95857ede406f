package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
)

func TestHealthAndOpenAPI(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"k": "t"} })
	if a := s.do(req{method: "GET", path: "/healthz"}); a.status != 200 || !strings.Contains(string(a.body), `"ok"`) {
		t.Fatalf("healthz: %s", a)
	}
	a := s.do(req{method: "GET", path: "/v1/openapi.json"})
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &doc) != nil || doc.OpenAPI != "3.1.0" || len(doc.Paths) < 10 {
		t.Fatalf("openapi.json: %d %.200s", a.status, a.body)
	}
}

func TestAgentLifecycleRedactsSecrets(t *testing.T) {
	s := newStack(t)
	body := map[string]any{
		"name": "support", "model": "scripted/echo", "instructions": "help",
		"tools":    []any{"echo", map[string]any{"name": "ask_user", "description": "ask", "input_schema": map[string]any{"type": "object"}, "client": true}},
		"approval": map[string]string{"ask_user": "ask", "*": "allow"},
		"mcp_servers": []any{
			map[string]any{"name": "local", "command": []string{"srv", "--stdio"}, "env": map[string]string{"TOKEN": "s3cret-env"}},
			map[string]any{"name": "crm", "url": "https://crm.example/mcp", "headers": map[string]string{"Authorization": "Bearer s3cret-hdr"}},
		},
	}
	var a forge.Agent
	ans := s.call("POST", "/v1/agents", body, 201, &a)
	if strings.Contains(string(ans.body), "s3cret") {
		t.Fatalf("POST answer leaks a secret: %s", ans.body)
	}
	if !strings.HasPrefix(a.ID, forge.PrefixAgent) || a.Version != 1 || a.IterationLimit != forge.DefaultIterationLimit ||
		a.Compaction.Enabled == nil || !*a.Compaction.Enabled || *a.Compaction.Threshold != forge.DefaultThreshold {
		t.Fatalf("created agent %+v", a)
	}
	if got := ans.header.Get("Location"); got != "/v1/agents/support" {
		t.Fatalf("Location %q", got)
	}
	if a.MCPServers[0].Env["TOKEN"] != "[redacted]" || a.MCPServers[1].Headers["Authorization"] != "[redacted]" {
		t.Fatalf("secrets not redacted: %+v", a.MCPServers)
	}
	if a.Tools[0].Name != "echo" || !a.Tools[1].Client {
		t.Fatalf("tools %+v", a.Tools)
	}

	// GET and list redact too.
	got := s.call("GET", "/v1/agents/support", nil, 200, nil)
	list := s.call("GET", "/v1/agents", nil, 200, nil)
	for _, b := range [][]byte{got.body, list.body} {
		if strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), "[redacted]") {
			t.Fatalf("answer leaks or lost secrets: %s", b)
		}
	}
	if !strings.Contains(string(list.body), `"next_cursor":null`) {
		t.Fatalf("list %s", list.body)
	}

	// PUT the GET answer back, edited: a new version that keeps the secrets.
	var edit map[string]any
	if err := json.Unmarshal(got.body, &edit); err != nil {
		t.Fatal(err)
	}
	edit["instructions"] = "help more"
	var v2 forge.Agent
	ans = s.call("PUT", "/v1/agents/support", edit, 200, &v2)
	if v2.Version != 2 || v2.ID != a.ID || v2.Instructions != "help more" || strings.Contains(string(ans.body), "s3cret") {
		t.Fatalf("PUT answer %s", ans.body)
	}
	stored, err := s.store.GetAgent(context.Background(), forge.DefaultTenant, "support")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Version != 2 || stored.MCPServers[0].Env["TOKEN"] != "s3cret-env" || stored.MCPServers[1].Headers["Authorization"] != "Bearer s3cret-hdr" {
		t.Fatalf("stored v2 lost its secrets: %+v", stored.MCPServers)
	}
	// The edited copy is now stale.
	if a := s.do(req{method: "PUT", path: "/v1/agents/support", body: edit}); a.status != 409 || a.errCode() != "conflict" {
		t.Fatalf("stale PUT: %s", a)
	}
	// A minimal PUT resets absent fields to their defaults.
	var v3 forge.Agent
	s.call("PUT", "/v1/agents/support", map[string]any{"model": "scripted/other", "iteration_limit": 7}, 200, &v3)
	if v3.Version != 3 || v3.Model != "scripted/other" || v3.IterationLimit != 7 || len(v3.Tools) != 0 || v3.Instructions != "" {
		t.Fatalf("v3 %+v", v3)
	}
	if old, err := s.store.GetAgentVersion(context.Background(), forge.DefaultTenant, a.ID, 1); err != nil || old.Instructions != "help" {
		t.Fatalf("version 1 %+v %v", old, err)
	}

	s.call("DELETE", "/v1/agents/support", nil, 204, nil)
	if a := s.do(req{method: "GET", path: "/v1/agents/support"}); a.status != 404 {
		t.Fatalf("GET deleted agent: %s", a)
	}
	if a := s.do(req{method: "POST", path: "/v1/sessions", body: map[string]any{"agent": "support"}}); a.status != 404 || a.errCode() != "not_found" {
		t.Fatalf("session of a deleted agent: %s", a)
	}
}

func TestSessions(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	var ses forge.Session
	ans := s.call("POST", "/v1/sessions", map[string]any{"agent": "a", "title": "order 42", "metadata": map[string]any{"k": "v"}}, 201, &ses)
	if !strings.HasPrefix(ses.ID, forge.PrefixSession) || !strings.HasPrefix(ses.MainThreadID, forge.PrefixThread) ||
		ses.Kind != forge.KindDirect || ses.Agent != "a" || ses.Title != "order 42" || ses.TipTurnID != nil ||
		string(ses.Metadata) != `{"k":"v"}` || ses.CreatedAt.IsZero() {
		t.Fatalf("session %s", ans.body)
	}
	if !strings.Contains(string(ans.body), `"tip_turn_id":null`) {
		t.Fatalf("tip_turn_id not null: %s", ans.body)
	}
	var bare forge.Session
	s.call("POST", "/v1/sessions", map[string]any{"agent": "a"}, 201, &bare)
	if string(bare.Metadata) != `{}` {
		t.Fatalf("default metadata %s", bare.Metadata)
	}
	var got forge.Session
	s.call("GET", "/v1/sessions/"+ses.ID, nil, 200, &got)
	if got.ID != ses.ID || got.MainThreadID != ses.MainThreadID {
		t.Fatalf("GET %+v", got)
	}
	// Page through sessions one at a time.
	s.createSession("a")
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		var page struct {
			Data       []forge.Session
			NextCursor *string `json:"next_cursor"`
		}
		path := "/v1/sessions?limit=1"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		s.call("GET", path, nil, 200, &page)
		for _, x := range page.Data {
			if seen[x.ID] {
				t.Fatalf("session %s listed twice", x.ID)
			}
			seen[x.ID] = true
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if len(seen) != 3 {
		t.Fatalf("listed %d sessions, want 3", len(seen))
	}
	for _, view := range []string{"", "?view=full", "?view=model"} {
		a := s.call("GET", "/v1/sessions/"+ses.ID+"/messages"+view, nil, 200, nil)
		if strings.TrimSpace(string(a.body)) != `{"data":[],"next_cursor":null}` {
			t.Fatalf("messages%s of a new session: %s", view, a.body)
		}
	}
	s.call("DELETE", "/v1/sessions/"+ses.ID, nil, 204, nil)
	if a := s.do(req{method: "GET", path: "/v1/sessions/" + ses.ID}); a.status != 404 {
		t.Fatalf("GET deleted session: %s", a)
	}
}

func TestTurnWaitChainsAndListsMessages(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var t1 forge.Turn
	ans := s.call("POST", sp+"/turns", msgTurn("hi"), 200, &t1)
	if t1.Status != forge.TurnDone || t1.Output == nil || t1.Output.Text != "echo: hi" || t1.EndedAt == nil || t1.LastSeq == 0 {
		t.Fatalf("turn %s", ans.body)
	}
	if loc := ans.header.Get("Location"); loc != sp+"/turns/"+t1.ID {
		t.Fatalf("Location %q", loc)
	}
	var got forge.Session
	s.call("GET", sp, nil, 200, &got)
	if got.TipTurnID == nil || *got.TipTurnID != t1.ID {
		t.Fatalf("tip %v, want %s", got.TipTurnID, t1.ID)
	}
	var t2 forge.Turn
	s.call("POST", sp+"/turns", msgTurn("again"), 200, &t2)
	if t2.PreviousTurnID == nil || *t2.PreviousTurnID != t1.ID {
		t.Fatalf("second turn chains from %v", t2.PreviousTurnID)
	}

	type page struct {
		Data       []forge.Message
		NextCursor *string `json:"next_cursor"`
	}
	var full, model page
	s.call("GET", sp+"/messages", nil, 200, &full)
	s.call("GET", sp+"/messages?view=model", nil, 200, &model)
	if len(full.Data) != 4 || len(model.Data) != 4 {
		t.Fatalf("full %d messages, model %d, want 4", len(full.Data), len(model.Data))
	}
	roles := []string{}
	for i, m := range full.Data {
		roles = append(roles, m.Role)
		if m.ID != model.Data[i].ID || m.ThreadID != ses.MainThreadID {
			t.Fatalf("message %d: %+v vs %+v", i, m, model.Data[i])
		}
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant" || text(full.Data[0]) != "hi" || text(full.Data[3]) != "echo: again" {
		t.Fatalf("messages %+v", full.Data)
	}
	// Paged: two and two.
	var p1, p2 page
	s.call("GET", sp+"/messages?limit=2", nil, 200, &p1)
	if len(p1.Data) != 2 || p1.NextCursor == nil {
		t.Fatalf("first page %+v", p1)
	}
	s.call("GET", sp+"/messages?limit=2&cursor="+*p1.NextCursor, nil, 200, &p2)
	if len(p2.Data) != 2 || p2.Data[0].ID != full.Data[2].ID {
		t.Fatalf("second page %+v", p2)
	}

	// Fork from the first turn: the tip moves, the old branch is kept.
	var fork forge.Turn
	s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "fork"}}, "previous_turn_id": t1.ID}, 200, &fork)
	s.call("GET", sp+"/messages", nil, 200, &full)
	if len(full.Data) != 4 || text(full.Data[2]) != "fork" {
		t.Fatalf("forked branch %+v", full.Data)
	}
	var root forge.Turn
	s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "anew"}}, "new_root": true}, 200, &root)
	if root.PreviousTurnID != nil {
		t.Fatalf("new root chains from %v", *root.PreviousTurnID)
	}

	var turns struct{ Data []forge.Turn }
	s.call("GET", sp+"/turns", nil, 200, &turns)
	if len(turns.Data) != 4 || turns.Data[0].ID != t1.ID {
		t.Fatalf("turns %+v", turns.Data)
	}
	var one forge.Turn
	s.call("GET", sp+"/turns/"+t2.ID, nil, 200, &one)
	if one.ID != t2.ID || one.Status != forge.TurnDone {
		t.Fatalf("GET turn %+v", one)
	}
}

func TestTurnBackgroundAndInProgress(t *testing.T) {
	s := newStack(t)
	s.createAgent("a", scripted.Step{Text: "one two three four", DelayMS: 100})
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	ans := s.call("POST", sp+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "background": true}, 202, &turn)
	if turn.Status != forge.TurnRunning || ans.header.Get("Location") != sp+"/turns/"+turn.ID {
		t.Fatalf("background answer %s", ans)
	}
	if a := s.do(req{method: "POST", path: sp + "/turns", body: msgTurn("more")}); a.status != 409 || a.errCode() != "turn_in_progress" {
		t.Fatalf("second turn while one runs: %s", a)
	}
	done := s.waitTurn(ses.ID, turn.ID)
	if done.Status != forge.TurnDone || done.Output.Text != "one two three four" {
		t.Fatalf("turn %+v", done)
	}
}

func TestTurnStream(t *testing.T) {
	s := newStack(t)
	// The delay keeps the turn running while the stream subscribes: the
	// bus keeps a turn's deltas only while it runs (see the report).
	s.createAgent("a", scripted.Step{Text: "Hello there world", DelayMS: 20})
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	for _, mode := range []string{"body", "accept"} {
		t.Run(mode, func(t *testing.T) {
			r := req{method: "POST", path: sp + "/turns", body: map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "stream": true}}
			if mode == "accept" {
				r.body = msgTurn("hi")
				r.header = map[string]string{"Accept": "text/event-stream"}
			}
			resp := s.stream(r)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			checkSSEHeaders(t, resp.Header)
			evs := newSSEReader(resp.Body).events(t)
			if len(evs) < 3 || evs[0].Type != forge.EventTurnCreated || evs[len(evs)-1].Type != forge.EventTurnDone {
				t.Fatalf("events %s", eventTypes(evs))
			}
			tid := resp.Header.Get("Forge-Turn-Id")
			deltas := ""
			for i, ev := range evs {
				if i > 0 && ev.Seq <= evs[i-1].Seq {
					t.Fatalf("seqs not increasing: %s", eventTypes(evs))
				}
				if ev.TurnID == nil || *ev.TurnID != tid || ev.SessionID != ses.ID {
					t.Fatalf("event %+v not of turn %s", ev, tid)
				}
				if ev.Type == forge.EventModelDelta {
					var d forge.DeltaData
					_ = json.Unmarshal(ev.Data, &d)
					deltas += d.Delta
				}
			}
			if deltas != "Hello there world" {
				t.Fatalf("deltas %q in %s", deltas, eventTypes(evs))
			}
			var done forge.Turn
			_ = json.Unmarshal(evs[len(evs)-1].Data, &done)
			if done.ID != tid || done.Status != forge.TurnDone || done.Output.Text != "Hello there world" {
				t.Fatalf("turn.done data %s", evs[len(evs)-1].Data)
			}
		})
	}
}

func checkSSEHeaders(t *testing.T, h http.Header) {
	t.Helper()
	if h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" || h.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("SSE headers %v", h)
	}
}

func TestTurnIdempotencyKeyAnswersTheFirstTurn(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	key := map[string]string{"Idempotency-Key": "k-1"}
	a1 := s.do(req{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: key})
	a2 := s.do(req{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: key})
	var t1, t2 forge.Turn
	if a1.status != 200 || a2.status != 200 || json.Unmarshal(a1.body, &t1) != nil || json.Unmarshal(a2.body, &t2) != nil {
		t.Fatalf("answers %s / %s", a1, a2)
	}
	if t1.ID != t2.ID || t2.Status != forge.TurnDone {
		t.Fatalf("retry made turn %s (first %s)", t2.ID, t1.ID)
	}
	// Asking for background mode in the body makes another request.
	a3 := s.do(req{method: "POST", path: sp + "/turns", body: map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}}, "background": true}, header: key})
	if a3.status != 422 || a3.errCode() != "idempotency_mismatch" {
		t.Fatalf("background retry %s", a3)
	}
	// The same body in stream mode (Accept): the first turn's events from
	// the start.
	resp := s.stream(req{method: "POST", path: sp + "/turns", body: msgTurn("hi"), header: map[string]string{"Idempotency-Key": "k-1", "Accept": "text/event-stream"}})
	evs := newSSEReader(resp.Body).events(t)
	if len(evs) < 2 || evs[0].Type != forge.EventTurnCreated || *evs[0].TurnID != t1.ID || evs[len(evs)-1].Type != forge.EventTurnDone {
		t.Fatalf("stream retry: %s", eventTypes(evs))
	}
	var turns struct{ Data []forge.Turn }
	s.call("GET", sp+"/turns", nil, 200, &turns)
	if len(turns.Data) != 1 {
		t.Fatalf("%d turns stored, want 1", len(turns.Data))
	}
}

func TestOpenCallsResolution(t *testing.T) {
	s := newStack(t)
	s.call("POST", "/v1/agents", map[string]any{"name": "a", "model": "scripted/echo",
		"tools": []any{map[string]any{"name": "ask_user", "client": true}},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "ask_user", Arguments: json.RawMessage(`{"q":"?"}`)}}},
			scripted.Step{Text: "Hello"},
		)}}, 201, nil)
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	s.call("POST", sp+"/turns", msgTurn("hi"), 200, &turn)
	if turn.Status != forge.TurnDone || turn.Output != nil || len(turn.RequiredActions) != 1 || turn.RequiredActions[0].Type != forge.ActionClientTool {
		t.Fatalf("turn %+v", turn)
	}
	callID := turn.RequiredActions[0].CallID
	result := func(id string) map[string]any {
		return map[string]any{"type": "tool_result", "call_id": id, "output": "42"}
	}
	before := s.state()
	for _, c := range []struct {
		body   any
		status int
		code   string
	}{
		{msgTurn("ignored"), 409, "pending_actions"},
		{map[string]any{"input": []any{result("call_nope")}}, 400, "unknown_call"},
		{map[string]any{"input": []any{result(callID), result(callID)}}, 400, "duplicate_call"},
	} {
		if a := s.do(req{method: "POST", path: sp + "/turns", body: c.body}); a.status != c.status || a.errCode() != c.code {
			t.Fatalf("%v: got %s, want %d %s", c.body, a, c.status, c.code)
		}
		if after := s.state(); after != before {
			t.Fatalf("refused turn stored something:\n%s\n%s", before, after)
		}
	}
	var next forge.Turn
	s.call("POST", sp+"/turns", map[string]any{"input": []any{result(callID)}}, 200, &next)
	if next.Status != forge.TurnDone || next.Output == nil || next.Output.Text != "Hello" {
		t.Fatalf("resolved turn %+v", next)
	}
}

// text joins a message's text parts.
func text(m forge.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == forge.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// TestTurnWhileShuttingDownIsUnavailable: once the engine is closing, a new
// turn is refused with 503 unavailable (retry elsewhere), not a 500.
func TestTurnWhileShuttingDownIsUnavailable(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	if err := s.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns",
		body: `{"input":[{"type":"message","text":"hi"}]}`})
	if a.status != 503 || a.errCode() != "unavailable" {
		t.Fatalf("turn while shutting down: %s", a)
	}
}
