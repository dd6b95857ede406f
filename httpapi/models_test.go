package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider"
)

// The registry is the catalog forge serve gives the API.
var _ httpapi.ModelCatalog = (*provider.Registry)(nil)

func TestListModels(t *testing.T) {
	const key = "sk-live-DO-NOT-SHOW-42"
	cfg, err := provider.ParseConfig("forge.yaml", []byte(`
providers:
  - {name: openai, kind: openai, api_key_env: MY_OPENAI_KEY, headers: {OpenAI-Organization: org-1}}
  - {name: local, kind: openai, base_url: "http://127.0.0.1:11434/v1"}
models:
  - id: local/qwen3:8b
    context_window: 40960
    max_output: 8192
    prices: {input: 0, output: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := provider.Build(cfg, provider.Options{Getenv: func(k string) string {
		if k == "MY_OPENAI_KEY" {
			return key
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, func(c *httpapi.Config) {
		c.Models = reg
		c.Keys = map[string]string{"api-key": "t"}
	})
	if a := s.do(req{method: "GET", path: "/v1/models"}); a.status != 401 {
		t.Errorf("without a key: %s", a)
	}
	s.key = "api-key"
	var page struct {
		Data       []map[string]any `json:"data"`
		Providers  []map[string]any `json:"providers"`
		NextCursor *string          `json:"next_cursor"`
	}
	a := s.call("GET", "/v1/models", nil, 200, &page)
	if strings.Contains(string(a.body), key) {
		t.Fatalf("the answer shows the key: %s", a.body)
	}
	byID := map[string]map[string]any{}
	for _, m := range page.Data {
		byID[m["id"].(string)] = m
	}
	j := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if got := j(byID["local/qwen3:8b"]); got != `{"context_window":40960,"id":"local/qwen3:8b","max_output":8192,"model":"qwen3:8b","prices":{"cached_input":0,"input":0,"output":0},"provider":"local","source":"config"}` {
		t.Errorf("local/qwen3:8b = %s", got)
	}
	if got := j(byID["openai/gpt-4.1"]); got != `{"context_window":1047576,"id":"openai/gpt-4.1","input_modalities":["text","image","pdf"],"max_output":32768,"model":"gpt-4.1","prices":{"cached_input":0.5,"input":2,"output":8},"provider":"openai","source":"builtin"}` {
		t.Errorf("openai/gpt-4.1 = %s", got)
	}
	if byID["scripted/echo"] == nil || page.NextCursor != nil {
		t.Errorf("scripted/echo missing or a cursor: %s", a.body)
	}
	if got := j(page.Providers); got != `[{"api_key_set":false,"base_url":"http://127.0.0.1:11434/v1","kind":"openai","name":"local","source":"config"},`+
		`{"api_key_env":"MY_OPENAI_KEY","api_key_set":true,"headers":["Openai-Organization"],"kind":"openai","name":"openai","source":"config"},`+
		`{"api_key_set":false,"kind":"scripted","name":"scripted","source":"builtin"}]` {
		t.Errorf("providers = %s", got)
	}
}

func TestListModelsWithoutCatalog(t *testing.T) {
	s := newStack(t)
	a := s.call("GET", "/v1/models", nil, 200, nil)
	if got := strings.TrimSpace(string(a.body)); got != `{"data":[],"providers":[],"next_cursor":null}` {
		t.Errorf("got %s", got)
	}
}
