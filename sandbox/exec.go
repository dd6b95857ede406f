package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	// uid and gid are the host ids the sandbox's commands run as, and own
	// its work and home directories; -1 when commands run as the server's
	// own uid (the server is not root).
	uid, gid int
	slots    chan struct{} // SessionCommands slots (nil: no limit)
	snaps    *snapStore    // workspace snapshots (nil for the probe's sandbox)

	mu    sync.Mutex // guards the following
	procs map[uint64]context.CancelCauseFunc
	seq   uint64
	gone  bool
	wg    sync.WaitGroup
	// usage is the disk space of work/ and home/ as last measured (or
	// adjusted by the file tools); -1 before the first measure.
	usage int64
}

// UID is the host uid the sandbox's commands run as (and that owns the
// files they create), or -1 when they run as the server's own uid.
func (s *Sandbox) UID() int { return s.uid }

func (s *Sandbox) home() string { return filepath.Join(s.base, "home") }

// provision creates the sandbox's directories; when the sandbox runs as a
// uid of its own it gets that uid (Manager.mu held) and its work and home
// directories are given to it. With bubblewrap it also writes the passwd
// and group files the commands see.
func (s *Sandbox) provision() error {
	for _, d := range []string{"work", "home", "tmp", "outputs"} {
		if err := os.MkdirAll(filepath.Join(s.base, d), 0o755); err != nil {
			return err
		}
	}
	real, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return err
	}
	if real != s.dir {
		return fmt.Errorf("work directory %s is a symlink", s.dir)
	}
	chown := s.uid >= 0 // the probe's sandbox comes with its uid
	if p := s.m.uids; p != nil && s.id != "" {
		uid, reassigned, shared := p.assign(s.id, s.dir)
		if shared && !p.full {
			p.full = true
			s.m.log.Warn("sandbox: every uid of the range is taken: sandboxes now share uids (and their process limit)",
				"uid_base", p.base, "uid_count", p.count)
		}
		s.uid, s.gid = int(uid), int(uid)
		chown = reassigned
	}
	if chown {
		for _, d := range []string{s.dir, s.home()} {
			if err := chownTree(d, s.uid, s.gid); err != nil {
				return fmt.Errorf("give %s to uid %d: %w", d, s.uid, err)
			}
		}
	}
	if s.m.bwrap != "" {
		uid, gid := s.uid, s.gid
		if uid < 0 {
			uid, gid = os.Getuid(), os.Getgid()
		}
		if err := writeIdentity(s.base, uid, gid); err != nil {
			return err
		}
	}
	return nil
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
	// Limit names the resource limit the command hit, when its outcome
	// shows one (LimitMemory, ...); LimitMessage says it for the model.
	Limit        string
	LimitMessage string
	// QuotaKilled is set when the command was killed for taking the
	// workspace over its quota.
	QuotaKilled bool
	// OverQuota is set when the workspace is over its quota after the
	// command; WritesDisabled when the command ran with file writes
	// disabled because it was over it before. WorkspaceBytes is the
	// workspace's disk usage after the command (-1 when not measured).
	OverQuota      bool
	WritesDisabled bool
	WorkspaceBytes int64
}

// The limits a RunResult may name.
const (
	LimitMemory    = "memory"
	LimitProcesses = "processes"
	LimitCPU       = "cpu"
	LimitFileSize  = "file size"
	LimitTmp       = "tmp"
	LimitQuota     = "workspace quota"
)

var validOutputID = regexp.MustCompile(`^out-[0-9]{6,}$`)

// FullOutput opens the full output of a truncated command.
func (s *Sandbox) FullOutput(id string) (io.ReadCloser, error) {
	if !validOutputID.MatchString(id) {
		return nil, fmt.Errorf("sandbox: invalid output id %q", id)
	}
	return os.OpenFile(filepath.Join(s.base, "outputs", id+".log"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// Run runs command with bash -c in the work directory. timeout <= 0 means
// the default; it is capped at MaxCommandTimeout. A command waits for a
// free slot (SessionCommands, MaxCommands) before it starts; the timeout
// counts from the start. The error is non-nil only when the command could
// not be started; it is ErrUnsandboxed when commands are disabled (no
// isolation, and UnsafeUnsandboxedCommands not set).
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

	res := &RunResult{ExitCode: -1, WorkspaceBytes: -1}
	ended := func() *RunResult {
		if errors.Is(context.Cause(runCtx), errStopped) {
			res.Stopped = true
		} else {
			res.Canceled = true
		}
		return res
	}
	release, ok := s.acquire(runCtx)
	if !ok {
		return ended(), nil
	}
	defer release()

	usedBefore, quotaErr := s.workspaceUsage(runCtx)
	if quotaErr != nil {
		return ended(), nil
	}
	quota := opts.WorkspaceQuota
	res.WritesDisabled = quota > 0 && usedBefore > quota

	home := s.home()
	tmp := filepath.Join(s.base, "tmp")
	if s.m.bwrap != "" {
		tmp = "/tmp"
	}
	cpu := timeout
	switch {
	case opts.CPUTime > 0:
		cpu = opts.CPUTime
	case opts.CPUTime < 0:
		cpu = 0
	}
	cmd, err := s.m.command(s, launch{argv: []string{"bash", "-c", command}, env: commandEnv(home, tmp),
		cpu: cpu, noWrites: res.WritesDisabled})
	if err != nil {
		return nil, err
	}
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
	s.m.gauge.add(1)
	defer s.m.gauge.add(-1)
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	overQuota, stopWatch := s.watchQuota(max(quota, usedBefore))
	defer stopWatch()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		res.TimedOut = true
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	case <-runCtx.Done():
		ended()
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	case used := <-overQuota:
		res.QuotaKilled = true
		res.WorkspaceBytes = used
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	// Background children of a finished command die with it (as they do
	// inside bubblewrap, whose PID namespace ends with the command).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	stopWatch()
	res.Duration = time.Since(start)
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	capt.finish(res)
	if quota > 0 {
		// Measured even after a cancel: the next command and the file
		// tools go by it.
		mctx, mcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if used, err := s.measureUsage(mctx); err == nil {
			res.WorkspaceBytes = used
			res.OverQuota = used > quota
		}
		mcancel()
	}
	s.explain(res, cmd.ProcessState, cpu)
	return res, nil
}

// acquire waits for a command slot of the session and of the server; false
// when ctx ended first.
func (s *Sandbox) acquire(ctx context.Context) (release func(), ok bool) {
	var held []chan struct{}
	release = func() {
		for _, c := range held {
			<-c
		}
	}
	for _, c := range []chan struct{}{s.slots, s.m.commands} {
		if c == nil {
			continue
		}
		select {
		case c <- struct{}{}:
			held = append(held, c)
		case <-ctx.Done():
			release()
			return nil, false
		}
	}
	return release, true
}

// commandGauge counts the commands running (and the most at once).
type commandGauge struct {
	mu            sync.Mutex // guards the following
	running, peak int
}

func (g *commandGauge) add(n int) {
	g.mu.Lock()
	g.running += n
	g.peak = max(g.peak, g.running)
	g.mu.Unlock()
}

// RunningCommands is how many commands run now and the most that ran at
// once since the Manager started.
func (m *Manager) RunningCommands() (running, peak int) {
	m.gauge.mu.Lock()
	defer m.gauge.mu.Unlock()
	return m.gauge.running, m.gauge.peak
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
