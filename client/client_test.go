package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

type recorded struct {
	Method, Path, Query, Auth, Idem string
	Body                            string
}

// jsonServer answers each request with routes[method+" "+path] (status and
// body), recording what it saw.
func jsonServer(t *testing.T, routes map[string]struct {
	status int
	body   string
}) (*httptest.Server, func() []recorded) {
	var mu sync.Mutex
	var seen []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), string(b)})
		mu.Unlock()
		rt, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rt.status)
		io.WriteString(w, rt.body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), seen...)
	}
}

type route = struct {
	status int
	body   string
}

func TestAPIError(t *testing.T) {
	t.Parallel()
	srv, _ := jsonServer(t, map[string]route{
		"POST /v1/sessions/ses_1/turns":  {409, `{"error":{"code":"pending_actions","message":"the session has open calls"}}`},
		"GET /v1/agents/x":               {502, "<html>bad gateway</html>\nmore"},
		"POST /v1/sessions/ses_2/cancel": {422, `{"error":{"code":"idempotency_mismatch","message":"key reused"}}`},
		"POST /v1/sessions":              {415, `{"error":{"code":"unsupported_media_type","message":"send JSON"}}`},
		"GET /v1/sessions/ses_3":         {403, `{"error":{"code":"forbidden","message":"not a loopback Host"}}`},
	})
	c := newTestClient(t, srv.URL)
	_, err := c.GetSession(context.Background(), "ses_nope")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" || ae.Message != "no such route" {
		t.Fatalf("err %#v", err)
	}
	if !errors.Is(err, forge.ErrNotFound) || !IsNotFound(err) || ErrorCode(err) != "not_found" {
		t.Errorf("helpers do not see not_found in %v", err)
	}
	if err.Error() != "no such route (not_found)" {
		t.Errorf("Error() = %q", err.Error())
	}
	_, err = c.CreateTurn(context.Background(), "ses_1", TurnRequest{Input: Message("x")})
	if !errors.Is(err, forge.ErrPendingActions) || !IsConflict(err) {
		t.Errorf("err %v", err)
	}
	// The codes added with the server's request guards map to their
	// sentinels too.
	_, err = c.Cancel(context.Background(), "ses_2", CancelRequest{IdempotencyKey: "k"})
	if !errors.Is(err, forge.ErrIdempotencyMismatch) || ErrorCode(err) != "idempotency_mismatch" {
		t.Errorf("422: %v", err)
	}
	_, err = c.CreateSession(context.Background(), CreateSessionRequest{Agent: "a"})
	if !errors.Is(err, forge.ErrUnsupportedMediaType) {
		t.Errorf("415: %v", err)
	}
	_, err = c.GetSession(context.Background(), "ses_3")
	if !errors.Is(err, forge.ErrForbidden) {
		t.Errorf("403: %v", err)
	}
	_, err = c.GetAgent(context.Background(), "x")
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Code != "server_error" || ae.Message != "<html>bad gateway</html>" {
		t.Errorf("non-API error body: %#v", err)
	}
	if errors.Unwrap(ae) != nil {
		t.Errorf("server_error unwraps to %v", errors.Unwrap(ae))
	}
}

func TestAgentsSessionsAndAuth(t *testing.T) {
	t.Parallel()
	srv, seen := jsonServer(t, map[string]route{
		"POST /v1/agents":                 {201, `{"id":"ag_1","name":"a","version":1,"model":"scripted/echo","iteration_limit":100}`},
		"PUT /v1/agents/a":                {200, `{"id":"ag_1","name":"a","version":2,"model":"scripted/echo"}`},
		"GET /v1/agents":                  {200, `{"data":[{"name":"a"},{"name":"b"}],"next_cursor":"c2"}`},
		"DELETE /v1/agents/a":             {204, ``},
		"POST /v1/sessions":               {201, `{"id":"ses_1","kind":"direct","agent":"a","tip_turn_id":null}`},
		"GET /v1/sessions":                {200, `{"data":[],"next_cursor":null}`},
		"GET /v1/sessions/ses_1/messages": {200, `{"data":[{"id":"msg_1","role":"user","parts":[{"id":"prt_1","type":"text","text":"hi"}]}],"next_cursor":null}`},
	})
	c := newTestClient(t, srv.URL+"/v1/", WithAPIKey("sekret"))
	ctx := context.Background()
	ag, err := c.CreateAgent(ctx, &forge.Agent{Name: "a", Model: "scripted/echo"})
	if err != nil || ag.ID != "ag_1" || ag.Version != 1 {
		t.Fatalf("%+v %v", ag, err)
	}
	limit := int64(50)
	ag, err = c.PutAgent(ctx, &forge.Agent{Name: "a", Model: "scripted/echo", Instructions: "be brief",
		IterationLimit: 3, ModelParams: forge.ModelParams{MaxTokens: &limit},
		Tools: []forge.ToolSpec{{Name: "read_file", BuiltIn: true}, {Name: "ask", Client: true}}, Approval: map[string]string{"ask": "ask"}})
	if err != nil || ag.Version != 2 {
		t.Fatalf("%+v %v", ag, err)
	}
	page, err := c.ListAgents(ctx, ListOptions{Limit: 2, Cursor: "c1"})
	if err != nil || len(page.Data) != 2 || page.NextCursor != "c2" || page.Data[1].Name != "b" {
		t.Fatalf("%+v %v", page, err)
	}
	if err := c.DeleteAgent(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ses, err := c.CreateSession(ctx, CreateSessionRequest{Agent: "a"})
	if err != nil || ses.ID != "ses_1" || ses.TipTurnID != nil {
		t.Fatalf("%+v %v", ses, err)
	}
	sp, err := c.ListSessions(ctx, ListSessionsOptions{})
	if err != nil || sp.NextCursor != "" || sp.Data == nil {
		t.Fatalf("%+v %v", sp, err)
	}
	mp, err := c.ListMessages(ctx, "ses_1", ListMessagesOptions{View: ViewModel})
	if err != nil || len(mp.Data) != 1 || mp.Data[0].Parts[0].Text != "hi" {
		t.Fatalf("%+v %v", mp, err)
	}

	r := seen()
	for _, x := range r {
		if x.Auth != "Bearer sekret" {
			t.Errorf("%s %s: Authorization %q", x.Method, x.Path, x.Auth)
		}
	}
	// Zero values are left out so the server applies its defaults.
	if r[0].Body != `{"model":"scripted/echo","name":"a"}` {
		t.Errorf("create body %s", r[0].Body)
	}
	var put map[string]any
	_ = json.Unmarshal([]byte(r[1].Body), &put)
	for _, k := range []string{"instructions", "iteration_limit", "model_params", "tools", "approval"} {
		if _, ok := put[k]; !ok {
			t.Errorf("put body lacks %s: %s", k, r[1].Body)
		}
	}
	for _, k := range []string{"id", "version", "created_at", "compaction", "mcp_servers"} {
		if _, ok := put[k]; ok {
			t.Errorf("put body has %s: %s", k, r[1].Body)
		}
	}
	if !strings.Contains(r[1].Body, `"tools":["read_file",{"name":"ask","client":true}]`) {
		t.Errorf("tools not in API shape: %s", r[1].Body)
	}
	if r[2].Query != "cursor=c1&limit=2" {
		t.Errorf("list query %q", r[2].Query)
	}
	if r[6].Query != "view=model" {
		t.Errorf("messages query %q", r[6].Query)
	}
}

func TestTurns(t *testing.T) {
	t.Parallel()
	srv, seen := jsonServer(t, map[string]route{
		"POST /v1/sessions/ses_1/turns":       {202, `{"id":"turn_1","session_id":"ses_1","status":"running"}`},
		"GET /v1/sessions/ses_1/turns/turn_1": {200, `{"id":"turn_1","status":"done","output":{"message_id":"msg_1","text":"ok"}}`},
		"GET /v1/sessions/ses_1/turns":        {200, `{"data":[{"id":"turn_1"}],"next_cursor":null}`},
		"POST /v1/sessions/ses_1/cancel":      {200, `{"id":"turn_1","status":"cancelled","cancel_reason":"client"}`},
		"GET /v1/sessions/ses_1/events":       {200, `{"data":[{"seq":3,"type":"turn.created"}],"next_cursor":null}`},
	})
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	tr, err := c.CreateTurn(ctx, "ses_1", TurnRequest{Input: []forge.Input{Approve("call_1", false, "no"), ToolResult("call_2", "42", false)}, Background: true, IdempotencyKey: "idem-1"})
	if err != nil || tr.Status != forge.TurnRunning {
		t.Fatalf("%+v %v", tr, err)
	}
	tr, err = c.GetTurn(ctx, "ses_1", "turn_1")
	if err != nil || tr.Output == nil || tr.Output.Text != "ok" {
		t.Fatalf("%+v %v", tr, err)
	}
	if p, err := c.ListTurns(ctx, "ses_1", ListOptions{}); err != nil || len(p.Data) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	tr, err = c.Cancel(ctx, "ses_1", CancelRequest{Reason: "user", IdempotencyKey: "idem-2"})
	if err != nil || tr.CancelReason == nil || *tr.CancelReason != forge.CancelClient {
		t.Fatalf("%+v %v", tr, err)
	}
	if p, err := c.ListEvents(ctx, "ses_1", EventsOptions{After: 2}); err != nil || p.Data[0].Seq != 3 {
		t.Fatalf("%+v %v", p, err)
	}
	r := seen()
	if r[0].Idem != "idem-1" || r[0].Body != `{"input":[{"type":"approval","call_id":"call_1","approved":false,"reason":"no"},{"type":"tool_result","call_id":"call_2","output":"42"}],"background":true}` {
		t.Errorf("turn request %+v", r[0])
	}
	if r[3].Idem != "idem-2" || r[3].Body != `{"reason":"user"}` {
		t.Errorf("cancel request %+v", r[3])
	}
	if r[4].Query != "after=2" {
		t.Errorf("events query %q", r[4].Query)
	}
}

func TestNewBaseURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://h:1":          "http://h:1",
		"http://h:1/":         "http://h:1",
		"http://h:1/v1":       "http://h:1",
		"https://h/forge/v1/": "https://h/forge",
		"127.0.0.1:8080":      "http://127.0.0.1:8080",
	} {
		c, err := New(in)
		if err != nil || c.BaseURL() != want {
			t.Errorf("New(%q).BaseURL() = %q, %v; want %q", in, c.BaseURL(), err, want)
		}
	}
	for _, bad := range []string{"", "ftp://h"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

// TestCreateAgentSendsEverySetField: the agent body carries the busy
// default, retention, output schema and retries (they were once dropped,
// so an agent made with the client kept the server's defaults).
func TestCreateAgentSendsEverySetField(t *testing.T) {
	t.Parallel()
	srv, seen := jsonServer(t, map[string]route{
		"POST /v1/agents": {201, `{"id":"ag_1","name":"a","version":1}`},
	})
	c := newTestClient(t, srv.URL+"/v1/")
	retries := 2
	_, err := c.CreateAgent(context.Background(), &forge.Agent{Name: "a", Model: "scripted/echo", IfBusy: forge.IfBusyEnqueue,
		OutputRetries: &retries, Retention: &forge.Retention{SessionTTL: forge.TTL(time.Hour)},
		OutputSchema: &forge.OutputSchema{Name: "o", Schema: json.RawMessage(`{"type":"object"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(seen()[0].Body), &body); err != nil {
		t.Fatal(err)
	}
	r, _ := body["retention"].(map[string]any)
	if body["if_busy"] != "enqueue" || body["output_retries"] != float64(2) || r["session_ttl"] != "1h0m0s" || body["output_schema"] == nil {
		t.Fatalf("sent %v", body)
	}
}

func TestRestoreWorkspace(t *testing.T) {
	t.Parallel()
	srv, seen := jsonServer(t, map[string]route{
		"POST /v1/sessions/ses_1/sandbox/restore": {200, `{"snapshot":"snap_1","partial":false,"written":2,"removed":1}`},
	})
	c := newTestClient(t, srv.URL)
	res, err := c.RestoreWorkspace(context.Background(), "ses_1", "snap_1")
	if err != nil || res.Snapshot != "snap_1" || res.Written != 2 || res.Removed != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if r := seen(); r[0].Body != `{"snapshot":"snap_1"}` {
		t.Errorf("request %+v", r[0])
	}
	var ae *APIError
	if _, err := c.RestoreWorkspace(context.Background(), "ses_2", "snap_1"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("unknown: %v", err)
	}
}

func TestWorkspaceSnapshots(t *testing.T) {
	t.Parallel()
	srv, _ := jsonServer(t, map[string]route{
		"GET /v1/sessions/ses_1/sandbox/snapshots": {200, `{"data":[{"id":"snap_1","created_at":"2026-12-03T10:00:00Z"},{"id":"snap_2","created_at":"2026-12-03T10:01:00Z"}]}`},
	})
	c := newTestClient(t, srv.URL)
	list, err := c.WorkspaceSnapshots(context.Background(), "ses_1")
	if err != nil || len(list) != 2 || list[1].ID != "snap_2" || list[1].CreatedAt.Minute() != 1 {
		t.Fatalf("%+v %v", list, err)
	}
	var ae *APIError
	if _, err := c.WorkspaceSnapshots(context.Background(), "ses_2"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("unknown: %v", err)
	}
}
