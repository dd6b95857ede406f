package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// hookReceiver is a loopback webhook endpoint: it answers each request
// with the code fail says (503 while it fails) and keeps them all.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex // guards the following
	fail func(n int) bool
	got  []hookRequest
}

type hookRequest struct {
	header http.Header
	body   []byte
	code   int
}

func newHookReceiver(t *testing.T, fail func(n int) bool) *hookReceiver {
	h := &hookReceiver{fail: fail}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		code := 200
		if h.fail(len(h.got)) {
			code = 503
		}
		h.got = append(h.got, hookRequest{r.Header.Clone(), body, code})
		h.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.got...)
}

// signature is the Standard Webhooks v1 signature, computed here from the
// specification (not with Forge's code).
func signature(t *testing.T, secret, id, ts string, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func (s *server) webhook(url string, events ...string) (id, secret string) {
	s.t.Helper()
	w := s.must(201, "POST", "/v1/webhooks", obj{"url": url, "events": events})
	return w["id"].(string), w["secret"].(string)
}

func (s *server) deliveries(id string) []any {
	s.t.Helper()
	return s.must(200, "GET", "/v1/webhooks/"+id+"/deliveries", nil)["data"].([]any)
}

// TestWebhookRetriedAfterAFailureWithStandardSignatures: turn.done reaches
// a loopback receiver that fails the first attempt; the retry carries the
// same webhook-id, and both signatures verify, here and with the
// standardwebhooks reference package.
func TestWebhookRetriedAfterAFailureWithStandardSignatures(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	rcv := newHookReceiver(t, func(n int) bool { return n == 0 })
	s := start(t, t.TempDir()+"/forge.db", model, "--allow-private-webhooks")
	hook, secret := s.webhook(rcv.URL+"/forge", "turn.done")
	if got := s.must(200, "GET", "/v1/webhooks/"+hook, nil); got["secret"] != nil {
		t.Fatalf("GET shows the secret: %v", got)
	}
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("done and dusted"))
	tid := s.turn(sid, "go")
	s.waitStatus(sid, tid)
	waitFor(t, func() bool { return len(rcv.requests()) >= 2 })
	got := rcv.requests()
	if len(got) != 2 || got[0].code != 503 || got[1].code != 200 {
		t.Fatalf("receiver got %d requests", len(got))
	}
	var checks []obj
	for i, r := range got {
		id, ts, sig := r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.header.Get("webhook-signature")
		if id == "" || id != got[0].header.Get("webhook-id") {
			t.Errorf("attempt %d: webhook-id %q, want the first attempt's", i, id)
		}
		if want := signature(t, secret, id, ts, r.body); sig != want {
			t.Errorf("attempt %d: webhook-signature %q, want %q", i, sig, want)
		}
		var body struct {
			Type      string    `json:"type"`
			Timestamp time.Time `json:"timestamp"`
			Data      struct {
				Type      string `json:"type"`
				SessionID string `json:"session_id"`
				Data      obj    `json:"data"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Type != "turn.done" || body.Timestamp.IsZero() || body.Data.Type != "turn.done" || body.Data.SessionID != sid ||
			body.Data.Data["id"] != tid || body.Data.Data["status"] != "done" {
			t.Errorf("attempt %d: body %s", i, r.body)
		}
		headers := obj{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig}
		checks = append(checks, obj{"secret": secret, "headers": headers, "body": string(r.body)})
		if i == 0 {
			tampered := bytes.Replace(r.body, []byte(`"done"`), []byte(`"failed"`), 1)
			checks = append(checks, obj{"secret": secret, "headers": headers, "body": string(tampered)})
		}
	}
	if out := verifyWithStandardWebhooks(t, checks); out != "ok\nrefused: No matching signature found\nok" {
		t.Errorf("standardwebhooks verify:\n%s", out)
	}
	ds := s.deliveries(hook)
	if len(ds) != 1 {
		t.Fatalf("deliveries %v", ds)
	}
	d := ds[0].(obj)
	if d["status"] != "delivered" || d["attempts"] != float64(2) || d["response_code"] != float64(200) ||
		d["id"] != got[0].header.Get("webhook-id") || d["next_attempt_at"] != nil {
		t.Fatalf("delivery %v", d)
	}
}

// verifyWithStandardWebhooks runs e2e/node/webhook-verify.mjs (the
// standardwebhooks package pinned in e2e/node).
func verifyWithStandardWebhooks(t *testing.T, checks []obj) string {
	t.Helper()
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	_, statErr := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks", "package.json"))
	if err != nil || statErr != nil {
		if os.Getenv("FORGE_TEST_REQUIRE_SERVICES") == "1" {
			t.Fatal("node or e2e/node/node_modules is missing: run npm ci --prefix e2e/node")
		}
		t.Log("node or e2e/node/node_modules is missing: the reference verification is skipped")
		return "ok\nrefused: No matching signature found\nok"
	}
	in, _ := json.Marshal(checks)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "webhook-verify.mjs")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node webhook-verify.mjs: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWebhookOutboxSurvivesKill9: a delivery whose endpoint failed while
// the server ran is sent by the next server on the same database after a
// kill -9.
func TestWebhookOutboxSurvivesKill9(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	var mu sync.Mutex
	down := true
	rcv := newHookReceiver(t, func(int) bool { mu.Lock(); defer mu.Unlock(); return down })
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model, "--allow-private-webhooks")
	hook, _ := s.webhook(rcv.URL, "turn.done")
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("hi"))
	tid := s.turn(sid, "go")
	s.waitStatus(sid, tid)
	waitFor(t, func() bool {
		ds := s.deliveries(hook)
		return len(ds) == 1 && ds[0].(obj)["attempts"] == float64(1)
	})
	s.kill9()
	mu.Lock()
	down = false
	mu.Unlock()

	s2 := start(t, db, model, "--allow-private-webhooks")
	waitFor(t, func() bool {
		ds := s2.deliveries(hook)
		return len(ds) == 1 && ds[0].(obj)["status"] == "delivered"
	})
	got := rcv.requests()
	if n := len(got); n < 2 || got[n-1].code != 200 || got[n-1].header.Get("webhook-id") != got[0].header.Get("webhook-id") {
		t.Fatalf("receiver got %d requests", n)
	}
}

// TestLoopbackWebhookRefusedWithoutTheFlag: a keyless server on loopback
// still refuses a loopback endpoint unless the operator allows it.
func TestLoopbackWebhookRefusedWithoutTheFlag(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir()+"/forge.db", openaitest.New(t))
	code, body := s.call("POST", "/v1/webhooks", obj{"url": "http://127.0.0.1:1/hook", "events": []string{"turn.done"}})
	if code != 400 || !strings.Contains(body["error"].(obj)["message"].(string), "--allow-private-webhooks") {
		t.Fatalf("%d %v", code, body)
	}
}

// turn starts a turn and returns its id (200 when it ended while the
// request waited, 201 or 202 otherwise).
func (s *server) turn(sid, text string) string {
	s.t.Helper()
	code, t := s.call("POST", "/v1/sessions/"+sid+"/turns", message(text))
	if code != 200 && code != 201 && code != 202 {
		s.t.Fatalf("POST turns: %d %v", code, t)
	}
	return t["id"].(string)
}

// TestWebhookDeliveredOnceAcrossReplicas: three replicas on one
// PostgreSQL database each run a dispatcher; every turn.done, whichever
// replica ran the turn, reaches the endpoint exactly once (it always
// answers 200, so nothing is retried).
func TestWebhookDeliveredOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	rcv := newHookReceiver(t, func(int) bool { return false })
	_, rs := cluster(t, 3, model, "--allow-private-webhooks")
	hook, _ := rs[0].webhook(rcv.URL, "turn.done")
	rs[1].agent(obj{"name": "a", "model": "openai/gpt-test"})
	const turns = 12
	for i := range turns {
		model.Enqueue(openaitest.Text("ok"))
		r := rs[i%len(rs)]
		sid := r.session("a")
		r.waitStatus(sid, r.turn(sid, "go"))
	}
	waitFor(t, func() bool { return len(rcv.requests()) >= turns })
	time.Sleep(2 * time.Second) // room for a duplicate to arrive, were there one
	seen := map[string]int{}
	for _, r := range rcv.requests() {
		seen[r.header.Get("webhook-id")]++
	}
	if len(seen) != turns {
		t.Fatalf("%d distinct webhook-ids for %d turns", len(seen), turns)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	for _, d := range rs[2].deliveries(hook) {
		if d.(obj)["status"] != "delivered" || d.(obj)["attempts"] != float64(1) {
			t.Errorf("delivery %v", d)
		}
	}
}

// TestWebhookEventsOfEveryKind: an endpoint subscribed to all three
// types gets action.required (a tool call awaiting approval), the
// turn.done of that paused turn, and forum.message (a human's post), each
// with its data.
func TestWebhookEventsOfEveryKind(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	rcv := newHookReceiver(t, func(int) bool { return false })
	s := start(t, t.TempDir()+"/forge.db", model, "--allow-private-webhooks")
	s.webhook(rcv.URL, "turn.done", "action.required", "forum.message")
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"echo"}, "approval": obj{"echo": "ask"}})
	sid := s.session("a")
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"secret"}`}))
	s.waitStatus(sid, s.turn(sid, "go"))
	r := s.forum(nil)
	r.human("alice")
	msg := r.post("alice", "hello room")
	types := func() map[string]obj {
		out := map[string]obj{}
		for _, q := range rcv.requests() {
			var body struct {
				Type string `json:"type"`
				Data struct {
					Data obj `json:"data"`
				} `json:"data"`
			}
			if err := json.Unmarshal(q.body, &body); err != nil {
				t.Fatal(err)
			}
			out[body.Type] = body.Data.Data
		}
		return out
	}
	waitFor(t, func() bool { return len(types()) == 3 })
	got := types()
	if got["forum.message"]["id"] != msg["id"] {
		t.Errorf("forum.message data %v, want the message %v", got["forum.message"], msg["id"])
	}
	if got["turn.done"]["status"] != "done" || len(got["turn.done"]["required_actions"].([]any)) != 1 {
		t.Errorf("turn.done data %v", got["turn.done"])
	}
	if got["action.required"] == nil {
		t.Errorf("no action.required")
	}
}
