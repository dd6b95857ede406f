package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestServeWithConfig runs forge serve with a config file against the fake
// OpenAI server: a turn that succeeds after a 429, one that fails with an
// answer echoing the key; the key must appear nowhere: not in the log, the
// events, the turns or GET /v1/models.
func TestServeWithConfig(t *testing.T) {
	const key = "sk-e2e-NEVER-SHOW-ME-31337"
	t.Setenv("FORGE_E2E_KEY", key)
	srv := openaitest.New(t)
	srv.SetAPIKey(key)
	echo := fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error"}}`, key)
	srv.Enqueue(
		openaitest.Status(429, "").Header("Retry-After", "0"),
		openaitest.Text("hello", " there").Usage(1000, 500),
		openaitest.Status(401, echo),
	)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "forge.yaml")
	cfg := fmt.Sprintf(`providers:
  - name: fake
    kind: openai
    base_url: %s
    api_key_env: FORGE_E2E_KEY
models:
  - id: fake/m1
    context_window: 32000
    max_output: 2000
    prices: {input: 1, output: 2}
retry:
  base_delay: 10ms
`, srv.URL())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, serveOptions{addr: addr, db: filepath.Join(dir, "forge.db"), turnTimeout: time.Minute,
			shutdownGrace: time.Second, logLevel: "debug", config: cfgPath, logOut: &logs})
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	}
	t.Cleanup(stop)
	base := "http://" + addr
	var seen bytes.Buffer // every answer body
	call := func(method, path string, body any, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		seen.Write(b)
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %s: %v", method, path, b, err)
			}
		}
		return res.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if res, err := http.Get(base + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("server not healthy")
		}
		time.Sleep(20 * time.Millisecond)
	}

	if st := call("POST", "/v1/agents", map[string]any{"name": "a", "model": "fake/m1"}, nil); st != 201 {
		t.Fatalf("create agent: %d %s", st, seen.String())
	}
	var ses struct{ ID string }
	call("POST", "/v1/sessions", map[string]any{"agent": "a"}, &ses)
	type turn struct {
		Status string
		Output *struct{ Text string }
		Error  *struct{ Code, Message string }
		Usage  struct {
			InputTokens  int64   `json:"input_tokens"`
			OutputTokens int64   `json:"output_tokens"`
			Cost         float64 `json:"cost"`
		}
	}
	msg := func(text string) map[string]any {
		return map[string]any{"input": []any{map[string]any{"type": "message", "text": text}}}
	}
	var t1 turn
	call("POST", "/v1/sessions/"+ses.ID+"/turns", msg("hi"), &t1)
	// 1000 x $1 + 500 x $2 per million.
	if t1.Status != "done" || t1.Output == nil || t1.Output.Text != "hello there" || t1.Usage.Cost != 0.002 {
		t.Fatalf("turn 1: %+v", t1)
	}
	var t2 turn
	call("POST", "/v1/sessions/"+ses.ID+"/turns", msg("again"), &t2)
	if t2.Status != "errored" || t2.Error == nil || t2.Error.Code != "model_error" ||
		!strings.Contains(t2.Error.Message, "Incorrect API key provided: [redacted]") {
		t.Fatalf("turn 2: %+v", t2)
	}
	var events struct {
		Data []struct {
			Type string
			Data json.RawMessage
		}
	}
	call("GET", "/v1/sessions/"+ses.ID+"/events", nil, &events)
	var costs []string
	for _, ev := range events.Data {
		if ev.Type == "step.finished" {
			var part struct {
				Data struct {
					Usage struct{ Cost float64 }
				}
			}
			_ = json.Unmarshal(ev.Data, &part)
			costs = append(costs, fmt.Sprint(part.Data.Usage.Cost))
		}
	}
	// The refused call of turn 2 is a cut step: it closes with a
	// step-finish too, its usage estimated (nothing: the server
	// answered before reading the prompt).
	if fmt.Sprint(costs) != "[0.002 0]" {
		t.Errorf("step.finished costs %v", costs)
	}
	var models struct {
		Data []struct {
			ID            string `json:"id"`
			ContextWindow int64  `json:"context_window"`
		}
		Providers []struct {
			Name, Kind string
			APIKeyEnv  string `json:"api_key_env"`
		}
	}
	call("GET", "/v1/models", nil, &models)
	found := false
	for _, m := range models.Data {
		found = found || (m.ID == "fake/m1" && m.ContextWindow == 32000)
	}
	if !found || len(models.Providers) != 2 || models.Providers[0].APIKeyEnv != "FORGE_E2E_KEY" {
		t.Errorf("models: %+v", models)
	}
	stop()

	if strings.Contains(seen.String(), key) {
		t.Errorf("an API answer shows the key:\n%s", seen.String())
	}
	log := logs.String()
	if strings.Contains(log, key) {
		t.Errorf("the log shows the key:\n%s", log)
	}
	for _, want := range []string{"model provider", "api_key_env=FORGE_E2E_KEY", "model call failed, retrying"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

func TestServeBadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(path, []byte("providers:\n  - name: x\n    kind: openai\n    api_key: sk-oops-123456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := serve(context.Background(), serveOptions{addr: "127.0.0.1:0", db: filepath.Join(dir, "forge.db"), logLevel: "error",
		config: path, logOut: io.Discard})
	if err == nil || !strings.Contains(err.Error(), path+":4: providers[0].api_key: keys are not written in the config file") ||
		strings.Contains(err.Error(), "sk-oops") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "forge.db")); err == nil {
		t.Errorf("the database was created before the config was checked")
	}
	t.Setenv("FORGE_CONFIG", filepath.Join(dir, "missing.yaml"))
	err = serve(context.Background(), serveOptions{addr: "127.0.0.1:0", db: filepath.Join(dir, "forge.db"), logLevel: "error", logOut: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("FORGE_CONFIG: err = %v", err)
	}
}
