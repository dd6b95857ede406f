package provider_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestFromEnvNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"nothing", nil, []string{"scripted"}},
		{"key", map[string]string{"OPENAI_API_KEY": "sk-x"}, []string{"openai", "scripted"}},
		{"base url alone", map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}, []string{"openai", "scripted"}},
		{"blank", map[string]string{"OPENAI_API_KEY": "  "}, []string{"scripted"}},
		{"anthropic", map[string]string{"ANTHROPIC_API_KEY": "k"}, []string{"anthropic", "scripted"}},
		{"anthropic base url alone", map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}, []string{"anthropic", "scripted"}},
		{"both", map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, []string{"anthropic", "openai", "scripted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := provider.FromEnv(env(tt.env))
			if got := r.Names(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Names() = %q, want %q", got, tt.want)
			}
			if got, want := r.Configured("openai"), slices.Contains(tt.want, "openai"); got != want {
				t.Errorf("Configured(openai) = %v", got)
			}
			if !r.Configured("scripted") {
				t.Errorf("scripted is not configured")
			}
			if got, want := r.Configured("anthropic"), slices.Contains(tt.want, "anthropic"); got != want {
				t.Errorf("Configured(anthropic) = %v", got)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	r := provider.FromEnv(env(nil))
	r.Register("broken", func(model string) (forge.Model, error) { return nil, fmt.Errorf("no such model %q", model) })
	r.Register("picky", func(model string) (forge.Model, error) {
		return nil, forge.Errorf(forge.ErrNotFound, "model %q does not exist", model)
	})
	tests := []struct {
		name, model, msg string
		kind             error
	}{
		{"not provider/model", "gpt-4", `model "gpt-4" must be written provider/model, e.g. openai/gpt-4.1-mini`, forge.ErrInvalid},
		{"empty model", "openai/", `model "openai/" must be written provider/model, e.g. openai/gpt-4.1-mini`, forge.ErrInvalid},
		{"openai unconfigured", "openai/gpt-4.1-mini", `provider "openai" is not configured: set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server)`, forge.ErrInvalid},
		{"anthropic unconfigured", "anthropic/claude-sonnet-4-5", `provider "anthropic" is not configured: set ANTHROPIC_API_KEY`, forge.ErrInvalid},
		{"unknown", "acme/m1", `unknown model provider "acme" in "acme/m1" (configured providers: broken, picky, scripted)`, forge.ErrInvalid},
		{"factory error", "broken/x", `model "broken/x": no such model "x"`, forge.ErrInvalid},
		{"factory sentinel kept", "picky/x", `model "x" does not exist`, forge.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, id, err := r.Resolve(tt.model)
			if m != nil || id != "" || !errors.Is(err, tt.kind) || err.Error() != tt.msg {
				t.Errorf("Resolve(%q) = %v, %q, %v; want error %q", tt.model, m, id, err, tt.msg)
			}
		})
	}
	if _, _, err := provider.NewRegistry().Resolve("x/y"); err == nil || !strings.Contains(err.Error(), "configured providers: none") {
		t.Errorf("empty registry: %v", err)
	}
}

func TestResolveScripted(t *testing.T) {
	t.Parallel()
	m, id, err := provider.FromEnv(env(nil)).Resolve("scripted/echo")
	if err != nil || id != "echo" {
		t.Fatalf("Resolve = %v %q %v", m, id, err)
	}
	var text strings.Builder
	for ev, err := range m.Stream(t.Context(), &forge.ModelRequest{Model: id, Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "ping"}}}}}) {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(ev.Delta)
	}
	if text.String() != "echo: ping" {
		t.Errorf("text %q", text.String())
	}
}

// TestResolveOpenAI runs a model resolved from the environment against the
// fake, keyless and with a key; model ids with slashes pass verbatim.
func TestResolveOpenAI(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", "sk-test"} {
		t.Run(fmt.Sprintf("key=%q", key), func(t *testing.T) {
			srv := openaitest.New(t)
			srv.SetAPIKey(key)
			srv.Enqueue(openaitest.Text("hi"))
			r := provider.FromEnv(env(map[string]string{"OPENAI_BASE_URL": srv.URL(), "OPENAI_API_KEY": key}))
			m, id, err := r.Resolve("openai/meta-llama/Llama-3.1-8B-Instruct")
			if err != nil || id != "meta-llama/Llama-3.1-8B-Instruct" {
				t.Fatalf("Resolve: %q %v", id, err)
			}
			var text strings.Builder
			for ev, err := range m.Stream(t.Context(), &forge.ModelRequest{Model: id, Messages: []forge.ModelMessage{
				{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "hello"}}}}}) {
				if err != nil {
					t.Fatal(err)
				}
				text.WriteString(ev.Delta)
			}
			if text.String() != "hi" {
				t.Errorf("text %q", text.String())
			}
			if req, _ := srv.LastRequest(); req.Model != id {
				t.Errorf("model sent %q", req.Model)
			}
		})
	}
}

func TestRegistryImplementsModels(t *testing.T) {
	t.Parallel()
	var _ forge.Models = provider.NewRegistry()
	var zero provider.Registry
	zero.Register("x", func(string) (forge.Model, error) { return nil, nil })
	if _, _, err := zero.Resolve("x/y"); !errors.Is(err, forge.ErrInvalid) {
		t.Errorf("nil model: %v", err)
	}
}
