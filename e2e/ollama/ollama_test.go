// Package ollama runs Forge's OpenAI provider, as the registry builds it
// from a forge.yaml, against a real OpenAI-compatible server: Ollama
// (llama.cpp inside) serving a tiny random-weight model this test writes.
//
// It needs an ollama binary: FORGE_OLLAMA_BIN names it (.ci/run builds
// v0.11.4 with `go install github.com/ollama/ollama@v0.11.4`, the last
// version whose module zip builds). Without it the tests are skipped.
package ollama

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
)

// BinEnv names the variable holding the ollama binary's path.
const BinEnv = "FORGE_OLLAMA_BIN"

// The models the server holds: a random one that never stops by itself
// (num_predict bounds it), and one that repeats a single token.
const (
	randomModel = "forge-tiny"
	loopModel   = "forge-loop"
	numPredict  = 64 // the models' own limit, when the request sets none
)

var server struct {
	once    sync.Once
	baseURL string // http://127.0.0.1:port
	err     error
	logs    *syncBuffer
	cmd     *exec.Cmd
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.cmd != nil {
		// SIGTERM lets the server stop (and reap) the runners it started;
		// then whatever is left of its process group is killed.
		done := make(chan struct{})
		go func() { _ = server.cmd.Wait(); close(done) }()
		_ = server.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-server.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if server.baseURL != "" {
		os.RemoveAll(server.logs.dir)
	}
	os.Exit(code)
}

type syncBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	dir string
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

// ollama starts the server once for the package (loading a model is what
// takes time) and returns its root URL.
func ollama(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Skipf("%s is not set: no ollama binary to test against (see the package doc)", BinEnv)
	}
	server.once.Do(func() { server.err = start(bin) })
	if server.err != nil {
		t.Fatalf("ollama: %v\n%s", server.err, server.logs.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ollama log:\n%s", server.logs.String())
		}
	})
	return server.baseURL
}

func start(bin string) error {
	dir, err := os.MkdirTemp("", "forge-ollama")
	if err != nil {
		return err
	}
	server.logs = &syncBuffer{dir: dir}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"OLLAMA_HOST=" + addr,
		"OLLAMA_MODELS=" + filepath.Join(dir, "models"),
		"OLLAMA_NUM_PARALLEL=1",
		"OLLAMA_MAX_LOADED_MODELS=2",
		"OLLAMA_KEEP_ALIVE=10m",
		"OLLAMA_NOPRUNE=1",
	}
	cmd.Stdout, cmd.Stderr = server.logs, server.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	server.cmd = cmd
	server.baseURL = "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := http.Get(server.baseURL + "/")
		if err == nil {
			res.Body.Close()
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answering on %s", addr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, m := range []struct {
		name string
		spec tinyModel
	}{
		{randomModel, tinyModel{embd: 64, layers: 2, heads: 4, ff: 128, ctx: 2048, seed: 7}},
		{loopModel, tinyModel{embd: 64, layers: 1, heads: 4, ff: 128, ctx: 2048, loop: true}},
	} {
		path := filepath.Join(dir, m.name+".gguf")
		if err := m.spec.write(path); err != nil {
			return err
		}
		if err := create(ctx, m.name, path); err != nil {
			return fmt.Errorf("creating %s: %w", m.name, err)
		}
	}
	return nil
}

// create uploads a GGUF file as a blob and creates a model from it, as
// `ollama create` does.
func create(ctx context.Context, name, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if err := post(ctx, "/api/blobs/"+digest, "application/octet-stream", data); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{
		"model":      name,
		"files":      map[string]string{"model.gguf": digest},
		"template":   "{{ if .System }}{{ .System }}\n{{ end }}{{ .Prompt }}",
		"parameters": map[string]any{"num_predict": numPredict, "num_ctx": 2048},
		"stream":     false,
	})
	return post(ctx, "/api/create", "application/json", body)
}

func post(ctx context.Context, path, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, "POST", server.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s: %s: %s", path, res.Status, b)
	}
	return nil
}

// registry is what forge serve builds from a forge.yaml declaring the
// server as a provider named "ollama" (plus extra provider settings).
func registry(t *testing.T, extra string) *provider.Registry {
	t.Helper()
	cfg, err := provider.ParseConfig("forge.yaml", []byte(fmt.Sprintf(`
providers:
  - name: ollama
    kind: openai
    base_url: %s/v1
%s
retry: {max_attempts: 1}
`, ollama(t), extra)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := provider.Build(cfg, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type result struct {
	text   string
	deltas int
	finish *forge.Finish
	err    error
}

// stream calls model with a user message; stop, when set, is called on
// every text delta and cancels the call when it returns true.
func stream(ctx context.Context, t *testing.T, r *provider.Registry, model string, maxTokens int64, stop func(deltas int) bool) result {
	t.Helper()
	m, id, err := r.Resolve(model)
	if err != nil {
		t.Fatal(err)
	}
	req := &forge.ModelRequest{Model: id, Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Say something."}}},
	}}
	if maxTokens > 0 {
		req.Params.MaxTokens = &maxTokens
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var res result
	var text strings.Builder
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			res.err = err
			break
		}
		switch ev.Type {
		case forge.TextDelta:
			text.WriteString(ev.Delta)
			res.deltas++
			if stop != nil && stop(res.deltas) {
				cancel()
			}
		case forge.FinishEvent:
			res.finish = ev.Finish
		}
	}
	res.text = text.String()
	return res
}

// TestMaxTokensHonoured: model_params.max_tokens is sent as max_tokens,
// which Ollama reads: a 12-token limit gives at most 12 tokens, ended as
// "length". Sent as max_completion_tokens (what OpenAI reads), Ollama
// ignores it and the model runs to its own limit: what Forge did before.
func TestMaxTokensHonoured(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := stream(ctx, t, registry(t, ""), "ollama/"+randomModel, 12, nil)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.finish == nil || res.finish.Reason != forge.FinishLength || res.finish.Usage.OutputTokens > 12 || res.finish.Usage.OutputTokens < 1 {
		t.Fatalf("finish %+v after %d deltas %q: want length with at most 12 output tokens", res.finish, res.deltas, res.text)
	}
	t.Logf("12-token limit: %d tokens, %q", res.finish.Usage.OutputTokens, res.text)

	res = stream(ctx, t, registry(t, "    max_tokens_field: max_completion_tokens"), "ollama/"+randomModel, 12, nil)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.finish == nil || res.finish.Usage.OutputTokens <= 12 {
		t.Fatalf("sent as max_completion_tokens, the limit was not ignored (finish %+v): the test cannot tell the fields apart", res.finish)
	}
	t.Logf("the same limit as max_completion_tokens: %d tokens (ignored)", res.finish.Usage.OutputTokens)
}

// TestStream: the reply arrives as many text deltas, then a finish with
// the usage Ollama reports.
func TestStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := stream(ctx, t, registry(t, ""), "ollama/"+randomModel, 40, nil)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.deltas < 10 || res.finish == nil || res.finish.Usage.InputTokens < 1 || res.finish.Usage.OutputTokens != 40 {
		t.Fatalf("%d deltas %q, finish %+v", res.deltas, res.text, res.finish)
	}
}

// TestCancel: cancelling mid-stream ends the call at once with the
// context's error, and the server serves the next call.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := registry(t, "")
	res := stream(ctx, t, r, "ollama/"+randomModel, 1500, func(deltas int) bool { return deltas == 3 })
	if !errors.Is(res.err, context.Canceled) || res.finish != nil {
		t.Fatalf("cancelled stream: err %v, finish %+v", res.err, res.finish)
	}
	if res.deltas > 100 {
		t.Fatalf("%d deltas after cancelling at 3: the call went on", res.deltas)
	}
	res = stream(ctx, t, r, "ollama/"+randomModel, 5, nil)
	if res.err != nil || res.finish == nil {
		t.Fatalf("the call after a cancel: %+v", res)
	}
}

// TestRepetitionCut: Ollama stops a model that repeats one token (31 times)
// by ending the stream without finish_reason, usage or [DONE]. The call
// fails, and the error says which server and model, and what was missing.
func TestRepetitionCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := stream(ctx, t, registry(t, ""), "ollama/"+loopModel, 200, nil)
	var me *forge.ModelError
	if !errors.As(res.err, &me) {
		t.Fatalf("err %v (%d deltas %q, finish %+v): want the cut stream's ModelError", res.err, res.deltas, res.text, res.finish)
	}
	want := fmt.Sprintf(`ollama: the stream from %s/v1 (model %q) ended before the response was complete: no finish_reason, usage or [DONE]; the server closed it`,
		server.baseURL, loopModel)
	if me.Error() != want {
		t.Fatalf("error %q\nwant  %q", me.Error(), want)
	}
	if !strings.HasPrefix(res.text, "aaaaaaaaaa") {
		t.Errorf("text before the cut %q", res.text)
	}
}
