package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
)

// StdioCommand returns, unstarted, a command that runs argv inside the
// session's sandbox, for a program that speaks on its stdin and stdout (a
// stdio MCP server): the same isolation as a bash command (bubblewrap, the
// session's work and home directories, no network, none of the server's
// environment), with env added to the sandbox's own minimal environment.
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
	home := filepath.Join(sb.base, "home")
	args := bwrapArgs(sb.dir, home, m.opts.ReadOnlyPaths)
	args = append(args, "--")
	args = append(args, argv...)
	cmd := exec.Command(m.bwrap, args...) // no context: a cancelled ctx would kill the server
	cmd.Dir = sb.dir
	cmd.Env = commandEnv(home, "/tmp")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}
