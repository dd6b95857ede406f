package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
	"github.com/forge-runtime/forge/server"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "also write the page screenshots to testdata/screenshots (committed)")

// ---- the browser

// browser is one headless Chromium with one tab, driven over the DevTools
// protocol. It records what the page logs to its console.
type browser struct {
	t   testing.TB
	ctx context.Context

	mu      sync.Mutex // guards the following
	console []chromedp.ConsoleMessage
}

// chromiumPath returns the Chromium binary the browser tests use, from
// FORGE_TEST_CHROMIUM; without it the test is skipped, or fails when
// FORGE_TEST_REQUIRE_SERVICES=1 (CI, where a skip would hide the tests).
func chromiumPath(t testing.TB) string {
	p := os.Getenv("FORGE_TEST_CHROMIUM")
	if p == "" {
		if os.Getenv("FORGE_TEST_REQUIRE_SERVICES") == "1" {
			t.Fatal("FORGE_TEST_CHROMIUM is not set and FORGE_TEST_REQUIRE_SERVICES=1: install chromium (apt-get install -y chromium) and set FORGE_TEST_CHROMIUM=/usr/bin/chromium")
		}
		t.Skip("browser test: set FORGE_TEST_CHROMIUM to a Chromium binary (web/browsertest.sh does)")
	}
	return p
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		// Nothing outside loopback: the inspector must need no other host.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("starting Chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			if os.Getenv("WEB_TEST_CONSOLE") != "" {
				fmt.Println("console:", m.Text)
			}
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
	})
	return b
}

// problems returns the console errors and exceptions logged so far.
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if m.IsException() || m.Type == "error" {
			// Chromium logs every failed request. Expected ones: a request
			// the test cut on purpose, the 401 that makes the page ask for
			// a key, and /v1/forums while this server has no forums.
			if !m.IsException() && (strings.Contains(m.Text, "ERR_") || strings.Contains(m.Text, "status of 401") ||
				(strings.Contains(m.Text, "status of 404") && strings.HasSuffix(strings.SplitN(m.URL, "?", 2)[0], "/v1/forums"))) {
				continue
			}
			out = append(out, fmt.Sprintf("%s: %s", m.Type, m.Text))
		}
	}
	return out
}

// checkConsole fails the test if the page logged an error or threw.
func (b *browser) checkConsole() {
	b.t.Helper()
	if p := b.problems(); len(p) > 0 {
		b.t.Errorf("the page logged problems:\n%s", strings.Join(p, "\n"))
	}
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v\npage text:\n%s", err, b.text())
	}
}

func (b *browser) navigate(url string) { b.t.Helper(); b.do(chromedp.Navigate(url)) }

func (b *browser) click(sel string) {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(sel)))
}

func (b *browser) typeInto(sel, text string) {
	b.t.Helper()
	b.do(chromedp.SendKeys(chromedp.CSS(sel), text))
}

// text is the page's visible text (for failure messages).
func (b *browser) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "(unavailable: " + err.Error() + ")"
	}
	return s
}

// eval evaluates a JavaScript expression and decodes its value into T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript expression is truthy.
func (b *browser) waitFor(expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		b.t.Fatalf("waiting for %s: %v\npage text:\n%s\nconsole: %v", expr, err, b.text(), b.problems())
	}
}

// screenshot saves a full-page PNG in the test's artifact directory and,
// with -update-screenshots, in testdata/screenshots.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	// A viewport as tall as the page puts sticky headers where a reader
	// sees them (a beyond-the-viewport capture would paint them mid-page).
	height := eval[int64](b, `Math.min(document.documentElement.scrollHeight, 8000)`)
	b.do(chromedp.EmulateViewport(1280, height), chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	b.do(chromedp.EmulateReset())
	dirs := []string{b.t.ArtifactDir()}
	if *updateScreenshots {
		dirs = append(dirs, filepath.Join("testdata", "screenshots"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	b.t.Logf("screenshot %s (%d bytes) in %s", name, len(png), strings.Join(dirs, ", "))
}

// ---- the server

// testServer is the real Forge HTTP API in-process: SQLite in a temp dir, the
// engine, the scripted provider and the openai provider pointed at a
// loopback fake of the OpenAI API.
type testServer struct {
	t     testing.TB
	URL   string
	key   string
	store forge.Store
	eng   *engine.Engine
	srv   *httptest.Server
	oai   *openaitest.Server

	mu       sync.Mutex // guards the following
	lastIDs  []string   // Last-Event-ID headers of event stream requests, in order
	wrapNext func(http.Handler) http.Handler
}

type serverOption func(*server.Config)

func withKeys(keys map[string]string) serverOption {
	return func(c *server.Config) { c.APIKeys = keys }
}

func newServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	ctx := context.Background()
	oai := openaitest.New(t)
	env := map[string]string{"OPENAI_BASE_URL": oai.URL(), "OPENAI_API_KEY": "sk-test"}
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("WEB_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	dir := t.TempDir()
	cfg := server.Config{DB: filepath.Join(dir, "forge.db"), SandboxRoot: filepath.Join(dir, "sandboxes"),
		Getenv: func(k string) string { return env[k] }, Logger: logger, NoMetrics: true,
		ScriptedQuota: &server.ScriptedQuota{}, // no quota in tests
		Tune:          func(c *engine.Config) { c.ToolCancelWait = 200 * time.Millisecond }}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, store: srv.Store(), eng: srv.Engine(), oai: oai}
	for k := range cfg.APIKeys {
		s.key = k
	}
	api := srv.Handler()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") && strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			s.mu.Lock()
			s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
			s.mu.Unlock()
		}
		api.ServeHTTP(w, r)
	}))
	s.URL = s.srv.URL
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	return s
}

// streamRequests returns the Last-Event-ID header of each event stream
// request so far.
func (s *testServer) streamRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lastIDs...)
}

// call makes an API request with the server's key and decodes the answer.
func (s *testServer) call(method, path string, body any, want int, out any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s (want %d)", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
}

func (s *testServer) createAgent(body map[string]any) {
	s.t.Helper()
	s.call("POST", "/v1/agents", body, 201, nil)
}

func (s *testServer) createSession(agent, title string) forge.Session {
	s.t.Helper()
	var ses forge.Session
	s.call("POST", "/v1/sessions", map[string]any{"agent": agent, "title": title}, 201, &ses)
	return ses
}

// turn runs a message turn to its end.
func (s *testServer) turn(sid, text string, extra ...map[string]any) forge.Turn {
	s.t.Helper()
	body := map[string]any{"input": []any{map[string]any{"type": "message", "text": text}}}
	for _, e := range extra {
		for k, v := range e {
			body[k] = v
		}
	}
	var t forge.Turn
	s.call("POST", "/v1/sessions/"+sid+"/turns", body, 200, &t)
	return t
}

func (s *testServer) session(sid string) forge.Session {
	s.t.Helper()
	var ses forge.Session
	s.call("GET", "/v1/sessions/"+sid, nil, 200, &ses)
	return ses
}

func (s *testServer) getTurn(sid, tid string) forge.Turn {
	s.t.Helper()
	var t forge.Turn
	s.call("GET", "/v1/sessions/"+sid+"/turns/"+tid, nil, 200, &t)
	return t
}

// jsString quotes s for use inside a JavaScript expression.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
