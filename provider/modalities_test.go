package provider_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider"
)

// TestInputModalities: built-in models take text, images and PDFs but the
// text-only ones; the config file's input_modalities wins; a model the
// server knows nothing about has none (every kind is accepted); an
// unknown kind in the file is refused.
func TestInputModalities(t *testing.T) {
	t.Parallel()
	r := mustBuild(t, `providers:
  - {name: local, kind: openai, base_url: "http://127.0.0.1:11434/v1"}
models:
  - id: local/llama3
    input_modalities: [text]
  - id: openai/gpt-4o
    input_modalities: [text, image]
`, provider.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-x"})})
	for name, want := range map[string][]string{
		"openai/gpt-4.1":          {"text", "image", "pdf"},
		"openai/o3-mini":          {"text"},
		"openai/o3-mini-20250131": {"text"},
		"openai/gpt-4o":           {"text", "image"},
		"local/llama3":            {"text"},
	} {
		got, ok := r.InputModalities(name)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("InputModalities(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, name := range []string{"openai/my-fine-tune", "local/other", "nope/x"} {
		if got, ok := r.InputModalities(name); ok {
			t.Errorf("InputModalities(%q) = %v for a model nothing is known of", name, got)
		}
	}
	_, err := provider.ParseConfig("forge.yaml", []byte(`models:
  - id: openai/gpt-4o
    input_modalities: [text, audio]
`))
	if err == nil || !strings.Contains(err.Error(), "input_modalities") {
		t.Fatalf("an unknown input kind: %v", err)
	}
}
