package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

func half() float64 { return 0.5 }

func TestRetryAfterThenSuccess(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetAPIKey("sk-test")
	srv.Enqueue(openaitest.Status(429, "").Header("Retry-After", "2"), openaitest.Text("hi", " there").Usage(10, 2))
	var s sleeps
	r := fakeRegistry(t, srv, "", provider.Options{Sleep: s.sleep, Rand: half})
	got, err := run(t.Context(), t, r, "openai/gpt-4.1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"text+", "text:hi", "text: there", "text-", "finish:stop cost=3.6e-05"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q\nwant   %q", got, want)
	}
	if w := s.get(); len(w) != 1 || w[0] != 2*time.Second {
		t.Errorf("waits %v, want [2s] (the Retry-After)", w)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

func TestRetryAfterMsAndCap(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(
		openaitest.Status(503, "").Header("Retry-After", "3600"),
		openaitest.Status(429, "").Header("Retry-After-Ms", "250"),
		openaitest.Text("ok"))
	var s sleeps
	r := fakeRegistry(t, srv, "max_retry_after: 45s", provider.Options{Sleep: s.sleep, Rand: half})
	if _, err := run(t.Context(), t, r, "openai/some-model"); err != nil {
		t.Fatal(err)
	}
	if w := s.get(); fmt.Sprint(w) != "[45s 250ms]" {
		t.Errorf("waits %v, want [45s 250ms]", w)
	}
}

func TestServerErrorsGiveUp(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Status(500, ""), openaitest.Status(502, ""),
		openaitest.Status(500, `{"error":{"message":"third time unlucky","type":"server_error"}}`),
		openaitest.Text("never served"))
	var s sleeps
	r := fakeRegistry(t, srv, "max_attempts: 3, base_delay: 1s", provider.Options{Sleep: s.sleep, Rand: half})
	got, err := run(t.Context(), t, r, "openai/gpt-4.1")
	if len(got) != 0 {
		t.Errorf("events %q before the error", got)
	}
	var me *forge.ModelError
	if !errors.As(err, &me) || me.StatusCode != 500 || !strings.Contains(me.Message, "third time unlucky") ||
		!strings.Contains(me.Message, "gave up after 3 attempts") {
		t.Fatalf("err = %#v, want the last ModelError (500, third time unlucky)", err)
	}
	// Full jitter at 0.5 of 1s then 2s.
	if w := s.get(); fmt.Sprint(w) != "[500ms 1s]" {
		t.Errorf("waits %v, want [500ms 1s]", w)
	}
	if n := len(srv.Requests()); n != 3 || srv.Pending() != 1 {
		t.Errorf("%d requests (%d pending), want 3", n, srv.Pending())
	}
}

func TestNotRetryable(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Status(400, ""), openaitest.Text("never served"))
	var s sleeps
	r := fakeRegistry(t, srv, "", provider.Options{Sleep: s.sleep})
	_, err := run(t.Context(), t, r, "openai/gpt-4.1")
	var me *forge.ModelError
	if !errors.As(err, &me) || me.StatusCode != 400 || me.Retryable || strings.Contains(me.Message, "gave up") {
		t.Fatalf("err = %v", err)
	}
	if len(s.get()) != 0 || len(srv.Requests()) != 1 {
		t.Errorf("retried a 400")
	}
}

func TestNoRetryAfterOutput(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a", "b", "c", "d").CutAfter(3), openaitest.Text("never served"))
	var s sleeps
	r := fakeRegistry(t, srv, "", provider.Options{Sleep: s.sleep})
	got, err := run(t.Context(), t, r, "openai/gpt-4.1")
	var me *forge.ModelError
	if !errors.As(err, &me) || !strings.Contains(me.Message, "interrupted") {
		t.Fatalf("err = %v, want the provider's interrupted-stream error", err)
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{"text+", "text:a", "text:b"}) {
		t.Errorf("events %q", got)
	}
	if len(s.get()) != 0 || len(srv.Requests()) != 1 {
		t.Errorf("retried after output: waits %v, %d requests", s.get(), len(srv.Requests()))
	}
}

func TestErrorEventBeforeOutputIsRetried(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a").ErrorAfter(0, "overloaded"), openaitest.Text("b"))
	var s sleeps
	r := fakeRegistry(t, srv, "", provider.Options{Sleep: s.sleep, Rand: half})
	got, err := run(t.Context(), t, r, "openai/gpt-4.1")
	if err != nil || len(got) < 3 || fmt.Sprint(got[:3]) != "[text+ text:b text-]" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestStallAfterOutput(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a", "b", "c").HangAfter(2), openaitest.Text("never served"))
	var s sleeps
	r := fakeRegistry(t, srv, "idle_timeout: 250ms", provider.Options{Sleep: s.sleep})
	start := time.Now()
	got, err := run(t.Context(), t, r, "openai/gpt-4.1")
	var me *forge.ModelError
	if !errors.As(err, &me) || me.Retryable || !strings.Contains(me.Message, "stalled: nothing received for 250ms") {
		t.Fatalf("err = %v, want a non-retryable stall error", err)
	}
	if fmt.Sprint(got) != "[text+ text:a]" {
		t.Errorf("events %q", got)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if len(srv.Requests()) != 1 {
		t.Errorf("%d requests", len(srv.Requests()))
	}
}

func TestStallBeforeOutputIsRetried(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	// The headers come, then nothing.
	srv.Enqueue(openaitest.Text("a").HangAfter(0), openaitest.Text("b"))
	var s sleeps
	r := fakeRegistry(t, srv, "idle_timeout: 250ms", provider.Options{Sleep: s.sleep, Rand: half})
	got, err := run(t.Context(), t, r, "openai/gpt-4.1")
	if err != nil || len(got) < 3 || fmt.Sprint(got[:3]) != "[text+ text:b text-]" {
		t.Fatalf("got %q, %v", got, err)
	}
	if len(srv.Requests()) != 2 || len(s.get()) != 1 {
		t.Errorf("%d requests, waits %v", len(srv.Requests()), s.get())
	}
}

func TestNoFirstByte(t *testing.T) {
	t.Parallel()
	// A server that accepts the request and never answers.
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hs.Close()
	defer close(release)
	cfg, err := provider.ParseConfig("", []byte(`
providers: [{name: slow, kind: openai, base_url: "`+hs.URL+`/v1"}]
retry: {first_byte_timeout: 250ms, max_attempts: 2}`))
	if err != nil {
		t.Fatal(err)
	}
	var s sleeps
	r, err := provider.Build(cfg, provider.Options{Sleep: s.sleep, Rand: half})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = run(t.Context(), t, r, "slow/m")
	var me *forge.ModelError
	if !errors.As(err, &me) || !me.Retryable || me.Provider != "slow" ||
		me.Message != "no response within 250ms (gave up after 2 attempts)" {
		t.Fatalf("err = %#v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("took %v, want about 2 x 250ms", d)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Status(429, "").Header("Retry-After", "30"))
	r := fakeRegistry(t, srv, "", provider.Options{}) // the real sleep
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := run(ctx, t, r, "openai/gpt-4.1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

func TestCancelDuringStream(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("a", "b").HangAfter(2))
	r := fakeRegistry(t, srv, "", provider.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	got, err := run(ctx, t, r, "openai/gpt-4.1")
	if !errors.Is(err, context.Canceled) || fmt.Sprint(got) != "[text+ text:a]" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestCostFromPrices(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("x").Tokens(openaitest.Tokens{Input: 1000, Cached: 400, Output: 200, Reasoning: 50}))
	srv.Enqueue(openaitest.Text("x").Tokens(openaitest.Tokens{Input: 1000, Cached: 400, Output: 200}))
	srv.Enqueue(openaitest.Text("x").Usage(1000, 1000))
	r := fakeRegistry(t, srv, "", provider.Options{})
	// gpt-4.1: 600 x $2 + 400 x $0.50 + 200 x $8 per million.
	for _, tc := range []struct{ model, want string }{
		{"openai/gpt-4.1-2025-04-14", "finish:stop cost=0.003"},
		{"openai/gpt-4.1", "finish:stop cost=0.003"},
		{"openai/unknown-model", "finish:stop cost=0"},
	} {
		got, err := run(t.Context(), t, r, tc.model)
		if err != nil || got[len(got)-1] != tc.want {
			t.Errorf("%s: %q, %v; want %s", tc.model, got, err, tc.want)
		}
	}
}

// The openai-responses kind goes through the same wrapper and transport.
func TestResponsesKind(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetAPIKey("sk-test")
	srv.Enqueue(openaitest.Status(429, "").Header("Retry-After", "3"),
		openaitest.Text("via", " responses").Tokens(openaitest.Tokens{Input: 1000, Cached: 400, Output: 200}))
	var s sleeps
	r := mustBuild(t, fmt.Sprintf(`providers: [{name: oai, kind: openai-responses, base_url: %q, api_key_env: K, headers: {X-Extra: "yes"}}]`, srv.URL()),
		provider.Options{Getenv: env(map[string]string{"K": "sk-test"}), Sleep: s.sleep})
	got, err := run(t.Context(), t, r, "oai/gpt-4.1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "[text+ text:via text: responses text- finish:stop cost=0.003]"; fmt.Sprint(got) != want {
		t.Errorf("events %q, want %s", got, want)
	}
	if w := s.get(); fmt.Sprint(w) != "[3s]" {
		t.Errorf("waits %v", w)
	}
	reqs := srv.ResponsesRequests()
	if len(reqs) != 2 || reqs[1].Header.Get("X-Extra") != "yes" {
		t.Errorf("%d responses requests", len(reqs))
	}
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

// Anthropic usage reaches the wrapper with InputTokens as the whole prompt
// (input_tokens + cache reads + cache writes), as OpenAI's does, and the cost
// needs no per-kind adjustment: cache reads at the cached price, cache
// writes at the cache-write price, the rest at the input price.
func TestAnthropicUsageAndCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		tokens anthropictest.Tokens
		usage  forge.Usage
		cost   float64
	}{
		// 1000 x $3 + 8000 x $0.30 + 1000 x $3.75 + 500 x $15 per million.
		{"read and write", anthropictest.Tokens{Input: 1000, CacheRead: 8000, CacheWrite: 1000, Output: 500},
			forge.Usage{InputTokens: 10000, CacheReadTokens: 8000, CacheWriteTokens: 1000, OutputTokens: 500}, 0.01665},
		// 200 x $3 + 12000 x $0.30 + 40 x $15.
		{"read only", anthropictest.Tokens{Input: 200, CacheRead: 12000, Output: 40},
			forge.Usage{InputTokens: 12200, CacheReadTokens: 12000, OutputTokens: 40}, 0.0048},
		// 50 x $3 + 4000 x $3.75 + 200 x $15.
		{"write only", anthropictest.Tokens{Input: 50, CacheWrite: 4000, Output: 200},
			forge.Usage{InputTokens: 4050, CacheWriteTokens: 4000, OutputTokens: 200}, 0.01815},
		// 1000 x $3 + 500 x $15.
		{"no cache", anthropictest.Tokens{Input: 1000, Output: 500},
			forge.Usage{InputTokens: 1000, OutputTokens: 500}, 0.0105},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := anthropictest.New(t)
			srv.Enqueue(anthropictest.Text("ok").Tokens(tt.tokens))
			r, err := provider.Build(nil, provider.Options{
				Getenv: env(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": srv.URL()})})
			if err != nil {
				t.Fatal(err)
			}
			m, id, err := r.Resolve("anthropic/claude-sonnet-4-5")
			if err != nil {
				t.Fatal(err)
			}
			req := userRequest("hello")
			req.Model = id
			var finish *forge.Finish
			for ev, err := range m.Stream(t.Context(), req) {
				if err != nil {
					t.Fatal(err)
				}
				if ev.Type == forge.FinishEvent {
					finish = ev.Finish
				}
			}
			if finish == nil {
				t.Fatal("no finish event")
			}
			want := tt.usage
			want.Cost = tt.cost
			if finish.Usage != want {
				t.Errorf("usage %+v, want %+v", finish.Usage, want)
			}
		})
	}
}
