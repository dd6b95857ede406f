// Package prototest runs the Forge HTTP server in-process (SQLite in a
// temporary directory, the engine with the scripted provider, httpapi with
// the given protocols mounted) for the protocol packages' tests.
package prototest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
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
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/forge.db")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("PROTOCOL_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	eng := engine.New(engine.Config{Store: st, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: logger, ToolCancelWait: 200 * time.Millisecond})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: st, Engine: eng, Logger: logger, Keys: keys, Protocols: protocols}).Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Close(ctx)
		_ = st.Close(ctx)
	})
	return &Stack{T: t, Store: st, Eng: eng, URL: srv.URL}
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
