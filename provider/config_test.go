package provider_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider"
)

const exampleConfig = `# forge.yaml
providers:
  - name: openai
    kind: openai
    api_key_env: OPENAI_API_KEY
  - name: local
    kind: openai
    base_url: http://127.0.0.1:11434/v1
  - name: claude
    kind: anthropic
    api_key_env: WORK_ANTHROPIC_KEY
    headers: {anthropic-beta: "context-1m-2025-08-07"}
    retry: {max_attempts: 6}
  - name: test
    kind: scripted
models:
  - id: local/qwen3:8b
    context_window: 40960
    max_output: 8192
    prices: {input: 0, output: 0}
  - id: openai/gpt-4.1
    prices: {input: 2, output: 8, cached_input: 0.5}
retry:
  max_attempts: 4
  first_byte_timeout: 90s
  idle_timeout: 0s
http:
  max_idle_conns_per_host: 2048
  idle_conn_timeout: 2m
`

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := provider.ParseConfig("forge.yaml", []byte(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 4 || len(cfg.Models) != 2 {
		t.Fatalf("%d providers, %d models", len(cfg.Providers), len(cfg.Models))
	}
	c := cfg.Providers[2]
	if c.Name != "claude" || c.Kind != provider.KindAnthropic || c.APIKeyEnv != "WORK_ANTHROPIC_KEY" ||
		c.Headers["anthropic-beta"] != "context-1m-2025-08-07" || *c.Retry.MaxAttempts != 6 {
		t.Errorf("claude: %+v", c)
	}
	m := cfg.Models[0]
	if m.ID != "local/qwen3:8b" || *m.ContextWindow != 40960 || *m.MaxOutput != 8192 || *m.Prices.Input != 0 || m.Prices.CachedInput != nil {
		t.Errorf("model: %+v", m)
	}
	if *cfg.Retry.FirstByteTimeout != 90*time.Second || *cfg.Retry.IdleTimeout != 0 {
		t.Errorf("retry: %+v", cfg.Retry)
	}
	if *cfg.HTTP.MaxIdleConnsPerHost != 2048 || *cfg.HTTP.IdleConnTimeout != 2*time.Minute {
		t.Errorf("http: %+v", cfg.HTTP)
	}
	for _, empty := range []string{"", "# nothing\n", "{}"} {
		if cfg, err := provider.ParseConfig("", []byte(empty)); err != nil || len(cfg.Providers) != 0 {
			t.Errorf("%q: %v", empty, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", "providers: []\nmodel: []\n",
			"f.yaml:2: field model not found at the top level (known: providers, models, retry, mcp, sandbox, http)"},
		{"typo in mcp", "mcp:\n  command: []\n", "f.yaml:2: field command not found in mcp (known: commands, other_commands"},
		{"typo in an mcp command", "mcp:\n  commands:\n    - name: a\n      command: [x]\n      sandboxed: false\n",
			"f.yaml:5: field sandboxed not found in an mcp command (known: name, command, prefix, env, sandbox, tenant_env, dir)"},
		{"mcp command without argv", "mcp:\n  commands:\n    - name: a\n", "f.yaml:3: mcp.commands[0].command: command is required"},
		{"mcp command without name", "mcp:\n  commands:\n    - command: [x]\n", "f.yaml:3: mcp.commands[0]: name is required"},
		{"mcp duplicate command", "mcp:\n  commands:\n    - {name: a, command: [x, y]}\n    - {name: b, command: [x, y]}\n",
			"f.yaml:4: mcp.commands[1].command: the same command as mcp.commands[0] (a)"},
		{"tenant_env on a sandboxed command", "mcp:\n  commands:\n    - name: a\n      command: [x]\n      tenant_env: [A]\n",
			"f.yaml:5: mcp.commands[0].tenant_env: only a host command (sandbox: false) takes tenant_env"},
		{"relative dir", "mcp:\n  commands:\n    - {name: a, command: [x], sandbox: false, dir: srv}\n",
			`f.yaml:3: mcp.commands[0].dir: "srv" must be an absolute path`},
		{"bad env name", "mcp:\n  commands:\n    - {name: a, command: [x], env: {'A B': x}}\n", `mcp.commands[0].env: "A B" is not a variable name`},
		{"bad other_commands", "mcp:\n  other_commands: host\n", `f.yaml:2: mcp.other_commands: "host" is not sandbox or refuse`},
		{"relative read-only path", "sandbox:\n  read_only_paths: [opt/node]\n", `f.yaml:2: sandbox.read_only_paths[0]: "opt/node" must be an absolute path`},
		{"root read-only path", "sandbox:\n  read_only_paths: [/usr, /]\n", "sandbox.read_only_paths[1]: binding / would show the sandbox every host file"},
		{"typo in http", "http:\n  max_idle_conns: 10\n",
			"f.yaml:2: field max_idle_conns not found in http (known: max_idle_conns_per_host, idle_conn_timeout)"},
		{"no idle connections", "http:\n  max_idle_conns_per_host: 0\n",
			"f.yaml:2: http.max_idle_conns_per_host: 0 is not a number of connections from 1 to 100000"},
		{"too many idle connections", "http: {max_idle_conns_per_host: 1000000}\n",
			"f.yaml:1: http.max_idle_conns_per_host: 1000000 is not a number of connections from 1 to 100000"},
		{"short idle timeout", "http:\n  idle_conn_timeout: 10ms\n",
			"f.yaml:2: http.idle_conn_timeout: 10ms is not a duration from 1s to 1h"},
		{"typo in a provider", "providers:\n  - name: a\n    kind: openai\n    base_ur1: http://x\n",
			"f.yaml:4: field base_ur1 not found in a provider (known: name, kind, base_url, api_key_env, headers, retry, max_tokens_field)"},
		{"bad max_tokens_field", "providers:\n  - name: a\n    kind: openai\n    max_tokens_field: max_output_tokens\n",
			`f.yaml:4: providers[0].max_tokens_field: "max_output_tokens" is not max_completion_tokens or max_tokens`},
		{"max_tokens_field on another kind", "providers:\n  - name: a\n    kind: anthropic\n    max_tokens_field: max_tokens\n",
			`f.yaml:4: providers[0].max_tokens_field: only a provider of kind openai (Chat Completions) takes max_tokens_field`},
		{"typo in prices", "models:\n  - id: openai/x\n    prices: {input: 1, ouput: 2}\n",
			"f.yaml:3: field ouput not found in prices"},
		{"typo in retry", "retry:\n  max_attempt: 3\n", "f.yaml:2: field max_attempt not found in retry"},
		{"wrong type", "models:\n  - id: openai/x\n    context_window: lots\n", "f.yaml:3: cannot unmarshal !!str `lots` into int64"},
		{"duration without unit", "retry: {idle_timeout: 60}\n", "f.yaml:1: cannot unmarshal !!int `60` into time.Duration"},
		{"syntax", "a: b\n  c: d\n", "f.yaml:2: mapping values are not allowed in this context"},
		{"key in the file", "providers:\n  - name: a\n    kind: openai\n    api_key: sk-live-123\n",
			"f.yaml:4: providers[0].api_key: keys are not written in the config file: put the key in an environment variable and name that variable in api_key_env"},
		{"key instead of a variable name", "providers:\n  - name: a\n    kind: openai\n    api_key_env: sk-live-123\n",
			"f.yaml:4: providers[0].api_key_env: must be the name of an environment variable (letters, digits and '_'), not a key"},
		{"missing kind", "providers:\n  - name: a\n", "f.yaml:2: providers[0]: kind is required"},
		{"bad kind", "providers:\n  - name: a\n    kind: gemini\n",
			`f.yaml:3: providers[0].kind: unknown kind "gemini" (one of openai, openai-responses, anthropic, scripted)`},
		{"bad name", "providers:\n  - {name: a/b, kind: openai}\n", `f.yaml:2: providers[0].name: "a/b" is not a valid provider name`},
		{"duplicate provider", "providers:\n  - {name: a, kind: openai}\n  - {name: a, kind: openai}\n",
			`f.yaml:3: providers[1].name: provider "a" is declared twice`},
		{"bad base url", "providers:\n  - {name: a, kind: openai, base_url: 'localhost:8080'}\n",
			`f.yaml:2: providers[0].base_url: "localhost:8080" is not an http(s) URL`},
		{"scripted with a url", "providers:\n  - {name: s, kind: scripted, base_url: 'http://x'}\n",
			"f.yaml:2: providers[0]: a scripted provider takes no base_url"},
		{"bad header", "providers:\n  - {name: a, kind: openai, headers: {'bad header': x}}\n", `providers[0].headers: "bad header" is not a valid header name`},
		{"model of an undeclared provider", "models:\n  - id: acme/m1\n",
			`f.yaml:2: models[0].id: provider "acme" is not declared under providers`},
		{"model without provider", "models:\n  - id: gpt-4.1\n", `f.yaml:2: models[0].id: model "gpt-4.1" must be written provider/model`},
		{"duplicate model", "models:\n  - id: openai/a\n  - id: openai/a\n", `f.yaml:3: models[1].id: model "openai/a" is declared twice`},
		{"max output over window", "models:\n  - id: openai/a\n    context_window: 1000\n    max_output: 2000\n",
			"f.yaml:4: models[0].max_output: 2000 is more than the context window (1000)"},
		{"zero window", "models:\n  - id: openai/a\n    context_window: 0\n", "f.yaml:3: models[0].context_window: must be a positive number"},
		{"negative price", "models:\n  - id: openai/a\n    prices: {input: -1}\n", "f.yaml:3: models[0].prices: input must be a price >= 0"},
		{"zero attempts", "retry:\n  max_attempts: 0\n", "f.yaml:2: retry.max_attempts: must be between 1 and 20"},
		{"provider retry", "providers:\n  - name: a\n    kind: openai\n    retry: {base_delay: 0s}\n",
			"f.yaml:4: providers[0].retry: base_delay: must be a positive duration"},
		{"two documents", "providers: []\n---\nmodels: []\n", "f.yaml:2: a config file holds one YAML document"},
		{"duplicate key", "retry: {}\nretry: {}\n", `f.yaml:2: mapping key "retry" already defined at line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := provider.ParseConfig("f.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "sk-live-123") {
				t.Errorf("the error repeats the key: %v", err)
			}
		})
	}
}

func TestParseConfigMCPAndSandbox(t *testing.T) {
	t.Parallel()
	cfg, err := provider.ParseConfig("forge.yaml", []byte(`mcp:
  commands:
    - name: github
      command: [/usr/local/bin/github-mcp-server, stdio]
      env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${FORGE_TEST_GH}", MODE: "read-only"}
      sandbox: false
      tenant_env: [GITHUB_TOOLSETS]
      dir: /srv/github
    - name: node-tools
      command: [node, /srv/mcp/tools.js]
      prefix: true
  other_commands: refuse
  allow_private_urls: false
  allow_link_local_urls: true
sandbox:
  read_only_paths: [/srv/mcp/, /opt/node22]
`))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.MCP
	if len(m.Commands) != 2 || m.OtherCommands != provider.OtherCommandsRefuse || *m.AllowPrivateURLs || !*m.AllowLinkLocalURLs {
		t.Fatalf("mcp %+v", m)
	}
	gh, tools := m.Commands[0], m.Commands[1]
	if !gh.OnHost() || gh.Dir != "/srv/github" || gh.TenantEnv[0] != "GITHUB_TOOLSETS" || tools.OnHost() || !tools.Prefix {
		t.Errorf("commands %+v", m.Commands)
	}
	env, err := gh.ExpandEnv(func(k string) string { return map[string]string{"FORGE_TEST_GH": "ghp_x"}[k] })
	if err != nil || env["GITHUB_PERSONAL_ACCESS_TOKEN"] != "ghp_x" || env["MODE"] != "read-only" {
		t.Errorf("env %v %v", env, err)
	}
	if _, err := gh.ExpandEnv(func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "FORGE_TEST_GH is not set") {
		t.Errorf("unset variable: %v", err)
	}
	if got := cfg.Sandbox.ReadOnlyPaths; len(got) != 2 || got[0] != "/srv/mcp" {
		t.Errorf("read_only_paths %v", got)
	}
}

func TestParseConfigReportsEveryError(t *testing.T) {
	t.Parallel()
	_, err := provider.ParseConfig("f.yaml", []byte("providers:\n  - {name: a, kind: x}\n  - {name: b}\nmodels:\n  - id: c/d\n"))
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("want 3 errors, one per line: %v", err)
	}
}

func TestLoadConfigAndPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(path, []byte(exampleConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := provider.LoadConfig(path)
	if err != nil || cfg.Path != path || len(cfg.Providers) != 4 {
		t.Fatalf("LoadConfig: %v", err)
	}
	if _, err := provider.LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	e := env(map[string]string{"FORGE_CONFIG": "/etc/forge.yaml"})
	for _, tc := range []struct {
		flag   string
		getenv func(string) string
		want   string
	}{
		{"", nil, ""}, {"", env(nil), ""}, {"", e, "/etc/forge.yaml"}, {"./f.yaml", e, "./f.yaml"},
	} {
		if got := provider.ConfigPath(tc.flag, tc.getenv); got != tc.want {
			t.Errorf("ConfigPath(%q) = %q, want %q", tc.flag, got, tc.want)
		}
	}
}
