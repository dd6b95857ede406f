// Package provider resolves "provider/model" names to forge.Models.
//
// A Registry holds model factories by provider name; FromEnv builds the
// registry a server uses from the conventional environment variables.
package provider

import (
	"slices"
	"strings"
	"sync"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/scripted"
)

// Factory returns the Model for a model id of its provider. Any id may be
// accepted and sent verbatim; an error should say what is wrong.
type Factory func(model string) (forge.Model, error)

// Registry implements forge.Models. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]Factory{}}
}

// Register adds (or replaces) the provider name.
func (r *Registry) Register(name string, f func(model string) (forge.Model, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.factories == nil {
		r.factories = map[string]Factory{}
	}
	r.factories[name] = f
}

// Configured reports whether the provider name is registered.
func (r *Registry) Configured(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.factories[name] != nil
}

// Names lists the configured providers, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
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
	prov, id, err := forge.SplitModel(name)
	if err != nil {
		return nil, "", err
	}
	r.mu.RLock()
	f := r.factories[prov]
	r.mu.RUnlock()
	if f == nil {
		if how, ok := setup[prov]; ok {
			return nil, "", forge.Errorf(forge.ErrInvalid, "provider %q is not configured: %s", prov, how)
		}
		configured := strings.Join(r.Names(), ", ")
		if configured == "" {
			configured = "none"
		}
		return nil, "", forge.Errorf(forge.ErrInvalid, "unknown model provider %q in %q (configured providers: %s)",
			prov, name, configured)
	}
	m, err := f(id)
	if err != nil {
		if forge.ErrorCode(err) != "internal" {
			return nil, "", err
		}
		return nil, "", forge.Errorf(forge.ErrInvalid, "model %q: %s", name, err)
	}
	if m == nil {
		return nil, "", forge.Errorf(forge.ErrInvalid, "model %q is not available", name)
	}
	return m, id, nil
}

// FromEnv builds the registry of a server from its environment (getenv is
// os.Getenv in production): "scripted" always; "openai" when OPENAI_API_KEY
// or OPENAI_BASE_URL is set (a base URL alone serves keyless local
// compatible servers).
func FromEnv(getenv func(string) string) *Registry {
	r := NewRegistry()
	r.Register(scripted.ProviderName, func(model string) (forge.Model, error) {
		return scripted.New(model), nil
	})
	key, base := strings.TrimSpace(getenv("OPENAI_API_KEY")), strings.TrimSpace(getenv("OPENAI_BASE_URL"))
	if key != "" || base != "" {
		p := openai.New(openai.Config{Name: "openai", APIKey: key, BaseURL: base})
		r.Register("openai", func(model string) (forge.Model, error) {
			return p.Model(model), nil
		})
	}
	return r
}
