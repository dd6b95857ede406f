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
		{"openai unconfigured", "openai/gpt-4.1-mini", `provider "openai" is not configured: set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server); configured providers: broken, picky, scripted`, forge.ErrInvalid},
		{"anthropic unconfigured", "anthropic/claude-sonnet-4-5", `provider "anthropic" is not configured: set ANTHROPIC_API_KEY; configured providers: broken, picky, scripted`, forge.ErrInvalid},
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

// TestCheckModel: an agent's model is refused up front when its provider
// is not configured (naming it and what is), or not usable, or when its
// scripted script is invalid (naming the field); scripted/* is always
// there, and a valid script or a configured provider passes.
func TestCheckModel(t *testing.T) {
	t.Parallel()
	r := provider.FromEnv(env(map[string]string{"OPENAI_API_KEY": "sk-x"}))
	script := func(s string) forge.ModelParams { return forge.ModelParams{Script: []byte(s)} }
	tests := []struct {
		name, model string
		params      forge.ModelParams
		want        string // "" passes
	}{
		{"scripted echo", "scripted/echo", forge.ModelParams{}, ""},
		{"valid script", "scripted/x", script(`[{"text":"hi","chunk":2,"delay_ms":5}]`), ""},
		{"configured provider", "openai/gpt-4.1-mini", forge.ModelParams{}, ""},
		{"unconfigured known provider", "anthropic/claude-sonnet-4-5", forge.ModelParams{},
			`model: provider "anthropic" is not configured: set ANTHROPIC_API_KEY; configured providers: openai, scripted`},
		{"unknown provider", "acme/m1", forge.ModelParams{},
			`model: unknown model provider "acme" in "acme/m1" (configured providers: openai, scripted)`},
		{"negative chunk", "scripted/x", script(`[{"text":"hi"},{"text":"a","chunk":-1}]`),
			"model_params.script: step 1: chunk must not be negative"},
		{"huge delay", "scripted/x", script(`[{"text":"hi","delay_ms":1e12}]`), "delay_ms"},
		{"delay out of range", "scripted/x", script(`[{"text":"hi","delay_ms":700000}]`),
			"model_params.script: step 0: delay_ms must be between 0 and 600000"},
		{"unknown step field", "scripted/x", script(`[{"txt":"hi"}]`), `unknown field "txt"`},
		{"not an array", "scripted/x", script(`{"text":"hi"}`), "model_params.script: must be a JSON array of steps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.CheckModel(tt.model, tt.params)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckModel: %v", err)
			case tt.want != "" && (!errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckModel = %v, want an invalid_request containing %q", err, tt.want)
			}
		})
	}
	// A script given to another provider is not its business.
	if err := r.CheckModel("openai/gpt-4.1", script(`[{"chunk":-1}]`)); err != nil {
		t.Errorf("openai with a script: %v", err)
	}
}
