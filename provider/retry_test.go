package provider_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// sleeps records the backoff waits instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) get() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func userRequest(text string) *forge.ModelRequest {
	return &forge.ModelRequest{Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: text}}}}}
}

// run streams name's model and renders its events ("text:a", "finish:stop
// cost=0.003", ...).
func run(ctx context.Context, t *testing.T, r *provider.Registry, name string) ([]string, error) {
	t.Helper()
	m, id, err := r.Resolve(name)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", name, err)
	}
	req := userRequest("hello")
	req.Model = id
	var out []string
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return out, err
		}
		switch ev.Type {
		case forge.TextStart:
			out = append(out, "text+")
		case forge.TextDelta:
			out = append(out, "text:"+ev.Delta)
		case forge.TextEnd:
			out = append(out, "text-")
		case forge.FinishEvent:
			out = append(out, fmt.Sprintf("finish:%s cost=%g", ev.Finish.Reason, ev.Finish.Usage.Cost))
		default:
			out = append(out, fmt.Sprintf("event(%d)", ev.Type))
		}
	}
	return out, nil
}

// fakeRegistry serves provider "openai" from srv with key "sk-test".
func fakeRegistry(t *testing.T, srv *openaitest.Server, retry string, opts provider.Options) *provider.Registry {
	t.Helper()
	cfg, err := provider.ParseConfig("forge.yaml", []byte(fmt.Sprintf(`
providers:
  - name: openai
    kind: openai
    base_url: %s
    api_key_env: TEST_OPENAI_KEY
retry: {%s}
`, srv.URL(), retry)))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Getenv == nil {
		opts.Getenv = env(map[string]string{"TEST_OPENAI_KEY": "sk-test"})
	}
	r, err := provider.Build(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The anthropic provider, configured from the environment, goes through the
// same wrapper; its InputTokens already includes the cache reads and writes
// the API counts apart from input_tokens, and the cost charges each part at
// its price.
func TestAnthropicFromEnv(t *testing.T) {
	t.Parallel()
	srv := anthropictest.New(t)
	srv.SetAPIKey("sk-ant-test")
	srv.Enqueue(anthropictest.Status(529, "").Header("Retry-After", "4"),
		anthropictest.Text("bonjour").Tokens(anthropictest.Tokens{Input: 1000, CacheRead: 8000, CacheWrite: 1000, Output: 500}))
	var s sleeps
	r, err := provider.Build(nil, provider.Options{Sleep: s.sleep,
		Getenv: env(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": srv.URL()})})
	if err != nil {
		t.Fatal(err)
	}
	got, err := run(t.Context(), t, r, "anthropic/claude-sonnet-4-5")
	if err != nil {
		t.Fatal(err)
	}
	// 1000 x $3 + 8000 x $0.30 + 1000 x $3.75 + 500 x $15 per million.
	if want := "[text+ text:bonjour text- finish:stop cost=0.01665]"; fmt.Sprint(got) != want {
		t.Errorf("events %q, want %s", got, want)
	}
	if w := s.get(); fmt.Sprint(w) != "[4s]" {
		t.Errorf("waits %v", w)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d requests", n)
	}
}

// Without prices in forge.yaml the cost comes from the built-in table: a
// dated model id has its base model's prices, an unknown model costs 0.
// (The conformance suite's Cost cases check configured prices for every
// provider.)
func TestCostFromBuiltinPrices(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetAPIKey("sk-test")
	r := fakeRegistry(t, srv, "", provider.Options{})
	// gpt-4.1: 600 x $2 + 400 x $0.50 + 200 x $8 per million.
	for _, tc := range []struct{ model, want string }{
		{"openai/gpt-4.1-2025-04-14", "finish:stop cost=0.003"},
		{"openai/gpt-4.1", "finish:stop cost=0.003"},
		{"openai/unknown-model", "finish:stop cost=0"},
	} {
		srv.Enqueue(openaitest.Text("x").Tokens(openaitest.Tokens{Input: 1000, Cached: 400, Output: 200, Reasoning: 50}))
		got, err := run(t.Context(), t, r, tc.model)
		if err != nil || len(got) == 0 || got[len(got)-1] != tc.want {
			t.Errorf("%s: %q, %v; want %s", tc.model, got, err, tc.want)
		}
	}
}
