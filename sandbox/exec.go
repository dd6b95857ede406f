package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Sandbox is one session's working directory and its running commands.
type Sandbox struct {
	m    *Manager
	id   string
	base string // <root>/<sessionID>
	dir  string // <base>/work, symlink-free

	mu    sync.Mutex
	procs map[uint64]context.CancelCauseFunc
	seq   uint64
	gone  bool
	wg    sync.WaitGroup
}

// Dir is the sandbox's working directory (an absolute, symlink-free path;
// inside bubblewrap it is mounted at the same path).
func (s *Sandbox) Dir() string { return s.dir }

// SessionID is the id of the session the sandbox belongs to.
func (s *Sandbox) SessionID() string { return s.id }

var (
	errStopped = errors.New("sandbox stopped")
	errTimeout = errors.New("command timed out")
)

// Stop kills the sandbox's running commands with their process groups.
func (s *Sandbox) Stop() {
	s.mu.Lock()
	cancels := make([]context.CancelCauseFunc, 0, len(s.procs))
	for _, c := range s.procs {
		cancels = append(cancels, c)
	}
	s.mu.Unlock()
	for _, c := range cancels {
		c(errStopped)
	}
}

func (s *Sandbox) removed() {
	s.mu.Lock()
	s.gone = true
	s.mu.Unlock()
	s.Stop()
	s.wg.Wait()
}

// RunResult is the outcome of a command.
type RunResult struct {
	// Output is the combined stdout and stderr, truncated to MaxOutput
	// (head and tail kept, "[output truncated: N bytes omitted]" between).
	Output string
	// ExitCode is the exit status, or -1 when the command was killed.
	ExitCode int
	TimedOut bool
	// Stopped is true when Stop (or Remove, or Close) killed the command.
	Stopped bool
	// Canceled is true when the caller's context ended first.
	Canceled  bool
	Truncated bool
	// TotalBytes is the size of the full output.
	TotalBytes int64
	// OutputID names the full output (up to MaxFullOutput bytes) when
	// Output was truncated; read it with FullOutput.
	OutputID string
	Duration time.Duration
}

var validOutputID = regexp.MustCompile(`^out-[0-9]{6,}$`)

// FullOutput opens the full output of a truncated command.
func (s *Sandbox) FullOutput(id string) (io.ReadCloser, error) {
	if !validOutputID.MatchString(id) {
		return nil, fmt.Errorf("sandbox: invalid output id %q", id)
	}
	return os.OpenFile(filepath.Join(s.base, "outputs", id+".log"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// Run runs command with bash -c in the work directory. timeout <= 0 means
// the default; it is capped at MaxCommandTimeout. The error is non-nil only
// when the command could not be started; it is ErrUnsandboxed when commands
// are disabled (no isolation, and UnsafeUnsandboxedCommands not set).
func (s *Sandbox) Run(ctx context.Context, command string, timeout time.Duration) (*RunResult, error) {
	opts := s.m.opts
	if !s.m.CommandsAllowed() {
		return nil, ErrUnsandboxed
	}
	if timeout <= 0 {
		timeout = opts.CommandTimeout
	}
	if timeout > opts.MaxCommandTimeout {
		timeout = opts.MaxCommandTimeout
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, errors.New("sandbox: removed")
	}
	if !s.m.begin() {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	defer s.m.wg.Done()
	s.wg.Add(1)
	defer s.wg.Done()
	s.seq++
	key := s.seq
	runCtx, cancel := context.WithCancelCause(ctx)
	s.procs[key] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.procs, key)
		s.mu.Unlock()
		cancel(nil)
	}()

	home := filepath.Join(s.base, "home")
	tmp := filepath.Join(s.base, "tmp")
	var cmd *exec.Cmd
	if s.m.bwrap != "" {
		args := bwrapArgs(s.dir, home, opts.ReadOnlyPaths)
		args = append(args, "--", "bash", "-c", command)
		cmd = exec.Command(s.m.bwrap, args...)
		tmp = "/tmp"
	} else {
		cmd = exec.Command("bash", "-c", command)
	}
	cmd.Dir = s.dir
	cmd.Env = commandEnv(home, tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	capt := &capture{max: opts.MaxOutput, fullMax: opts.MaxFullOutput, s: s}
	cmd.Stdout = capt
	cmd.Stderr = capt
	// A descendant that escaped the process group may hold the pipe open:
	// do not wait for it forever.
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sandbox: start command: %w", err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	res := &RunResult{}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		res.TimedOut = true
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		waitErr = <-done
	case <-runCtx.Done():
		if errors.Is(context.Cause(runCtx), errStopped) {
			res.Stopped = true
		} else {
			res.Canceled = true
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		waitErr = <-done
	}
	// Background children of a finished command die with it (as they do
	// inside bubblewrap, whose PID namespace ends with the command).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	res.Duration = time.Since(start)
	res.ExitCode = -1
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	_ = waitErr
	capt.finish(res)
	return res, nil
}

func commandEnv(home, tmp string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	// The host environment is not passed on: it may hold credentials.
	return []string{
		"PATH=" + path,
		"HOME=" + home,
		"TMPDIR=" + tmp,
		"LANG=C.UTF-8",
		"TERM=dumb",
		"PAGER=cat",
		"GIT_PAGER=cat",
	}
}

// bwrapArgs binds work and home read-write at their own paths, system
// directories read-only, a fresh /tmp, /proc and /dev, and unshares every
// namespace (so no network).
func bwrapArgs(work, home string, extra []string) []string {
	args := []string{"--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr"}
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
	// Only the parts of /etc programs need (not shadow, not host secrets).
	for _, e := range []string{"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
		"passwd", "group", "nsswitch.conf", "hosts", "localtime", "ssl", "ca-certificates",
		"mime.types", "gitconfig", "inputrc", "bash.bashrc", "profile"} {
		args = append(args, "--ro-bind-try", "/etc/"+e, "/etc/"+e)
	}
	for _, p := range extra {
		args = append(args, "--ro-bind-try", p, p)
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", home, home, "--bind", work, work, "--chdir", work)
	return args
}

// capture collects a command's combined output: the head and the tail in
// memory, everything (up to fullMax) in a file once the output is larger
// than max.
type capture struct {
	max     int
	fullMax int64
	s       *Sandbox

	mu      sync.Mutex
	head    []byte
	tail    []byte
	total   int64
	file    *os.File
	fileID  string
	written int64
	fileErr bool
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if c.file == nil && !c.fileErr && c.total > int64(c.max) {
		c.openFile()
	}
	if c.file != nil && c.written < c.fullMax {
		chunk := p
		if rest := c.fullMax - c.written; int64(len(chunk)) > rest {
			chunk = chunk[:rest]
		}
		n, err := c.file.Write(chunk)
		c.written += int64(n)
		if err != nil {
			c.fileErr = true
		}
	}
	rest := p
	headMax := c.max / 2
	if len(c.head) < headMax {
		n := min(headMax-len(c.head), len(rest))
		c.head = append(c.head, rest[:n]...)
		rest = rest[n:]
	}
	if len(rest) > 0 {
		tailMax := c.max - headMax
		c.tail = append(c.tail, rest...)
		if len(c.tail) > 2*tailMax {
			c.tail = append(c.tail[:0], c.tail[len(c.tail)-tailMax:]...)
		}
	}
	return len(p), nil
}

// openFile starts the full-output file with what is in memory so far
// (all of it: nothing has been dropped before the output exceeds max).
func (c *capture) openFile() {
	s := c.s
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("out-%06d", s.seq)
	s.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(s.base, "outputs", id+".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		c.fileErr = true
		return
	}
	c.file, c.fileID = f, id
	n1, _ := f.Write(c.head)
	n2, _ := f.Write(c.tail)
	c.written = int64(n1 + n2)
}

func (c *capture) finish(res *RunResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res.TotalBytes = c.total
	if c.file != nil {
		_ = c.file.Close()
		c.file = nil
		if !c.fileErr {
			res.OutputID = c.fileID
		}
	}
	if c.total <= int64(c.max) {
		res.Output = string(c.head) + string(c.tail)
		return
	}
	tailMax := c.max - c.max/2
	tail := c.tail
	if len(tail) > tailMax {
		tail = tail[len(tail)-tailMax:]
	}
	omitted := c.total - int64(len(c.head)) - int64(len(tail))
	var b strings.Builder
	b.Write(c.head)
	if len(c.head) > 0 && c.head[len(c.head)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[output truncated: %d bytes omitted]\n", omitted)
	b.Write(tail)
	res.Output = b.String()
	res.Truncated = true
}
