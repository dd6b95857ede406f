package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"

	forge "github.com/forge-runtime/forge"
)

// Launcher runs a stdio MCP server inside a session's sandbox: the same
// isolation as the bash tool (no server environment, no host files, no
// network, its own process and file system view). *sandbox.Manager
// implements it.
type Launcher interface {
	// Isolated reports whether process isolation is active; StdioCommand
	// fails when it is not.
	Isolated() bool
	// StdioCommand returns, unstarted, the command running argv in the
	// session's sandbox with env added to the sandbox's environment, in its
	// own process group. The Manager closes cmd.ExtraFiles once it started.
	StdioCommand(ctx context.Context, sessionID string, argv []string, env map[string]string) (*exec.Cmd, error)
}

// AllowedCommand is a stdio MCP server the operator offers tenants
// (forge.yaml mcp.commands). An agent's command matching it runs with the
// operator's environment added, and on the host when Host is set.
type AllowedCommand struct {
	// Name identifies the entry in logs and errors.
	Name string
	// Command is the argv an agent's command must equal, or start with
	// when Prefix is set (the agent then adds arguments: declare a prefix
	// only when every extension is safe to run).
	Command []string
	Prefix  bool
	// Env is added to the server's environment after the agent's own
	// variables (the operator's win): credentials the operator holds.
	Env map[string]string
	// Host runs the command on the host, unsandboxed, as the server's user
	// with a minimal environment: only for a program the operator trusts
	// with that. Otherwise it runs in the session's sandbox.
	Host bool
	// TenantEnv names the variables an agent may set for a Host command
	// (none by default: LD_PRELOAD and the like would run the agent's
	// code on the host). Sandboxed commands take any.
	TenantEnv []string
	// Dir is a Host command's working directory (default: the server's).
	Dir string
}

// matches reports whether argv runs this entry.
func (c *AllowedCommand) matches(argv []string) bool {
	if len(argv) < len(c.Command) || (!c.Prefix && len(argv) != len(c.Command)) {
		return false
	}
	return slices.Equal(argv[:len(c.Command)], c.Command)
}

// allowed is the operator's entry that argv runs, or nil.
func (m *Manager) allowed(argv []string) *AllowedCommand {
	for i := range m.opts.Commands {
		if c := &m.opts.Commands[i]; c.matches(argv) {
			return c
		}
	}
	return nil
}

// Why stdio servers are refused: the agent author reads these at POST
// /v1/agents, the model when the server fails to start.
var (
	errNoIsolation = errors.New("stdio MCP servers run only inside the sandbox, and this server has no process isolation " +
		"(bubblewrap is not installed or not usable; --unsafe-unsandboxed-commands does not apply to MCP servers): " +
		"the operator can install bubblewrap, or allow this command in forge.yaml (mcp.commands)")
	errNoLauncher = errors.New("this server runs no stdio MCP servers but those its operator allows in forge.yaml (mcp.commands)")
)

func (m *Manager) errOnlyAllowed() error {
	names := make([]string, 0, len(m.opts.Commands))
	for _, c := range m.opts.Commands {
		names = append(names, fmt.Sprintf("%s (%s%s)", c.Name, strings.Join(c.Command, " "), map[bool]string{true: " ...", false: ""}[c.Prefix]))
	}
	if len(names) == 0 {
		return errors.New("this server runs no stdio MCP servers (forge.yaml mcp.other_commands: refuse, and no mcp.commands)")
	}
	return fmt.Errorf("this server runs only the stdio MCP servers its operator allows (forge.yaml mcp.commands): %s", strings.Join(names, "; "))
}

// checkCommand says whether spec's command may run here, and how.
func (m *Manager) checkCommand(spec forge.MCPServer) (*AllowedCommand, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("command[0] must name a program")
	}
	if c := m.allowed(spec.Command); c != nil {
		if c.Host {
			for k := range spec.Env {
				if !slices.Contains(c.TenantEnv, k) {
					return nil, fmt.Errorf("env %s: the operator's command %q runs on the host and takes only the variables it lists (%s)",
						k, c.Name, listOrNone(c.TenantEnv))
				}
			}
			return c, nil
		}
		if err := m.sandboxAvailable(); err != nil {
			return nil, err
		}
		return c, nil
	}
	if m.opts.OnlyAllowedCommands {
		return nil, m.errOnlyAllowed()
	}
	return nil, m.sandboxAvailable()
}

func (m *Manager) sandboxAvailable() error {
	switch {
	case m.opts.Launcher == nil:
		return errNoLauncher
	case !m.opts.Launcher.Isolated():
		return errNoIsolation
	}
	return nil
}

func listOrNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

// stdioCommand builds the command of a stdio server of session: in the
// session's sandbox, or on the host for an operator's Host command.
func (m *Manager) stdioCommand(ctx context.Context, session string, spec forge.MCPServer) (*exec.Cmd, error) {
	c, err := m.checkCommand(spec)
	if err != nil {
		return nil, err
	}
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	if c != nil {
		maps.Copy(env, c.Env)
	}
	if c != nil && c.Host {
		cmd := exec.Command(spec.Command[0], spec.Command[1:]...) // no context: a cancelled ctx would kill the server
		cmd.Env = stdioEnv(env)
		cmd.Dir = c.Dir
		setProcessGroup(cmd)
		return cmd, nil
	}
	cmd, err := m.opts.Launcher.StdioCommand(ctx, session, spec.Command, env)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return cmd, nil
}

// CheckServer says whether an agent may declare spec on this server: a
// stdio command that can run here (sandboxed, or the operator's), a URL
// that does not name a refused address. It is what POST /v1/agents checks;
// the start of the server checks again (and checks every address it
// dials). The error wraps forge.ErrInvalid.
func (m *Manager) CheckServer(ctx context.Context, spec forge.MCPServer) error {
	var err error
	if len(spec.Command) > 0 {
		_, err = m.checkCommand(spec)
	} else if spec.URL != "" {
		err = m.checkURL(ctx, spec.URL)
	}
	if err != nil {
		return invalidError{err}
	}
	return nil
}

// invalidError reads as err and wraps both err and forge.ErrInvalid.
type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{forge.ErrInvalid, e.err} }
