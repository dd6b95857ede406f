// Package e2e runs a real `forge serve` process on loopback against a
// loopback server that speaks the OpenAI Chat Completions wire format, and
// checks the product from the outside: HTTP, SSE, crashes and restarts.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

var forgeBin string

func TestMain(m *testing.M) {
	http.DefaultClient.Timeout = 60 * time.Second // a hung request fails the test, with logs
	bin, err := buildForge()
	if err != nil {
		fmt.Fprintln(os.Stderr, "building forge:", err)
		os.Exit(1)
	}
	forgeBin = bin
	os.Exit(m.Run())
}

// buildForge builds cmd/forge into a directory of the user's cache kept
// for this checkout: go build skips the link when the binary there is up
// to date, which saves seconds on every run.
func buildForge() (string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "forge-e2e", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "forge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/forge")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return bin, build.Run()
}

// server is a running `forge serve` process.
type server struct {
	t    testing.TB
	cmd  *exec.Cmd
	URL  string
	db   string
	logs *syncBuffer
	// stdout is what the server wrote on stdout (the listening lines).
	stdout *syncBuffer
	exit   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs forge serve on db with the fake model at model's URL.
func start(t testing.TB, db string, model *openaitest.Server, args ...string) *server {
	t.Helper()
	s, err := tryStart(t, db, model, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tryStart(t testing.TB, db string, model *openaitest.Server, args ...string) (*server, error) {
	t.Helper()
	return tryStartEnv(t, db, model, nil, args...)
}

// startEnv is start with env ("K=V") added to the server's environment
// (rather than the test process's, so that tests can run in parallel).
func startEnv(t testing.TB, db string, model *openaitest.Server, env []string, args ...string) *server {
	t.Helper()
	s, err := tryStartEnv(t, db, model, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tryStartEnv(t testing.TB, db string, model *openaitest.Server, env []string, args ...string) (*server, error) {
	t.Helper()
	cmd := exec.Command(forgeBin, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--log-level", "debug"}, args...)...)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL(), "FORGE_API_KEYS=")
	cmd.Env = append(cmd.Env, env...)
	s := &server{t: t, cmd: cmd, db: db, logs: &syncBuffer{}, stdout: &syncBuffer{}, exit: make(chan error, 1)}
	cmd.Stderr = s.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			s.stdout.Write([]byte(line + "\n"))
			if u, ok := strings.CutPrefix(line, "forge listening on "); ok {
				lines <- u
				continue
			}
			// --log-format json: the same line as a JSON object.
			var rec struct {
				Msg, URL string
			}
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "forge listening on ") {
				lines <- rec.URL
			}
		}
	}()
	go func() { s.exit <- cmd.Wait() }()
	select {
	case s.URL = <-lines:
	case err := <-s.exit:
		return nil, fmt.Errorf("forge serve exited: %v\n%s", err, s.logs.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("forge serve did not start:\n%s", s.logs.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			// SIGQUIT makes the Go runtime print every goroutine's stack.
			_ = s.cmd.Process.Signal(syscall.SIGQUIT)
			time.Sleep(500 * time.Millisecond)
		}
		_ = s.cmd.Process.Kill()
		<-s.waitExit()
		if t.Failed() {
			t.Logf("forge serve log:\n%s", s.logs.String())
		}
	})
	return s, nil
}

func (s *server) waitExit() <-chan error {
	ch := make(chan error, 1)
	go func() {
		select {
		case err := <-s.exit:
			s.exit <- err // keep it for later callers
			ch <- err
		case <-time.After(30 * time.Second):
			ch <- fmt.Errorf("timeout waiting for exit")
		}
	}()
	return ch
}

// kill9 kills the process as a crash would.
func (s *server) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	<-s.waitExit()
}

// obj is a decoded JSON object.
type obj = map[string]any

// call does a JSON request and decodes the answer.
func (s *server) call(method, path string, body any, headers ...string) (int, obj) {
	s.t.Helper()
	status, raw := s.raw(method, path, body, headers...)
	var out obj
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			s.t.Fatalf("%s %s: %d %s: %v", method, path, status, raw, err)
		}
	}
	return status, out
}

func (s *server) raw(method, path string, body any, headers ...string) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, s.URL+path, r)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// must asserts the status of a call and returns its body.
func (s *server) must(want int, method, path string, body any, headers ...string) obj {
	s.t.Helper()
	status, out := s.call(method, path, body, headers...)
	if status != want {
		s.t.Fatalf("%s %s: status %d, want %d: %v", method, path, status, want, out)
	}
	return out
}

func (s *server) agent(body obj) {
	s.t.Helper()
	s.must(201, "POST", "/v1/agents", body)
}

func (s *server) session(agent string) string {
	s.t.Helper()
	return s.must(201, "POST", "/v1/sessions", obj{"agent": agent})["id"].(string)
}

func message(text string) obj {
	return obj{"input": []obj{{"type": "message", "text": text}}}
}

// event is one SSE frame.
type event struct {
	ID   int64
	Type string
	Data obj
}

// stream opens an SSE request and sends frames on the returned channel
// until the stream ends; cancel drops the connection.
func (s *server) stream(method, path string, body any, headers ...string) (<-chan event, context.CancelFunc) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = bytes.NewReader(j)
	}
	req, _ := http.NewRequestWithContext(ctx, method, s.URL+path, r)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		s.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	ch := make(chan event, 1024)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		var ev event
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if ev.Type != "" {
					ch <- ev
				}
				ev = event{}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				ev.ID, _ = strconv.ParseInt(line[4:], 10, 64)
			case strings.HasPrefix(line, "event: "):
				ev.Type = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.Data)
			}
		}
	}()
	return ch, cancel
}

// collect reads frames until the channel closes or timeout.
func collect(t testing.TB, ch <-chan event) []event {
	t.Helper()
	var out []event
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("stream did not end; got %d events", len(out))
		}
	}
}

// until reads frames until done holds for what was read, failing the test
// if the stream ends or stalls first.
func until(t testing.TB, ch <-chan event, done func([]event) bool) []event {
	t.Helper()
	var out []event
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended early after %d events", len(out))
			}
			out = append(out, ev)
			if done(out) {
				return out
			}
		case <-timeout:
			t.Fatalf("stream stalled after %d events", len(out))
		}
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStatus polls a turn until it leaves running.
func (s *server) waitStatus(sid, tid string) obj {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		t := s.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil)
		if t["status"] != "running" {
			return t
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("turn %s still running", tid)
	return nil
}

func deltaText(evs []event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == "model.message.delta" {
			b.WriteString(ev.Data["data"].(obj)["delta"].(string))
		}
	}
	return b.String()
}

func assertIncreasing(t *testing.T, evs []event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if evs[i].ID <= evs[i-1].ID {
			t.Fatalf("event %d has seq %d after %d: gap-free resume must not repeat or reorder", i, evs[i].ID, evs[i-1].ID)
		}
	}
}
