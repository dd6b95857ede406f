package provider_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/internal/providertest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

func mustBuild(t *testing.T, yaml string, opts provider.Options) *provider.Registry {
	t.Helper()
	cfg, err := provider.ParseConfig("forge.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	r, err := provider.Build(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBuildFromConfig(t *testing.T) {
	t.Parallel()
	r := mustBuild(t, exampleConfig, provider.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-x"})})
	if got, want := r.Names(), []string{"claude", "local", "openai", "scripted", "test"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	for name, want := range map[string]bool{"openai": true, "local": true, "test": true, "scripted": true, "claude": false, "anthropic": false} {
		if r.Configured(name) != want {
			t.Errorf("Configured(%s) = %v", name, !want)
		}
	}
	_, _, err := r.Resolve("claude/claude-sonnet-4-5")
	if err == nil || !strings.Contains(err.Error(), `provider "claude" is not usable: environment variable WORK_ANTHROPIC_KEY (its api_key_env) is not set`) {
		t.Errorf("Resolve(claude/...) = %v", err)
	}
	var claude provider.ProviderInfo
	for _, p := range r.Providers() {
		if p.Name == "claude" {
			claude = p
		}
	}
	want := provider.ProviderInfo{Name: "claude", Kind: "anthropic", APIKeyEnv: "WORK_ANTHROPIC_KEY",
		Headers: []string{"Anthropic-Beta"}, Source: "config", Problem: claude.Problem}
	if !reflect.DeepEqual(claude, want) || claude.Problem == "" {
		t.Errorf("claude = %+v", claude)
	}
	// A scripted provider under another name.
	if _, id, err := r.Resolve("test/echo"); err != nil || id != "echo" {
		t.Errorf("Resolve(test/echo) = %q, %v", id, err)
	}
}

// A provider with a base_url gets no key unless api_key_env names one: the
// vendor key never goes to a local or third-party server.
func TestVendorKeyStaysWithVendor(t *testing.T) {
	t.Parallel()
	local, other := openaitest.New(t), openaitest.New(t)
	r := mustBuild(t, fmt.Sprintf(`
providers:
  - {name: local, kind: openai, base_url: %q}
  - {name: router, kind: openai, base_url: %q, api_key_env: ROUTER_KEY, headers: {X-Title: forge, X-Secret: "tok-${ROUTER_TAG}"}}
`, local.URL(), other.URL()), provider.Options{Getenv: env(map[string]string{
		"OPENAI_API_KEY": "sk-vendor", "ROUTER_KEY": "sk-router", "ROUTER_TAG": "abcdef"})})
	for _, name := range []string{"local/m", "router/m"} {
		if _, err := run(t.Context(), t, r, name); err != nil {
			t.Fatal(err)
		}
	}
	lreq, _ := local.LastRequest()
	if h := lreq.Header.Get("Authorization"); h != "" {
		t.Errorf("local server got Authorization %q", h)
	}
	oreq, _ := other.LastRequest()
	if h := oreq.Header; h.Get("Authorization") != "Bearer sk-router" || h.Get("X-Title") != "forge" || h.Get("X-Secret") != "tok-abcdef" {
		t.Errorf("router headers %v", h)
	}
	// The environment's openai provider exists beside them.
	if !r.Configured("openai") {
		t.Errorf("openai from OPENAI_API_KEY is missing")
	}
	for _, p := range r.Providers() {
		if p.Name == "router" && !reflect.DeepEqual(p.Headers, []string{"X-Secret", "X-Title"}) {
			t.Errorf("router headers listed as %q", p.Headers)
		}
	}
	cfg, _ := provider.ParseConfig("forge.yaml", []byte(`providers: [{name: a, kind: openai, headers: {X-Key: "${NOT_SET}"}}]`))
	r, err := provider.Build(cfg, provider.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-x"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Resolve("a/m"); err == nil || !strings.Contains(err.Error(), `provider "a" is not usable: header X-Key: environment variable NOT_SET is not set`) {
		t.Errorf("unset header variable: %v", err)
	}
}

func TestFileOverridesEnvironmentProvider(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetAPIKey("sk-file")
	r := mustBuild(t, fmt.Sprintf(`providers: [{name: openai, kind: openai, base_url: %q, api_key_env: MY_KEY}]`, srv.URL()),
		provider.Options{Getenv: env(map[string]string{"MY_KEY": "sk-file", "OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})})
	if _, err := run(t.Context(), t, r, "openai/gpt-4.1"); err != nil {
		t.Fatal(err)
	}
}

func TestBaseURLPasswordNotShown(t *testing.T) {
	t.Parallel()
	r := mustBuild(t, `providers: [{name: p, kind: openai, base_url: "https://user:hunter2-secret@proxy.example/v1"}]`, provider.Options{})
	b, _ := json.Marshal(r.Providers())
	if strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), "https://user:xxxxx@proxy.example/v1") {
		t.Errorf("providers: %s", b)
	}
	r = mustBuild(t, `providers: [{name: openai, kind: openai, base_url: "https://api.openai.com/v1/", api_key_env: K}]`,
		provider.Options{Getenv: env(map[string]string{"K": "sk-k"})})
	if ms := r.KnownModels(); len(ms) < 10 {
		t.Errorf("the official URL with a trailing slash lists %d models", len(ms))
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	r := mustBuild(t, strings.Replace(exampleConfig, "retry:\n", `  - id: openai/gpt-4o
    context_window: 64000
  - id: local/priced
    prices: {input: 1, output: 2}
retry:
`, 1), provider.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-x"})})
	p := func(in, out, cached, write float64) *provider.Prices {
		return &provider.Prices{Input: in, Output: out, CachedInput: cached, CacheWrite: write}
	}
	allInputs := []string{"text", "image", "pdf"}
	tests := []struct {
		name string
		want provider.ModelInfo
	}{
		{"openai/gpt-4.1-mini", provider.ModelInfo{ContextWindow: 1047576, MaxOutput: 32768, Prices: p(0.4, 1.6, 0.1, 0), InputModalities: allInputs, Source: "builtin"}},
		{"openai/gpt-4.1-mini-2025-04-14", provider.ModelInfo{ContextWindow: 1047576, MaxOutput: 32768, Prices: p(0.4, 1.6, 0.1, 0), InputModalities: allInputs, Source: "builtin"}},
		// The file's prices; the built-in window.
		{"openai/gpt-4.1", provider.ModelInfo{ContextWindow: 1047576, MaxOutput: 32768, Prices: p(2, 8, 0.5, 0), InputModalities: allInputs, Source: "config"}},
		// The file's window; the built-in prices; max output cut to the window.
		{"openai/gpt-4o", provider.ModelInfo{ContextWindow: 64000, MaxOutput: 16384, Prices: p(2.5, 10, 1.25, 0), InputModalities: allInputs, Source: "config"}},
		{"openai/my-fine-tune", provider.ModelInfo{ContextWindow: 128000, MaxOutput: 4096, Source: "default"}},
		{"local/qwen3:8b", provider.ModelInfo{ContextWindow: 40960, MaxOutput: 8192, Prices: p(0, 0, 0, 0), Source: "config"}},
		// No built-in price: cached input at the input price.
		{"local/priced", provider.ModelInfo{ContextWindow: 128000, MaxOutput: 4096, Prices: p(1, 2, 1, 0), Source: "config"}},
		// Built-ins follow the kind, whatever the provider's name.
		{"claude/claude-sonnet-4-5-20250929", provider.ModelInfo{ContextWindow: 200000, MaxOutput: 64000, Prices: p(3, 15, 0.3, 3.75), InputModalities: allInputs, Source: "builtin"}},
		{"claude/claude-sonnet-4-20250514", provider.ModelInfo{ContextWindow: 200000, MaxOutput: 64000, Prices: p(3, 15, 0.3, 3.75), InputModalities: allInputs, Source: "builtin"}},
		{"claude/claude-3-5-haiku-latest", provider.ModelInfo{ContextWindow: 200000, MaxOutput: 8192, Prices: p(0.8, 4, 0.08, 1), InputModalities: allInputs, Source: "builtin"}},
		{"test/echo", provider.ModelInfo{ContextWindow: 128000, MaxOutput: 4096, Prices: p(0, 0, 0, 0), Source: "builtin"}},
	}
	for _, tt := range tests {
		got, ok := r.Info(tt.name)
		want := tt.want
		want.ID = tt.name
		want.Provider, want.Model, _ = strings.Cut(tt.name, "/")
		if !ok || !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("Info(%q) = %s, %v\nwant %s", tt.name, g, ok, w)
		}
	}
	for _, name := range []string{"acme/x", "gpt-4.1", "openai/"} {
		if _, ok := r.Info(name); ok {
			t.Errorf("Info(%q) ok", name)
		}
	}
}

func TestKnownModels(t *testing.T) {
	t.Parallel()
	r := mustBuild(t, exampleConfig, provider.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-x"})})
	var ids []string
	for _, m := range r.KnownModels() {
		ids = append(ids, m.ID)
	}
	for _, want := range []string{"openai/gpt-4.1", "openai/o4-mini", "local/qwen3:8b", "scripted/echo", "test/echo"} {
		if !slices.Contains(ids, want) {
			t.Errorf("%s missing from %q", want, ids)
		}
	}
	for _, id := range ids {
		if strings.HasPrefix(id, "local/gpt") {
			t.Errorf("a compatible server lists vendor models: %s", id)
		}
		if strings.HasPrefix(id, "claude/") {
			t.Errorf("a provider without its key lists models: %s", id)
		}
	}
	if !slices.IsSorted(ids) {
		t.Errorf("not sorted: %q", ids)
	}
}

// TestKeysNeverShown runs calls that succeed, retry and fail with a server
// that echoes the key, and looks for the key in the log, the errors and
// the descriptions of the registry.
func TestKeysNeverShown(t *testing.T) {
	t.Parallel()
	const key = "sk-test-VERY-SECRET-0123456789"
	const header = "hdr-SECRET-987654"
	srv := openaitest.New(t)
	srv.SetAPIKey(key)
	echo := fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s (header %s)","type":"invalid_request_error"}}`, key, header)
	srv.Enqueue(
		openaitest.Text("fine"),
		openaitest.Status(429, ""), openaitest.Text("after a retry"),
		openaitest.Status(503, echo), openaitest.Status(401, echo),
	)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var s sleeps
	r := mustBuild(t, fmt.Sprintf(`providers: [{name: openai, kind: openai, base_url: %q, api_key_env: K, headers: {X-H: "${H}"}}]`, srv.URL()),
		provider.Options{Getenv: env(map[string]string{"K": key, "H": header}), Logger: log, Sleep: s.sleep})
	var shown bytes.Buffer
	for range 3 {
		out, err := run(t.Context(), t, r, "openai/gpt-4.1")
		fmt.Fprintln(&shown, out, err)
		if err != nil {
			fmt.Fprintf(&shown, "%#v\n", err)
		}
	}
	if !strings.Contains(shown.String(), "status 401: Incorrect API key provided: [redacted] (header [redacted])") {
		t.Errorf("the 401 did not come through scrubbed:\n%s", shown.String())
	}
	if !strings.Contains(logs.String(), "retrying") || !strings.Contains(logs.String(), "[redacted]") {
		t.Errorf("expected retry warnings in the log:\n%s", logs.String())
	}
	b, _ := json.Marshal(map[string]any{"providers": r.Providers(), "models": r.KnownModels()})
	shown.Write(b)
	fmt.Fprintf(&shown, "%+v %#v", r.Providers(), r)
	for _, secret := range []string{key, header} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows %s:\n%s", secret, logs.String())
		}
		if strings.Contains(shown.String(), secret) {
			t.Errorf("errors or descriptions show %s:\n%s", secret, shown.String())
		}
	}
	if n := len(srv.Requests()); n != 5 {
		t.Errorf("%d requests, want 5", n)
	}
}

// TestMaxTokensFieldFromConfig: a compatible server (any base_url but
// OpenAI's) receives model_params.max_tokens as max_tokens, which it reads;
// max_tokens_field overrides; OPENAI_BASE_URL alone picks the same default.
func TestMaxTokensFieldFromConfig(t *testing.T) {
	srv := openaitest.New(t)
	r := mustBuild(t, fmt.Sprintf(`
providers:
  - {name: ollama, kind: openai, base_url: %q}
  - {name: strict, kind: openai, base_url: %q, max_tokens_field: max_completion_tokens}
`, srv.URL(), srv.URL()), provider.Options{Getenv: env(map[string]string{"OPENAI_BASE_URL": srv.URL()})})
	limit := int64(12)
	for name, want := range map[string]string{"ollama/m": "max_tokens", "strict/m": "max_completion_tokens", "openai/m": "max_tokens"} {
		m, id, err := r.Resolve(name)
		if err != nil {
			t.Fatal(err)
		}
		req := userRequest("hello")
		req.Model, req.Params.MaxTokens = id, &limit
		for _, err := range m.Stream(t.Context(), req) {
			if err != nil {
				t.Fatal(err)
			}
		}
		last, _ := srv.LastRequest()
		var body map[string]json.RawMessage
		if err := json.Unmarshal(last.Body, &body); err != nil {
			t.Fatal(err)
		}
		other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[want]
		if string(body[want]) != "12" || body[other] != nil {
			t.Errorf("%s: body %s, want %s=12 only", name, last.Body, want)
		}
	}
}

// TestHTTPPoolFromConfig: http.max_idle_conns_per_host sizes the pool the
// providers share. With the default a provider from the file reuses the
// connections of 100 calls at once; with 10 kept idle, each later wave of
// 100 dials 90 again.
func TestHTTPPoolFromConfig(t *testing.T) {
	t.Parallel()
	req := &forge.ModelRequest{Model: "m", Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "Hello"}}}}}
	for _, c := range []struct {
		http     string
		min, max int64
	}{
		{"", 100, 110},
		{"http: {max_idle_conns_per_host: 10}", 100 + 2*90, 300},
	} {
		srv := openaitest.New(t)
		srv.RecordRequests(false)
		r := mustBuild(t, fmt.Sprintf("providers: [{name: local, kind: openai, base_url: %q}]\n%s", srv.URL(), c.http), provider.Options{})
		m, id, err := r.Resolve("local/m")
		if err != nil {
			t.Fatal(err)
		}
		req.Model = id
		providertest.Waves(t, m, srv, req, 100, 3)
		if n := srv.Connections(); n < c.min || n > c.max {
			t.Errorf("%q: 3 waves of 100 calls opened %d connections, want %d..%d", c.http, n, c.min, c.max)
		}
	}
}
