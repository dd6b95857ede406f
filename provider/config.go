package provider

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/wire"
	"github.com/forge-runtime/forge/provider/openai"
)

// Provider kinds: which wire protocol a provider speaks.
const (
	KindOpenAI          = "openai"           // OpenAI Chat Completions, and compatible servers
	KindOpenAIResponses = "openai-responses" // OpenAI Responses API
	KindAnthropic       = "anthropic"        // Anthropic Messages
	KindScripted        = "scripted"         // the deterministic scripted provider
)

var kinds = []string{KindOpenAI, KindOpenAIResponses, KindAnthropic, KindScripted}

// ConfigEnv names the environment variable holding the config file's path
// when no --config flag is given.
const ConfigEnv = "FORGE_CONFIG"

// ConfigPath is the config file to load: flag when set, else $FORGE_CONFIG,
// else "" (no file: providers come from the environment alone).
func ConfigPath(flag string, getenv func(string) string) string {
	if p := strings.TrimSpace(flag); p != "" {
		return p
	}
	if getenv == nil {
		return ""
	}
	return strings.TrimSpace(getenv(ConfigEnv))
}

// Config is a forge.yaml file: the model providers, settings of models, the
// retry policy of model calls, and the server's mcp and sandbox sections
// (MCPConfig, SandboxConfig). Decoding is strict: an unknown key, a
// wrong type or an invalid value is an error naming the file and line.
//
//	providers:
//	  - name: openai                  # models are named openai/<id>
//	    kind: openai                  # openai | openai-responses | anthropic | scripted
//	    api_key_env: OPENAI_API_KEY   # the NAME of the variable holding the key
//	  - name: local
//	    kind: openai
//	    base_url: http://127.0.0.1:11434/v1
//	    max_tokens_field: max_tokens  # the default for any base_url but OpenAI's
//	  - name: claude
//	    kind: anthropic
//	    api_key_env: WORK_ANTHROPIC_KEY
//	    headers: {anthropic-beta: "context-1m-2025-08-07"}
//	    retry: {max_attempts: 6}
//	models:
//	  - id: local/qwen3:8b
//	    context_window: 40960
//	    max_output: 8192
//	    prices: {input: 0, output: 0}
//	  - id: openai/gpt-4.1
//	    prices: {input: 2, output: 8, cached_input: 0.5}   # USD per million tokens
//	retry:
//	  max_attempts: 4
//	  first_byte_timeout: 60s
//	  idle_timeout: 60s
//	http:
//	  max_idle_conns_per_host: 1024   # idle connections kept to each model server
//	  idle_conn_timeout: 90s
//
// Keys are never written in the file: api_key_env names the environment
// variable that holds one. A provider without api_key_env whose base_url
// is empty (the vendor's own API) reads the conventional variable of its
// kind (OPENAI_API_KEY, ANTHROPIC_API_KEY); one with a base_url sends no key
// unless api_key_env says which (so a local server never receives the
// vendor key). Header values may contain ${NAME}, replaced by that
// environment variable (for secret headers); they are never shown.
//
// Providers named openai and anthropic that the file does not declare are
// still configured from OPENAI_API_KEY / OPENAI_BASE_URL and
// ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL, as without a file; scripted is
// always there.
//
// A model entry overrides, field by field, the built-in settings of that id
// (see builtinModels); an id without an entry or a built-in setting gets
// DefaultContextWindow and DefaultMaxOutput and no prices. Any model id
// under a configured provider is accepted and sent verbatim, declared or not.
type Config struct {
	Providers []ProviderConfig `yaml:"providers"`
	Models    []ModelConfig    `yaml:"models"`
	// Retry applies to every provider; a provider's own retry block
	// overrides it field by field.
	Retry RetryConfig `yaml:"retry"`
	// MCP says which MCP servers tenants' agents may use.
	MCP MCPConfig `yaml:"mcp"`
	// Sandbox configures the sandboxes of sessions.
	Sandbox SandboxConfig `yaml:"sandbox"`
	// HTTP sizes the pool of connections the providers share.
	HTTP HTTPConfig `yaml:"http"`

	// Path is the file it was read from ("" when built in code).
	Path string `yaml:"-"`
}

// ProviderConfig declares one provider.
type ProviderConfig struct {
	Name      string            `yaml:"name"`
	Kind      string            `yaml:"kind"`
	BaseURL   string            `yaml:"base_url"`
	APIKeyEnv string            `yaml:"api_key_env"`
	Headers   map[string]string `yaml:"headers"`
	Retry     *RetryConfig      `yaml:"retry"`
	// MaxTokensField (kind openai only) is the Chat Completions field
	// model_params.max_tokens is sent in: max_completion_tokens (what
	// OpenAI reads) or max_tokens (what compatible servers such as Ollama
	// read; they ignore the other). Default: max_completion_tokens for
	// OpenAI's own API, max_tokens for any other base_url.
	MaxTokensField string `yaml:"max_tokens_field"`
}

// ModelConfig gives the settings of one provider/model id. Absent fields
// keep the built-in (or default) value.
type ModelConfig struct {
	ID            string        `yaml:"id"`
	ContextWindow *int64        `yaml:"context_window"`
	MaxOutput     *int64        `yaml:"max_output"`
	Prices        *PricesConfig `yaml:"prices"`
	// InputModalities are the kinds of input the model takes: text,
	// image, pdf. A turn attaching another kind is refused
	// (unsupported_content).
	InputModalities []string `yaml:"input_modalities"`
}

// PricesConfig is a model's prices in US dollars per million tokens.
// Absent fields keep the built-in price; for a model with none, an absent
// cached_input is the input price and an absent cache_write is charged at
// the input price.
type PricesConfig struct {
	Input       *float64 `yaml:"input"`
	Output      *float64 `yaml:"output"`
	CachedInput *float64 `yaml:"cached_input"`
	CacheWrite  *float64 `yaml:"cache_write"`
}

func (pc *PricesConfig) apply(p *Prices, hasBase bool) {
	if pc.Input != nil {
		p.Input = *pc.Input
	}
	if pc.Output != nil {
		p.Output = *pc.Output
	}
	if pc.CachedInput != nil {
		p.CachedInput = *pc.CachedInput
	} else if !hasBase {
		p.CachedInput = p.Input
	}
	if pc.CacheWrite != nil {
		p.CacheWrite = *pc.CacheWrite
	}
}

// HTTPConfig sizes the connection pool of the model providers, one pool
// shared by all of them. A model call holds a connection for its whole
// stream over HTTP/1.1 (what local and compatible servers speak), so the
// pool keeps about one idle connection per session that may call a server
// at once; the default (1024) serves about 1,000 concurrent sessions
// without redialing.
type HTTPConfig struct {
	// MaxIdleConnsPerHost is how many idle connections to one server are
	// kept (1..100000).
	MaxIdleConnsPerHost *int `yaml:"max_idle_conns_per_host"`
	// IdleConnTimeout is how long an idle connection is kept (1s..1h).
	IdleConnTimeout *time.Duration `yaml:"idle_conn_timeout"`
}

// transport returns the options of the providers' transport and whether
// the file sets any.
func (h HTTPConfig) transport() (wire.TransportOptions, bool) {
	var o wire.TransportOptions
	if h.MaxIdleConnsPerHost != nil {
		o.MaxIdleConnsPerHost = *h.MaxIdleConnsPerHost
	}
	if h.IdleConnTimeout != nil {
		o.IdleConnTimeout = *h.IdleConnTimeout
	}
	return o, h.MaxIdleConnsPerHost != nil || h.IdleConnTimeout != nil
}

// RetryConfig is the retry policy of model calls (see RetryPolicy). Durations
// are written like 500ms, 60s, 2m; a timeout of 0s disables it.
type RetryConfig struct {
	MaxAttempts      *int           `yaml:"max_attempts"`
	BaseDelay        *time.Duration `yaml:"base_delay"`
	MaxDelay         *time.Duration `yaml:"max_delay"`
	MaxRetryAfter    *time.Duration `yaml:"max_retry_after"`
	FirstByteTimeout *time.Duration `yaml:"first_byte_timeout"`
	IdleTimeout      *time.Duration `yaml:"idle_timeout"`
}

// apply sets the fields rc gives on p.
func (rc *RetryConfig) apply(p *RetryPolicy) {
	if rc == nil {
		return
	}
	if rc.MaxAttempts != nil {
		p.MaxAttempts = *rc.MaxAttempts
	}
	if rc.BaseDelay != nil {
		p.BaseDelay = *rc.BaseDelay
	}
	if rc.MaxDelay != nil {
		p.MaxDelay = *rc.MaxDelay
	}
	if rc.MaxRetryAfter != nil {
		p.MaxRetryAfter = *rc.MaxRetryAfter
	}
	disabled := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	if rc.FirstByteTimeout != nil {
		p.FirstByteTimeout = disabled(*rc.FirstByteTimeout)
	}
	if rc.IdleTimeout != nil {
		p.IdleTimeout = disabled(*rc.IdleTimeout)
	}
}

// LoadConfig reads and validates the config file at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes and validates a config file's content; name is used
// in error messages.
func ParseConfig(name string, data []byte) (*Config, error) {
	if name == "" {
		name = "forge.yaml"
	}
	cfg := &Config{Path: name}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(name, err)
	}
	if len(root.Content) == 0 {
		return cfg, nil // empty file
	}
	if err := checkSecrets(name, &root); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: a config file holds one YAML document", name, extra.Line)
	}
	cfg.Path = name
	v := validator{file: name, root: root.Content[0]}
	v.config(cfg)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	return cfg, nil
}

var (
	yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	yamlTypeRE = regexp.MustCompile(` in type provider\.(\w+)`)
)

// yamlError turns the YAML library's errors into "file:line: message".
func yamlError(file string, err error) error {
	var lines []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines = te.Errors
	} else {
		lines = []string{err.Error()}
	}
	var errs []error
	for _, l := range lines {
		l = yamlTypeRE.ReplaceAllStringFunc(l, func(m string) string {
			switch yamlTypeRE.FindStringSubmatch(m)[1] {
			case "Config":
				return " at the top level (known: providers, models, retry, mcp, sandbox, http)"
			case "MCPConfig":
				return " in mcp (known: commands, other_commands, allow_private_urls, allow_link_local_urls)"
			case "MCPCommandConfig":
				return " in an mcp command (known: name, command, prefix, env, sandbox, tenant_env, dir)"
			case "SandboxConfig":
				return " in sandbox (known: read_only_paths)"
			case "HTTPConfig":
				return " in http (known: max_idle_conns_per_host, idle_conn_timeout)"
			case "ProviderConfig":
				return " in a provider (known: name, kind, base_url, api_key_env, headers, retry, max_tokens_field)"
			case "ModelConfig":
				return " in a model (known: id, context_window, max_output, prices, input_modalities)"
			case "PricesConfig":
				return " in prices (known: input, output, cached_input, cache_write)"
			case "RetryConfig":
				return " in retry (known: max_attempts, base_delay, max_delay, max_retry_after, first_byte_timeout, idle_timeout)"
			}
			return m
		})
		if m := yamlLineRE.FindStringSubmatch(l); m != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", file, m[1], m[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", file, strings.TrimPrefix(l, "yaml: ")))
		}
	}
	return errors.Join(errs...)
}

// checkSecrets refuses a key written into the file, before decoding (whose
// error would otherwise be a bare "unknown field").
func checkSecrets(file string, root *yaml.Node) error {
	provs := lookup(root.Content[0], "providers")
	if provs == nil || provs.Kind != yaml.SequenceNode {
		return nil
	}
	for i, p := range provs.Content {
		if p.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(p.Content); j += 2 {
			switch k := p.Content[j]; k.Value {
			case "api_key", "apikey", "key", "token", "secret":
				return fmt.Errorf("%s:%d: providers[%d].%s: keys are not written in the config file: put the key in an environment variable and name that variable in api_key_env",
					file, k.Line, i, k.Value)
			}
		}
	}
	return nil
}

// lookup returns the value of key in mapping node n, or nil.
func lookup(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// validator checks a decoded Config, locating errors with the node tree.
type validator struct {
	file string
	root *yaml.Node
	errs []error
}

// at reports an error about section[i].field (field "" is the entry).
func (v *validator) at(section string, i int, field, format string, args ...any) {
	line := 0
	if s := lookup(v.root, section); s != nil && s.Kind == yaml.SequenceNode && i < len(s.Content) {
		e := s.Content[i]
		line = e.Line
		if f := lookup(e, field); f != nil {
			line = f.Line
		}
	}
	where := fmt.Sprintf("%s[%d]", section, i)
	if field != "" {
		where += "." + field
	}
	v.errs = append(v.errs, fmt.Errorf("%s:%d: %s: %s", v.file, line, where, fmt.Sprintf(format, args...)))
}

var (
	providerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	envNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	envRefRE       = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// implicitProviders may be referenced by models without being declared:
// the environment can configure them.
var implicitProviders = []string{KindOpenAI, KindAnthropic, KindScripted}

func (v *validator) config(c *Config) {
	names := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		p.Name = strings.TrimSpace(p.Name)
		p.Kind = strings.TrimSpace(p.Kind)
		p.BaseURL = strings.TrimSpace(p.BaseURL)
		p.APIKeyEnv = strings.TrimSpace(p.APIKeyEnv)
		switch {
		case p.Name == "":
			v.at("providers", i, "", "name is required")
		case !providerNameRE.MatchString(p.Name):
			v.at("providers", i, "name", "%q is not a valid provider name (letters, digits, '_', '.', '-'; no '/')", p.Name)
		case names[p.Name]:
			v.at("providers", i, "name", "provider %q is declared twice", p.Name)
		}
		names[p.Name] = true
		switch {
		case p.Kind == "":
			v.at("providers", i, "", "kind is required (one of %s)", strings.Join(kinds, ", "))
		case !slices.Contains(kinds, p.Kind):
			v.at("providers", i, "kind", "unknown kind %q (one of %s)", p.Kind, strings.Join(kinds, ", "))
		}
		if p.Kind == KindScripted && (p.BaseURL != "" || p.APIKeyEnv != "" || len(p.Headers) > 0) {
			v.at("providers", i, "", "a scripted provider takes no base_url, api_key_env or headers")
		}
		if p.BaseURL != "" {
			u, err := url.Parse(p.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.at("providers", i, "base_url", "%q is not an http(s) URL", p.BaseURL)
			}
		}
		p.MaxTokensField = strings.TrimSpace(p.MaxTokensField)
		switch {
		case p.MaxTokensField == "":
		case p.Kind != KindOpenAI:
			v.at("providers", i, "max_tokens_field", "only a provider of kind %s (Chat Completions) takes max_tokens_field", KindOpenAI)
		case p.MaxTokensField != openai.MaxTokens && p.MaxTokensField != openai.MaxCompletionTokens:
			v.at("providers", i, "max_tokens_field", "%q is not %s or %s", p.MaxTokensField, openai.MaxCompletionTokens, openai.MaxTokens)
		}
		if p.APIKeyEnv != "" && !envNameRE.MatchString(p.APIKeyEnv) {
			// The value is not repeated: it may be the key itself.
			v.at("providers", i, "api_key_env", "must be the name of an environment variable (letters, digits and '_'), not a key")
		}
		for k, val := range p.Headers {
			if !headerNameRE.MatchString(k) {
				v.at("providers", i, "headers", "%q is not a valid header name", k)
			}
			if strings.ContainsAny(val, "\r\n") {
				v.at("providers", i, "headers", "the value of %s contains a line break", k)
			}
		}
		v.retry(p.Retry, "providers", i)
	}
	v.retry(&c.Retry, "", 0)
	v.mcp(&c.MCP)
	v.sandbox(&c.Sandbox)
	v.http(&c.HTTP)

	ids := map[string]bool{}
	for i := range c.Models {
		m := &c.Models[i]
		m.ID = strings.TrimSpace(m.ID)
		if m.ID == "" {
			v.at("models", i, "", "id is required (provider/model)")
			continue
		}
		prov, _, err := forge.SplitModel(m.ID)
		if err != nil {
			v.at("models", i, "id", "%s", err)
			continue
		}
		if !names[prov] && !slices.Contains(implicitProviders, prov) {
			v.at("models", i, "id", "provider %q is not declared under providers", prov)
		}
		if ids[m.ID] {
			v.at("models", i, "id", "model %q is declared twice", m.ID)
		}
		ids[m.ID] = true
		if m.ContextWindow != nil && *m.ContextWindow <= 0 {
			v.at("models", i, "context_window", "must be a positive number of tokens")
		}
		if m.MaxOutput != nil && *m.MaxOutput <= 0 {
			v.at("models", i, "max_output", "must be a positive number of tokens")
		}
		for _, k := range m.InputModalities {
			if k != InputText && k != InputImage && k != InputPDF {
				v.at("models", i, "input_modalities", "%q is not an input kind: text, image or pdf", k)
			}
		}
		if m.ContextWindow != nil && m.MaxOutput != nil && *m.MaxOutput > *m.ContextWindow {
			v.at("models", i, "max_output", "%d is more than the context window (%d)", *m.MaxOutput, *m.ContextWindow)
		}
		if pc := m.Prices; pc != nil {
			for _, f := range []struct {
				name string
				p    *float64
			}{{"input", pc.Input}, {"output", pc.Output}, {"cached_input", pc.CachedInput}, {"cache_write", pc.CacheWrite}} {
				if f.p != nil && (*f.p < 0 || math.IsNaN(*f.p) || math.IsInf(*f.p, 0)) {
					v.at("models", i, "prices", "%s must be a price >= 0 (US dollars per million tokens)", f.name)
				}
			}
		}
	}
}

func (v *validator) http(h *HTTPConfig) {
	report := func(field, format string, args ...any) {
		line := 0
		if r := lookup(v.root, "http"); r != nil {
			line = r.Line
			if f := lookup(r, field); f != nil {
				line = f.Line
			}
		}
		v.errs = append(v.errs, fmt.Errorf("%s:%d: http.%s: %s", v.file, line, field, fmt.Sprintf(format, args...)))
	}
	if n := h.MaxIdleConnsPerHost; n != nil && (*n < 1 || *n > 100_000) {
		report("max_idle_conns_per_host", "%d is not a number of connections from 1 to 100000", *n)
	}
	if d := h.IdleConnTimeout; d != nil && (*d < time.Second || *d > time.Hour) {
		report("idle_conn_timeout", "%s is not a duration from 1s to 1h", *d)
	}
}

func (v *validator) retry(rc *RetryConfig, section string, i int) {
	if rc == nil {
		return
	}
	report := func(field, format string, args ...any) {
		if section == "" {
			line := 0
			if r := lookup(v.root, "retry"); r != nil {
				line = r.Line
				if f := lookup(r, field); f != nil {
					line = f.Line
				}
			}
			v.errs = append(v.errs, fmt.Errorf("%s:%d: retry.%s: %s", v.file, line, field, fmt.Sprintf(format, args...)))
			return
		}
		v.at(section, i, "retry", "%s: %s", field, fmt.Sprintf(format, args...))
	}
	if rc.MaxAttempts != nil && (*rc.MaxAttempts < 1 || *rc.MaxAttempts > 20) {
		report("max_attempts", "must be between 1 and 20 (1: no retries)")
	}
	for _, d := range []struct {
		name string
		d    *time.Duration
		zero bool // 0 allowed (disables)
	}{{"base_delay", rc.BaseDelay, false}, {"max_delay", rc.MaxDelay, false}, {"max_retry_after", rc.MaxRetryAfter, false},
		{"first_byte_timeout", rc.FirstByteTimeout, true}, {"idle_timeout", rc.IdleTimeout, true}} {
		if d.d == nil {
			continue
		}
		if *d.d < 0 || (*d.d == 0 && !d.zero) {
			if d.zero {
				report(d.name, "must be a duration >= 0 (0s disables it)")
			} else {
				report(d.name, "must be a positive duration such as 500ms or 30s")
			}
		}
	}
}

// expandHeaders returns the provider's headers with ${NAME} references
// replaced, and the values that came from the environment (secrets to
// scrub from errors).
func expandHeaders(h map[string]string, getenv func(string) string) (http.Header, []string, error) {
	out := http.Header{}
	var secrets []string
	for k, v := range h {
		var missing []string
		v = envRefRE.ReplaceAllStringFunc(v, func(ref string) string {
			name := envRefRE.FindStringSubmatch(ref)[1]
			val := getenv(name)
			if val == "" {
				missing = append(missing, name)
			}
			secrets = append(secrets, val)
			return val
		})
		if len(missing) > 0 {
			return nil, nil, fmt.Errorf("header %s: environment variable %s is not set", k, strings.Join(missing, ", "))
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, nil, fmt.Errorf("header %s: the value contains a line break", k)
		}
		out.Set(k, v)
	}
	return out, secrets, nil
}

// headerNames lists the canonical names of h, sorted.
func headerNames(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, http.CanonicalHeaderKey(k))
	}
	slices.Sort(names)
	return names
}
