package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
)

// StdioCommand returns, unstarted, a command that runs argv inside the
// session's sandbox, for a program that speaks on its stdin and stdout (a
// stdio MCP server): built exactly as a bash command is (Manager.command:
// bubblewrap with no capability, the sandbox's uid, no network, the
// session's work and home directories, the memory, process and file size
// limits and the size-limited /tmp, none of the server's environment),
// with env added to the sandbox's own minimal environment. It has no CPU
// time limit (a server runs for long) and does not take a command slot.
// It is ErrUnsandboxed when isolation is not active: a tenant's program
// never runs on the host. The caller starts and waits for the command; it
// runs in its own process group.
func (m *Manager) StdioCommand(ctx context.Context, sessionID string, argv []string, env map[string]string) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("sandbox: empty command")
	}
	if !m.Isolated() {
		return nil, ErrUnsandboxed
	}
	sb, _, err := m.Get(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	vars := commandEnv(sb.home(), "/tmp")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vars = append(vars, k+"="+env[k])
	}
	// No context: a cancelled ctx would kill the server.
	return m.command(sb, launch{argv: argv, env: vars})
}
