// Package prototest runs a Forge server in-process (server.New: SQLite in
// a temporary directory, the scripted provider, the given protocols
// mounted) for the protocol packages' tests.
package prototest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/sandbox"
	"github.com/forge-runtime/forge/server"
)

// Stack is a running in-process server.
type Stack struct {
	T     testing.TB
	Store forge.Store
	Eng   *engine.Engine
	URL   string
}

// New starts a stack serving protocols; t's cleanup stops it.
func New(t testing.TB, protocols ...httpapi.Protocol) *Stack {
	t.Helper()
	return NewWithKeys(t, nil, protocols...)
}

// NewWithKeys is New with API keys (key -> tenant).
func NewWithKeys(t testing.TB, keys map[string]string, protocols ...httpapi.Protocol) *Stack {
	t.Helper()
	return newStack(t, keys, nil, protocols)
}

// NewWithOpenAI is New with two providers beside the scripted one, both
// at baseURL (a loopback fake of the OpenAI API, openaitest): "fake"
// speaks Chat Completions, "fakeresp" the Responses API.
func NewWithOpenAI(t testing.TB, baseURL string, protocols ...httpapi.Protocol) *Stack {
	t.Helper()
	cfg, err := provider.ParseConfig("", []byte("providers:\n"+
		"  - {name: fake, kind: openai, base_url: \""+baseURL+"\", max_tokens_field: max_completion_tokens}\n"+
		"  - {name: fakeresp, kind: openai-responses, base_url: \""+baseURL+"\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return newStack(t, nil, cfg, protocols)
}

func newStack(t testing.TB, keys map[string]string, cfg *provider.Config, protocols []httpapi.Protocol) *Stack {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("PROTOCOL_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if protocols == nil {
		protocols = []httpapi.Protocol{}
	}
	// The scripted provider only: no variable of the environment names a
	// real one.
	models, err := provider.Build(cfg, provider.Options{Getenv: func(string) string { return "" }, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(ctx, server.Config{
		DB: t.TempDir() + "/forge.db", APIKeys: keys, Models: models, Logger: logger, Protocols: protocols,
		NoMetrics: true, Sandbox: sandbox.Options{UseBwrap: sandbox.BwrapOff},
		ScriptedQuota: &server.ScriptedQuota{}, // no quota in tests
		Tune:          func(c *engine.Config) { c.ToolCancelWait = 200 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	return &Stack{T: t, Store: srv.Store(), Eng: srv.Engine(), URL: "http://" + ln.Addr().String()}
}

// Do sends a request with a JSON body (when body is not "") and returns
// the status and the whole answer.
func (s *Stack) Do(method, path, body string, header ...string) (int, string) {
	s.T.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		s.T.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Agent creates an agent from its JSON definition.
func (s *Stack) Agent(def string) {
	s.T.Helper()
	if status, body := s.Do("POST", "/v1/agents", def); status != http.StatusCreated {
		s.T.Fatalf("creating agent: %d %s", status, body)
	}
}
