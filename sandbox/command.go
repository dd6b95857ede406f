package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forge-runtime/forge/internal/launcher"
)

// Every sandboxed command starts as the server's own binary re-executed as
// the launcher (package internal/launcher): it sets the resource limits,
// and when the server is root stages the session's directories and
// switches to the sandbox's uid, then executes bubblewrap (or, without
// isolation, bash). Go's exec sets no rlimits on a child; prlimit(1) and
// setpriv(1) could set limits and drop the uid, but not stage directories,
// and would be two more programs a host must have.

// stagedPath is a host path the launcher binds at launcher.Staged(name).
type stagedPath struct {
	src, name string
	ro        bool
}

type launchRlimit struct {
	resource int
	cur, max uint64
}

// useLauncher says whether commands start through the launcher (Linux).
const useLauncher = runtime.GOOS == "linux"

// launch is one program to run in a sandbox.
type launch struct {
	argv []string
	env  []string
	// cpu is the CPU time limit of each process (0: none).
	cpu time.Duration
	// noWrites sets the file size limit to 0: no file grows (the
	// workspace is over its quota).
	noWrites bool
	// bwrapArgs are more bubblewrap options (before the program), files
	// the descriptors from 3 on that the command inherits.
	bwrapArgs []string
	files     []*os.File
}

// command builds the one way a program runs in a sandbox, for Run, for
// StdioCommand and for the startup probe alike: the launcher with the
// sandbox's limits and uid, then bubblewrap (when isolation is active)
// dropping every capability, without network, with the session's work and
// home directories and a size-limited /tmp. The command is not started; it
// runs in its own process group.
func (m *Manager) command(sb *Sandbox, l launch) (*exec.Cmd, error) {
	if len(l.argv) == 0 || l.argv[0] == "" {
		return nil, fmt.Errorf("sandbox: empty command")
	}
	directives := []string{launcher.Arg0}
	for _, r := range m.rlimits(sb, l) {
		directives = append(directives, fmt.Sprintf("rlimit=%d:%d:%d", r.resource, r.cur, r.max))
	}
	var argv []string
	dir := "/"
	if m.bwrap != "" {
		args, staged := m.bwrapArgs(sb)
		argv = append([]string{m.bwrap}, args...)
		argv = append(argv, l.bwrapArgs...)
		argv = append(argv, "--")
		argv = append(argv, l.argv...)
		for _, p := range staged {
			mode := "rw"
			if p.ro {
				mode = "ro"
			}
			directives = append(directives, "stage="+mode+":"+p.name+":"+p.src)
		}
		if sb.uid >= 0 {
			directives = append(directives, fmt.Sprintf("user=%d:%d", sb.uid, sb.gid))
		}
	} else {
		prog, err := exec.LookPath(l.argv[0])
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		if prog, err = filepath.Abs(prog); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		argv = append([]string{prog}, l.argv[1:]...)
		dir = sb.dir
	}
	var cmd *exec.Cmd
	if useLauncher {
		cmd = &exec.Cmd{Path: launcher.Path, Args: append(append(directives, "--"), argv...)}
	} else {
		cmd = &exec.Cmd{Path: argv[0], Args: argv}
	}
	cmd.Dir = dir
	cmd.Env = l.env
	cmd.ExtraFiles = l.files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// rlimits are the per-process limits of a launch. The process limit
// counts the processes (threads) of the sandbox's uid, so it is set only
// when the sandbox has a uid of its own: with the server's uid it would
// count the server's threads and every other process of that user.
func (m *Manager) rlimits(sb *Sandbox, l launch) []launchRlimit {
	o := m.opts
	var out []launchRlimit
	set := func(res int, cur, max uint64) {
		out = append(out, launchRlimit{resource: res, cur: cur, max: max})
	}
	if o.MemoryLimit > 0 {
		// The memory a process may write to (RLIMIT_DATA: its heap and
		// private mappings), and a looser bound on what it may map at
		// all (RLIMIT_AS), which catches shared anonymous mappings
		// RLIMIT_DATA lets through yet leaves room for the address space
		// runtimes reserve and never use (V8: Node.js MCP servers do not
		// start under an address-space limit of 1 GiB).
		set(unix.RLIMIT_DATA, uint64(o.MemoryLimit), uint64(o.MemoryLimit))
		as := uint64(o.MemoryLimit) * addressSpaceFactor
		set(unix.RLIMIT_AS, as, as)
	}
	if o.MaxProcs > 0 && sb.uid >= 0 {
		set(unix.RLIMIT_NPROC, uint64(o.MaxProcs), uint64(o.MaxProcs))
	}
	if l.cpu > 0 {
		secs := uint64((l.cpu + time.Second - 1) / time.Second)
		// SIGXCPU at the soft limit (what the result reports), SIGKILL a
		// second later for a process that ignores it.
		set(unix.RLIMIT_CPU, secs, secs+1)
	}
	switch {
	case l.noWrites:
		set(unix.RLIMIT_FSIZE, 0, 0)
	case o.MaxFileSize > 0:
		set(unix.RLIMIT_FSIZE, uint64(o.MaxFileSize), uint64(o.MaxFileSize))
	}
	// No core files: they would land in work/, and a piped core_pattern
	// runs its handler on the host as root.
	set(unix.RLIMIT_CORE, 0, 0)
	// The launcher, a Go program, raised its own soft limit to the hard
	// one; commands get the customary 1024 back.
	if m.nofileMax > 0 {
		set(unix.RLIMIT_NOFILE, min(1024, m.nofileMax), m.nofileMax)
	}
	return out
}

// bwrapArgs are bubblewrap's arguments for a sandbox: every namespace
// unshared (so no network), no capability, no nested user namespace, the
// system directories read-only, only the parts of /etc programs need,
// a passwd and group file naming the sandbox's user, a fresh /proc and
// /dev, size-limited /tmp and /dev/shm, the session's home and work
// directories read-write at their own paths, and the rest read-only. When
// the server is root, the host paths of the session's directories are
// staged by the launcher (see launcher.StageDir): staged lists them.
func (m *Manager) bwrapArgs(sb *Sandbox) (args []string, staged []stagedPath) {
	src := func(host, name string, ro bool) string {
		if !m.stage {
			return host
		}
		staged = append(staged, stagedPath{src: host, name: name, ro: ro})
		return launcher.Staged(name)
	}
	args = []string{"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", t, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	// Only the parts of /etc programs need (not shadow, not host secrets);
	// passwd and group are the sandbox's own.
	for _, e := range []string{"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
		"nsswitch.conf", "hosts", "localtime", "ssl", "ca-certificates",
		"mime.types", "gitconfig", "inputrc", "bash.bashrc", "profile"} {
		args = append(args, "--ro-bind-try", "/etc/"+e, "/etc/"+e)
	}
	etc := filepath.Join(sb.base, "etc")
	args = append(args,
		"--ro-bind", src(filepath.Join(etc, "passwd"), "passwd", true), "/etc/passwd",
		"--ro-bind", src(filepath.Join(etc, "group"), "group", true), "/etc/group")
	args = append(args, "--proc", "/proc", "--dev", "/dev")
	if m.opts.TmpSize > 0 {
		args = append(args, "--size", strconv.FormatInt(m.opts.TmpSize, 10))
	}
	args = append(args, "--tmpfs", "/tmp")
	if m.opts.TmpSize > 0 {
		args = append(args, "--size", strconv.FormatInt(min(m.opts.TmpSize, shmMax), 10))
	}
	args = append(args, "--tmpfs", "/dev/shm")
	// After the tmpfs mounts: a read-only path under /tmp (a checkout
	// there, an operator's MCP command) would be hidden by them.
	for i, p := range m.opts.ReadOnlyPaths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		args = append(args, "--ro-bind", src(p, "ro"+strconv.Itoa(i), true), p)
	}
	home := filepath.Join(sb.base, "home")
	args = append(args,
		// The tmpfs bubblewrap builds / and /dev on belongs to the
		// sandbox's user: read-only, it cannot be filled.
		"--remount-ro", "/dev",
		"--bind", src(home, "home", false), home,
		"--bind", src(sb.dir, "work", false), sb.dir,
		"--remount-ro", "/",
		"--chdir", sb.dir)
	return args, staged
}

// addressSpaceFactor is how much more address space than memory a process
// may map (see rlimits).
const addressSpaceFactor = 8

// shmMax bounds /dev/shm (its size is the smaller of this and TmpSize).
const shmMax = 64 << 20
