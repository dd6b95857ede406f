package provider

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MCPConfig is the mcp section of forge.yaml: which MCP servers tenants'
// agents may use (docs/mcp.md).
//
//	mcp:
//	  commands:                      # stdio servers the operator offers
//	    - name: github
//	      command: [/usr/local/bin/github-mcp-server, stdio]
//	      prefix: false              # true: an agent may add arguments after these
//	      env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}"}
//	      sandbox: false             # runs on the host, as the server's user
//	      tenant_env: [GITHUB_TOOLSETS]  # host commands: variables an agent may set
//	      dir: /srv/github-mcp       # host commands: working directory
//	  other_commands: sandbox        # sandbox (default) | refuse
//	  allow_private_urls: false      # default: true while the server has no API key
//	  allow_link_local_urls: false   # link-local and cloud metadata addresses
type MCPConfig struct {
	Commands []MCPCommandConfig `yaml:"commands"`
	// OtherCommands is what happens to a stdio command no entry matches:
	// "sandbox" (the default) runs it in the session's sandbox, "refuse"
	// refuses it.
	OtherCommands string `yaml:"other_commands"`
	// AllowPrivateURLs lets url servers reach loopback and private
	// addresses; nil leaves it to forge serve (allowed while it has no API
	// key, refused once it has).
	AllowPrivateURLs *bool `yaml:"allow_private_urls"`
	// AllowLinkLocalURLs lets url servers reach link-local addresses,
	// cloud metadata endpoints among them.
	AllowLinkLocalURLs *bool `yaml:"allow_link_local_urls"`
}

// OtherCommands values.
const (
	OtherCommandsSandbox = "sandbox"
	OtherCommandsRefuse  = "refuse"
)

// MCPCommandConfig is a stdio MCP server the operator offers: an agent
// whose command is Command (or starts with it, with Prefix) gets Env added
// and, with Sandbox false, runs on the host.
type MCPCommandConfig struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Prefix  bool     `yaml:"prefix"`
	// Env values may contain ${NAME}, replaced by that variable of the
	// server's environment (for secrets).
	Env map[string]string `yaml:"env"`
	// Sandbox false runs the command on the host (nil or true: in the
	// session's sandbox).
	Sandbox   *bool    `yaml:"sandbox"`
	TenantEnv []string `yaml:"tenant_env"`
	Dir       string   `yaml:"dir"`
}

// OnHost reports whether the command runs on the host, unsandboxed.
func (c *MCPCommandConfig) OnHost() bool { return c.Sandbox != nil && !*c.Sandbox }

// ExpandEnv returns the entry's environment with ${NAME} references
// replaced; a variable that is not set is an error.
func (c *MCPCommandConfig) ExpandEnv(getenv func(string) string) (map[string]string, error) {
	out := make(map[string]string, len(c.Env))
	for k, v := range c.Env {
		var missing []string
		out[k] = envRefRE.ReplaceAllStringFunc(v, func(ref string) string {
			name := envRefRE.FindStringSubmatch(ref)[1]
			val := getenv(name)
			if val == "" {
				missing = append(missing, name)
			}
			return val
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("mcp command %s: env %s: environment variable %s is not set", c.Name, k, strings.Join(missing, ", "))
		}
	}
	return out, nil
}

// SandboxConfig is the sandbox section of forge.yaml.
//
//	sandbox:
//	  read_only_paths: [/opt/node22, /srv/mcp-servers]  # bound read-only into every sandbox
type SandboxConfig struct {
	// ReadOnlyPaths are host paths bound read-only into every sandbox (at
	// the same path): toolchains and MCP servers installed outside /usr.
	ReadOnlyPaths []string `yaml:"read_only_paths"`
}

var mcpNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// lineOf is the line of the node at path (mapping keys and sequence
// indexes) under the root, or of its deepest ancestor found.
func (v *validator) lineOf(path ...any) int {
	n, line := v.root, 0
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			next = lookup(n, p)
		case int:
			if n != nil && n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
			}
		}
		if next == nil {
			break
		}
		n, line = next, next.Line
	}
	return line
}

// atPath reports an error about the field at path ("mcp.commands[0].env").
func (v *validator) atPath(path []any, format string, args ...any) {
	var where strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if where.Len() > 0 {
				where.WriteByte('.')
			}
			where.WriteString(p)
		case int:
			fmt.Fprintf(&where, "[%d]", p)
		}
	}
	v.errs = append(v.errs, fmt.Errorf("%s:%d: %s: %s", v.file, v.lineOf(path...), where.String(), fmt.Sprintf(format, args...)))
}

func (v *validator) mcp(c *MCPConfig) {
	c.OtherCommands = strings.TrimSpace(c.OtherCommands)
	switch c.OtherCommands {
	case "", OtherCommandsSandbox, OtherCommandsRefuse:
	default:
		v.atPath([]any{"mcp", "other_commands"}, "%q is not %s or %s", c.OtherCommands, OtherCommandsSandbox, OtherCommandsRefuse)
	}
	names := map[string]bool{}
	for i := range c.Commands {
		e := &c.Commands[i]
		at := func(field string, format string, args ...any) {
			path := []any{"mcp", "commands", i}
			if field != "" {
				path = append(path, field)
			}
			v.atPath(path, format, args...)
		}
		e.Name = strings.TrimSpace(e.Name)
		switch {
		case e.Name == "":
			at("", "name is required")
		case !mcpNameRE.MatchString(e.Name):
			at("name", "%q is not a valid name (letters, digits, '_', '.', '-')", e.Name)
		case names[e.Name]:
			at("name", "command %q is declared twice", e.Name)
		}
		names[e.Name] = true
		if len(e.Command) == 0 || e.Command[0] == "" {
			at("command", "command is required: the argv an agent's mcp_servers[].command must match, e.g. [/usr/local/bin/server, stdio]")
		}
		for k, val := range e.Env {
			if !envNameRE.MatchString(k) {
				at("env", "%q is not a variable name (letters, digits and '_')", k)
			}
			if strings.ContainsRune(val, 0) {
				at("env", "the value of %s contains a NUL byte", k)
			}
		}
		if !e.OnHost() {
			if len(e.TenantEnv) > 0 {
				at("tenant_env", "only a host command (sandbox: false) takes tenant_env: in the sandbox an agent may set any variable")
			}
			if e.Dir != "" {
				at("dir", "only a host command (sandbox: false) takes dir: a sandboxed one runs in the session's working directory")
			}
		}
		for _, k := range e.TenantEnv {
			if !envNameRE.MatchString(k) {
				at("tenant_env", "%q is not a variable name (letters, digits and '_')", k)
			}
		}
		if e.Dir != "" && !filepath.IsAbs(e.Dir) {
			at("dir", "%q must be an absolute path", e.Dir)
		}
	}
	for i := range c.Commands {
		for j := range i {
			a, b := &c.Commands[j], &c.Commands[i]
			if len(a.Command) > 0 && len(b.Command) > 0 && slices.Equal(a.Command, b.Command) {
				v.atPath([]any{"mcp", "commands", i, "command"}, "the same command as mcp.commands[%d] (%s)", j, a.Name)
			}
		}
	}
}

func (v *validator) sandbox(c *SandboxConfig) {
	for i, p := range c.ReadOnlyPaths {
		path := []any{"sandbox", "read_only_paths", i}
		switch clean := filepath.Clean(p); {
		case !filepath.IsAbs(p):
			v.atPath(path, "%q must be an absolute path", p)
		case clean == "/":
			v.atPath(path, "binding / would show the sandbox every host file: name the directories it needs")
		default:
			c.ReadOnlyPaths[i] = clean
		}
	}
}
