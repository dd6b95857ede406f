package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
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
// runs in its own process group. The caller closes cmd.ExtraFiles (the
// declared variables, for bubblewrap) once the command has started.
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
	l := launch{argv: argv, env: commandEnv(sb.home(), "/tmp")}
	if len(env) > 0 {
		// bubblewrap sets the declared variables for the program only
		// (--setenv): in the launcher's or bubblewrap's own environment,
		// on the host before anything is isolated, LD_PRELOAD or
		// GCONV_PATH would load the tenant's code. They reach bubblewrap
		// through a file descriptor (--args), not its command line, which
		// every host user can read.
		f, err := envArgs(sb.base, env)
		if err != nil {
			return nil, err
		}
		l.bwrapArgs = []string{"--args", "3"}
		l.files = []*os.File{f}
	}
	// No context: a cancelled ctx would kill the server.
	cmd, err := m.command(sb, l)
	if err != nil {
		for _, f := range l.files {
			f.Close()
		}
		return nil, err
	}
	return cmd, nil
}

// envArgs returns an unlinked file holding the --setenv arguments of env,
// NUL-separated, for bubblewrap's --args.
func envArgs(dir string, env map[string]string) (*os.File, error) {
	keys := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("--setenv\x00" + k + "\x00" + env[k] + "\x00")
	}
	f, err := os.CreateTemp(dir, ".env-")
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	_ = os.Remove(f.Name())
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return f, nil
}
