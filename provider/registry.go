// Package provider resolves "provider/model" names to forge.Models.
//
// A Registry holds the configured providers. Build makes the registry a
// server uses from a Config (a forge.yaml file, see Config) and the
// environment; FromEnv is Build without a file. Every model of a real
// provider is wrapped (see Wrap) with retries before the first output,
// first-byte and idle timeouts, and cost accounting; Info tells a model's
// context window, output limit and prices.
package provider

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/internal/wire"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/scripted"
)

// Factory returns the Model for a model id of its provider. Any id may be
// accepted and sent verbatim; an error should say what is wrong.
type Factory func(model string) (forge.Model, error)

// Registry implements forge.Models. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	providers map[string]*entry
}

// entry is one provider.
type entry struct {
	name, kind, baseURL string
	keyEnv              string   // the variable the key came from ("" none)
	keySet              bool     // a key was found
	headers             []string // configured header names (never values)
	source              string   // "config", "env", "builtin" or "custom"
	factory             Factory
	// problem, when set, makes Resolve fail with it (a key variable that
	// is not set, a kind this build lacks).
	problem string
	// wrap, when set, wraps every model (WrapOptions without Model and
	// Prices); nil returns models as the factory makes them.
	wrap *WrapOptions
	// models holds the config file's entries by model id.
	models map[string]ModelConfig
	// listBuiltins lists the built-in models of the kind in KnownModels
	// (the provider is the vendor's own API).
	listBuiltins bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{providers: map[string]*entry{}}
}

// Register adds (or replaces) the provider name. Its models are used as the
// factory makes them: no retries, timeouts or cost.
func (r *Registry) Register(name string, f func(model string) (forge.Model, error)) {
	r.add(&entry{name: name, kind: "custom", source: "custom", factory: f})
}

func (r *Registry) add(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.providers == nil {
		r.providers = map[string]*entry{}
	}
	r.providers[e.name] = e
}

func (r *Registry) get(name string) *entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.providers[name]
}

// Configured reports whether the provider name is registered and usable.
func (r *Registry) Configured(name string) bool {
	e := r.get(name)
	return e != nil && e.problem == ""
}

// Names lists the registered providers, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.providers))
	for n := range r.providers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// setup tells how to configure the providers Forge knows.
var setup = map[string]string{
	"openai":    "set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server)",
	"anthropic": "set ANTHROPIC_API_KEY",
}

// Resolve implements forge.Models: "openai/gpt-4.1-mini" gives the openai
// provider's Model and "gpt-4.1-mini". Errors wrap forge.ErrInvalid.
func (r *Registry) Resolve(name string) (forge.Model, string, error) {
	e, id, err := r.usable(name)
	if err != nil {
		return nil, "", err
	}
	m, err := e.factory(id)
	if err != nil {
		if forge.ErrorCode(err) != "internal" {
			return nil, "", err
		}
		return nil, "", forge.Errorf(forge.ErrInvalid, "model %q: %s", name, err)
	}
	if m == nil {
		return nil, "", forge.Errorf(forge.ErrInvalid, "model %q is not available", name)
	}
	if e.wrap != nil {
		o := *e.wrap
		o.Model = id
		info := e.info(id)
		o.Prices = info.Prices
		m = Wrap(m, o)
	}
	return m, id, nil
}

// usable returns the entry of name's provider and the model id, or why
// the provider cannot serve it: it is not registered (the error names the
// registered ones and, for a provider Forge knows, how to configure it),
// or it has a problem. Errors wrap forge.ErrInvalid.
func (r *Registry) usable(name string) (*entry, string, error) {
	prov, id, err := forge.SplitModel(name)
	if err != nil {
		return nil, "", err
	}
	e := r.get(prov)
	if e == nil {
		configured := strings.Join(r.Names(), ", ")
		if configured == "" {
			configured = "none"
		}
		if how, ok := setup[prov]; ok {
			return nil, "", forge.Errorf(forge.ErrInvalid, "provider %q is not configured: %s; configured providers: %s", prov, how, configured)
		}
		return nil, "", forge.Errorf(forge.ErrInvalid, "unknown model provider %q in %q (configured providers: %s)",
			prov, name, configured)
	}
	if e.problem != "" {
		return nil, "", forge.Errorf(forge.ErrInvalid, "provider %q is not usable: %s", prov, e.problem)
	}
	return e, id, nil
}

// CheckModel tells whether an agent may run on the model name with
// params: its provider is registered and usable, and, for a model that
// validates its parameters up front (a scripted model's script), they are
// valid. Errors wrap forge.ErrInvalid and name the field.
func (r *Registry) CheckModel(name string, params forge.ModelParams) error {
	e, id, err := r.usable(name)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	m, err := e.factory(id)
	if err != nil || m == nil {
		return forge.Errorf(forge.ErrInvalid, "model: %q is not available", name)
	}
	if c, ok := m.(interface{ CheckParams(forge.ModelParams) error }); ok {
		return c.CheckParams(params)
	}
	return nil
}

// Info returns the settings of a "provider/model" name: those of the config
// file, else the built-in ones, else the defaults (DefaultContextWindow,
// DefaultMaxOutput, no prices). ok is false when the name is malformed or
// its provider is not registered.
func (r *Registry) Info(name string) (ModelInfo, bool) {
	prov, id, err := forge.SplitModel(name)
	if err != nil {
		return ModelInfo{}, false
	}
	e := r.get(prov)
	if e == nil {
		return ModelInfo{}, false
	}
	return e.info(id), true
}

// Providers describes the registered providers, sorted by name.
func (r *Registry) Providers() []ProviderInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]ProviderInfo, 0, len(r.providers))
	for _, e := range r.providers {
		out = append(out, ProviderInfo{Name: e.name, Kind: e.kind, BaseURL: e.baseURL, APIKeyEnv: e.keyEnv,
			APIKeySet: e.keySet, Headers: slices.Clone(e.headers), Source: e.source, Problem: e.problem})
	}
	slices.SortFunc(out, func(a, b ProviderInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// KnownModels lists the models the registry has settings for, sorted by
// id: every model of the config file whose provider is usable, the
// built-in models of providers that are the vendor's own API (an
// OpenAI-compatible local server does not serve gpt-4.1), and
// scripted/echo.
func (r *Registry) KnownModels() []ModelInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []ModelInfo
	for _, e := range r.providers {
		if e.problem != "" {
			continue
		}
		ids := map[string]bool{}
		for id := range e.models {
			ids[id] = true
		}
		if e.listBuiltins {
			for _, id := range builtinIDs(e.kind) {
				ids[id] = true
			}
		}
		if e.kind == KindScripted {
			ids["echo"] = true
		}
		for id := range ids {
			out = append(out, e.info(id))
		}
	}
	slices.SortFunc(out, func(a, b ModelInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Options are what Build takes besides the Config.
type Options struct {
	// Getenv reads the environment (os.Getenv in production; nil: an
	// empty environment).
	Getenv func(string) string
	// Logger receives retry warnings (never a key). Nil discards.
	Logger *slog.Logger
	// Transport is the base HTTP transport of real providers; nil uses a
	// shared one.
	Transport http.RoundTripper
	// Sleep and Rand replace the backoff's timer and jitter (tests).
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

// FromEnv builds the registry of a server from its environment alone
// (getenv is os.Getenv in production): "scripted" always; "openai" when
// OPENAI_API_KEY or OPENAI_BASE_URL is set (a base URL alone serves keyless
// local compatible servers); "anthropic" when ANTHROPIC_API_KEY or
// ANTHROPIC_BASE_URL is set. It is Build without a config file.
func FromEnv(getenv func(string) string) *Registry {
	r, err := Build(nil, Options{Getenv: getenv})
	if err != nil {
		// Without a file there is nothing that can fail.
		panic(err)
	}
	return r
}

// Build returns the registry for cfg (as ParseConfig returns it; nil: no
// config file) and the environment; see Config for how the two combine. A
// provider whose key or header variable is not set is registered with a
// problem that Resolve reports and Providers shows (so one missing key
// does not stop a server that uses other providers). The error is for a
// Config that ParseConfig would have refused.
func Build(cfg *Config, o Options) (*Registry, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	base := o.Transport
	if base == nil {
		if to, set := cfg.HTTP.transport(); set {
			base = wire.NewTransport(to)
		} else {
			base = wire.DefaultTransport()
		}
	}
	globalPolicy := DefaultRetryPolicy()
	cfg.Retry.apply(&globalPolicy)

	models := map[string]map[string]ModelConfig{}
	for _, m := range cfg.Models {
		prov, id, err := forge.SplitModel(m.ID)
		if err != nil {
			return nil, err
		}
		if models[prov] == nil {
			models[prov] = map[string]ModelConfig{}
		}
		models[prov][id] = m
	}

	r := NewRegistry()
	wrapFor := func(name string, pol RetryPolicy, secrets []string, noRetry bool) *WrapOptions {
		return &WrapOptions{Provider: name, Policy: pol, NoRetry: noRetry, Secrets: secrets,
			Logger: o.Logger, Sleep: o.Sleep, Rand: o.Rand}
	}
	declared := map[string]bool{}
	for _, pc := range cfg.Providers {
		declared[pc.Name] = true
		pol := globalPolicy
		pc.Retry.apply(&pol)
		e := &entry{name: pc.Name, kind: pc.Kind, baseURL: displayURL(pc.BaseURL), source: "config",
			headers: headerNames(pc.Headers), models: models[pc.Name]}
		if pc.Kind == KindScripted {
			e.factory = scriptedFactory
			e.wrap = wrapFor(pc.Name, pol, nil, true)
			r.add(e)
			continue
		}
		header, secrets, err := expandHeaders(pc.Headers, getenv)
		if err != nil {
			e.problem = err.Error()
		}
		e.keyEnv = pc.APIKeyEnv
		if e.keyEnv == "" && pc.BaseURL == "" {
			e.keyEnv = conventionalKeyEnv[pc.Kind]
		}
		key := ""
		if e.keyEnv != "" {
			key = strings.TrimSpace(getenv(e.keyEnv))
			if key == "" && e.problem == "" {
				e.problem = fmt.Sprintf("environment variable %s (its api_key_env) is not set", e.keyEnv)
			}
		}
		e.keySet = key != ""
		e.listBuiltins = isOfficial(pc.Kind, pc.BaseURL)
		client := &http.Client{Transport: newTransport(base, header)}
		f, err := newFactory(pc.Kind, pc.Name, key, pc.BaseURL, pc.MaxTokensField, client)
		if err != nil && e.problem == "" {
			e.problem = err.Error()
		}
		e.factory = f
		e.wrap = wrapFor(pc.Name, pol, append(secrets, key), false)
		r.add(e)
	}

	// The conventional variables configure what the file does not declare.
	for _, kind := range []string{KindOpenAI, KindAnthropic} {
		if declared[kind] {
			continue
		}
		keyEnv, baseEnv := conventionalKeyEnv[kind], conventionalBaseEnv[kind]
		key, baseURL := strings.TrimSpace(getenv(keyEnv)), strings.TrimSpace(getenv(baseEnv))
		if key == "" && baseURL == "" {
			continue
		}
		e := &entry{name: kind, kind: kind, baseURL: displayURL(baseURL), source: "env", keySet: key != "", models: models[kind]}
		if key != "" {
			e.keyEnv = keyEnv
		}
		e.listBuiltins = isOfficial(kind, baseURL)
		client := &http.Client{Transport: newTransport(base, nil)}
		f, err := newFactory(kind, kind, key, baseURL, "", client)
		if err != nil {
			e.problem = err.Error()
		}
		e.factory = f
		e.wrap = wrapFor(kind, globalPolicy, []string{key}, false)
		r.add(e)
	}
	if !declared[KindScripted] {
		r.add(&entry{name: scripted.ProviderName, kind: KindScripted, source: "builtin", factory: scriptedFactory,
			models: models[scripted.ProviderName], wrap: wrapFor(scripted.ProviderName, globalPolicy, nil, true)})
	}
	return r, nil
}

var conventionalKeyEnv = map[string]string{
	KindOpenAI:          "OPENAI_API_KEY",
	KindOpenAIResponses: "OPENAI_API_KEY",
	KindAnthropic:       "ANTHROPIC_API_KEY",
}

var conventionalBaseEnv = map[string]string{
	KindOpenAI:    "OPENAI_BASE_URL",
	KindAnthropic: "ANTHROPIC_BASE_URL",
}

var officialBaseURL = map[string]string{
	KindOpenAI:          openai.DefaultBaseURL,
	KindOpenAIResponses: openai.DefaultBaseURL,
	KindAnthropic:       anthropic.DefaultBaseURL,
}

// isOfficial tells whether baseURL is the vendor's own API for kind.
func isOfficial(kind, baseURL string) bool {
	norm := func(u string) string {
		return strings.TrimSuffix(strings.TrimRight(strings.TrimSpace(u), "/"), "/v1")
	}
	return baseURL == "" || norm(baseURL) == norm(officialBaseURL[kind])
}

// displayURL is baseURL without the password it may carry.
func displayURL(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil || u.User == nil {
		return baseURL
	}
	return u.Redacted()
}

func scriptedFactory(model string) (forge.Model, error) { return scripted.New(model), nil }

// newFactory makes the model factory of a real provider. maxTokensField
// applies to KindOpenAI ("": by base URL). An error means the kind cannot
// be served by this build; the factory then reports it too.
func newFactory(kind, name, key, baseURL, maxTokensField string, client *http.Client) (Factory, error) {
	var f Factory
	switch kind {
	case KindOpenAI:
		p := openai.New(openai.Config{Name: name, APIKey: key, BaseURL: baseURL, HTTPClient: client, MaxTokensField: maxTokensField})
		f = func(model string) (forge.Model, error) { return p.Model(model), nil }
	case KindOpenAIResponses:
		p := openai.NewResponses(openai.Config{Name: name, APIKey: key, BaseURL: baseURL, HTTPClient: client})
		f = func(model string) (forge.Model, error) { return p.Model(model), nil }
	case KindAnthropic:
		p := anthropic.New(anthropic.Config{Name: name, APIKey: key, BaseURL: baseURL, HTTPClient: client})
		f = func(model string) (forge.Model, error) { return p.Model(model), nil }
	}
	if f == nil {
		err := fmt.Errorf("provider kind %s is not available in this build", kind)
		return func(string) (forge.Model, error) { return nil, err }, err
	}
	return f, nil
}

// InputModalities tells what kinds of input a model takes (the engine's
// InputModalities): ok is false when nothing is known of the model.
func (r *Registry) InputModalities(name string) ([]string, bool) {
	info, ok := r.Info(name)
	if !ok || info.InputModalities == nil {
		return nil, false
	}
	return info.InputModalities, true
}

// ContextWindow returns the context window of a "provider/model" name, as
// Info tells it. The engine type-asserts this method on forge.Models to
// know when to compact.
func (r *Registry) ContextWindow(name string) (int64, bool) {
	info, ok := r.Info(name)
	if !ok || info.ContextWindow <= 0 {
		return 0, false
	}
	return info.ContextWindow, true
}
