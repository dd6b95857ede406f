package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// StdioCommand returns, unstarted, a command that runs argv inside the
// session's sandbox, for a program that speaks on its stdin and stdout (a
// stdio MCP server): the same isolation as a bash command (bubblewrap, the
// session's work and home directories, no network, none of the server's
// environment), with env added to the sandbox's own minimal environment.
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
	home := filepath.Join(sb.base, "home")
	args := bwrapArgs(sb.dir, home, m.opts.ReadOnlyPaths)
	var envFile *os.File
	if len(env) > 0 {
		// bubblewrap sets the declared variables for the program only
		// (--setenv): in its own environment, on the host before it
		// isolates anything, LD_PRELOAD or GCONV_PATH would load the
		// tenant's code. They reach it through a file descriptor (--args),
		// not its command line, which every host user can read.
		f, err := envArgs(sb.base, env)
		if err != nil {
			return nil, err
		}
		envFile = f
		args = append(args, "--args", "3")
	}
	args = append(args, "--")
	args = append(args, argv...)
	cmd := exec.Command(m.bwrap, args...) // no context: a cancelled ctx would kill the server
	cmd.Dir = sb.dir
	cmd.Env = commandEnv(home, "/tmp")
	if envFile != nil {
		cmd.ExtraFiles = []*os.File{envFile}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
