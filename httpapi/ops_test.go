package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
)

func readyBody(t *testing.T, a answer) (status string, checks map[string]string) {
	t.Helper()
	var b struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal(a.body, &b); err != nil {
		t.Fatalf("readyz body %s: %v", a, err)
	}
	return b.Status, b.Checks
}

func TestReadyzChecksEachDependencyAndDrains(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	redisDown := false
	checks := []httpapi.ReadyCheck{
		{Name: "store", Check: func(context.Context) error { return nil }},
		{Name: "redis", Check: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if redisDown {
				return errors.New("dial tcp 10.1.2.3:6379: connection refused")
			}
			return nil
		}},
	}
	s := newStack(t, withKeys(map[string]string{"k1": "acme"}), func(c *httpapi.Config) { c.Ready = checks })
	// Probes carry no key.
	a := s.do(req{method: "GET", path: "/readyz"})
	if st, c := readyBody(t, a); a.status != 200 || st != "ready" || c["store"] != "ok" || c["redis"] != "ok" || c["shutdown"] != "ok" {
		t.Fatalf("readyz: %s", a)
	}
	mu.Lock()
	redisDown = true
	mu.Unlock()
	a = s.do(req{method: "GET", path: "/readyz"})
	if st, c := readyBody(t, a); a.status != 503 || st != "unavailable" || c["redis"] != "failing" || c["store"] != "ok" {
		t.Fatalf("readyz with redis down: %s", a)
	}
	if strings.Contains(string(a.body), "10.1.2.3") {
		t.Fatalf("readyz shows a failure's detail to callers without a key: %s", a)
	}
	mu.Lock()
	redisDown = false
	mu.Unlock()
	s.api.Drain()
	a = s.do(req{method: "GET", path: "/readyz"})
	if st, c := readyBody(t, a); a.status != 503 || st != "draining" || c["shutdown"] != "failing" {
		t.Fatalf("readyz while draining: %s (docs/distributed.md: shutdown failing)", a)
	}
	// Liveness depends on nothing, draining included.
	if a := s.do(req{method: "GET", path: "/healthz"}); a.status != 200 {
		t.Fatalf("healthz while draining: %s", a)
	}
}

func TestReadyzCheckHonoursTheRequestsEnd(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	s := newStack(t, func(c *httpapi.Config) {
		c.Ready = []httpapi.ReadyCheck{{Name: "store", Check: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := s.newRequest(req{method: "GET", path: "/readyz"}).WithContext(ctx)
	done := make(chan error, 1)
	go func() {
		resp, err := s.srv.Client().Do(r)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled probe got an answer")
	}
}

// TestMetricsRouteNeedsAKeyWhenKeysAreConfigured: with keys, /metrics
// answers the operator key with every series, a tenant key with its
// tenant's only (refused when the server serves no tenant view), and
// anything else unauthorized.
func TestMetricsRouteNeedsAKeyWhenKeysAreConfigured(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("forge_up 1\n"))
	})
	perTenant := func(tenant string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, "forge_up{tenant=%q} 1\n", tenant)
		})
	}
	s := newStack(t, withKeys(map[string]string{"k1": "acme", "k2": "globex"}), func(c *httpapi.Config) {
		c.Metrics, c.TenantMetrics, c.OperatorKey = metrics, perTenant, "op-key"
	})
	if a := s.do(req{method: "GET", path: "/metrics"}); a.status != 401 || a.errCode() != "unauthorized" {
		t.Fatalf("metrics without a key: %s", a)
	}
	for key, want := range map[string]string{"k1": "forge_up{tenant=\"acme\"} 1\n", "k2": "forge_up{tenant=\"globex\"} 1\n", "op-key": "forge_up 1\n"} {
		s.key = key
		if a := s.do(req{method: "GET", path: "/metrics"}); a.status != 200 || string(a.body) != want {
			t.Fatalf("metrics with key %s: %s", key, a)
		}
	}
	s.key = "wrong"
	if a := s.do(req{method: "GET", path: "/metrics"}); a.status != 401 {
		t.Fatalf("metrics with a wrong key: %s", a)
	}
	s.key = "op-key"
	if a := s.do(req{method: "GET", path: "/v1/agents"}); a.status != 401 {
		t.Fatalf("the operator key on the API: %s", a)
	}
	s.key = "k1"
	if a := s.do(req{method: "POST", path: "/metrics", body: "{}"}); a.status != 405 {
		t.Fatalf("POST /metrics: %s", a)
	}
	noTenantView := newStack(t, withKeys(map[string]string{"k1": "acme"}), func(c *httpapi.Config) { c.Metrics, c.OperatorKey = metrics, "op-key" })
	noTenantView.key = "k1"
	if a := noTenantView.do(req{method: "GET", path: "/metrics"}); a.status != 403 || a.errCode() != "forbidden" {
		t.Fatalf("a tenant key without a tenant view: %s", a)
	}
}

func TestMetricsRouteWithoutKeysIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("forge_up 1\n")) })
	s := newStack(t, func(c *httpapi.Config) { c.Metrics = metrics })
	if a := s.do(req{method: "GET", path: "/metrics"}); a.status != 200 {
		t.Fatalf("metrics on loopback: %s", a)
	}
	if a := s.do(req{method: "GET", path: "/metrics", header: map[string]string{"Host": "evil.example"}}); a.status != 403 {
		t.Fatalf("metrics for a foreign Host: %s", a)
	}
	if a := s.do(req{method: "GET", path: "/metrics", header: map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}}); a.status != 403 {
		t.Fatalf("metrics cross-origin: %s", a)
	}
	off := newStack(t)
	if a := off.do(req{method: "GET", path: "/metrics"}); a.status != 404 || a.errCode() != "not_found" {
		t.Fatalf("metrics not configured: %s", a)
	}
}

func TestSSESubscribersCountOpenStreams(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	if n := s.api.SSESubscribers(); n != 0 {
		t.Fatalf("%d subscribers before any stream", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := s.newRequest(req{method: "GET", path: "/v1/sessions/" + ses.ID + "/events", header: map[string]string{"Accept": "text/event-stream"}}).WithContext(ctx)
	resp, err := s.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	// The headers were flushed after the stream was counted.
	if n := s.api.SSESubscribers(); n != 1 {
		t.Fatalf("%d subscribers with one stream open", n)
	}
	// A turn runs while the stream is open; closing it uncounts it.
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("hi"), 200, nil)
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for s.api.SSESubscribers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers after the stream closed", s.api.SSESubscribers())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Plain JSON answers are never counted.
	s.call("GET", "/v1/sessions/"+ses.ID, nil, 200, nil)
	if n := s.api.SSESubscribers(); n != 0 {
		t.Fatalf("%d subscribers after a JSON answer", n)
	}
}

func TestShuttingDownRefusesNewTurnsWith503(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns", body: msgTurn("hi")})
	if a.status != 503 || a.errCode() != "unavailable" {
		t.Fatalf("turn while shutting down: %s", a)
	}
}

// logLines is a JSON log written to memory.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

func TestRequestLogNamesSessionAndTurn(t *testing.T) {
	t.Parallel()
	var logs logLines
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newStack(t, func(c *httpapi.Config) { c.Logger = logger })
	s.createAgent("a", scripted.Step{Text: "hello"})
	ses := s.createSession("a")
	var turn struct{ ID string }
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("hi"), 200, &turn)
	s.call("GET", "/v1/sessions/"+ses.ID+"/turns/"+turn.ID, nil, 200, nil)
	s.call("GET", "/v1/sessions/"+ses.ID+"/messages", nil, 200, nil)
	seen := map[string]bool{}
	for _, rec := range logs.records(t) {
		if rec["msg"] != "http request" {
			continue
		}
		key := rec["method"].(string) + " " + rec["path"].(string)
		switch key {
		case "POST /v1/sessions/" + ses.ID + "/turns", "GET /v1/sessions/" + ses.ID + "/turns/" + turn.ID:
			if rec["session_id"] != ses.ID || rec["turn_id"] != turn.ID {
				t.Fatalf("%s logged %v", key, rec)
			}
		case "GET /v1/sessions/" + ses.ID + "/messages":
			if rec["session_id"] != ses.ID || rec["turn_id"] != nil {
				t.Fatalf("%s logged %v", key, rec)
			}
		default:
			continue
		}
		seen[key] = true
	}
	if len(seen) != 3 {
		t.Fatalf("request log lines seen: %v", seen)
	}
}

// TestStoreGoneAnswers503: reads and writes that reach a database that is
// gone answer 503 store_error (retry later), not 500, and show nothing of
// the driver's error.
func TestStoreGoneAnswers503(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	if err := s.store.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range []req{
		{method: "GET", path: "/v1/sessions/ses_01JNEVERSEEN0000000000000000"},
		{method: "GET", path: "/v1/sessions"},
		{method: "GET", path: "/v1/sessions/" + ses.ID + "/messages"},
		{method: "GET", path: "/v1/sessions/" + ses.ID + "/turns"},
		{method: "POST", path: "/v1/sessions", body: map[string]any{"agent": "a"}},
	} {
		a := s.do(r)
		if a.status != http.StatusServiceUnavailable || a.errCode() != "store_error" {
			t.Errorf("%s %s on a closed store: %s, want 503 store_error", r.method, r.path, a)
		}
		if strings.Contains(string(a.body), "sqlite") || strings.Contains(string(a.body), "closed") {
			t.Errorf("%s %s: the answer shows the driver's error: %s", r.method, r.path, a.body)
		}
	}
}
