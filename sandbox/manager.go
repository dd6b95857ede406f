// Package sandbox gives each session a working directory and the built-in
// tools that act inside it: bash, read_file, write_file, edit_file,
// list_files and grep.
//
// A session's sandbox lives at <root>/<sessionID>/ and holds:
//
//	work/     the working directory the tools see (and the only one they may touch)
//	home/     $HOME for commands (kept out of work/ so caches do not show up in patches)
//	tmp/      $TMPDIR for commands run without bubblewrap
//	outputs/  full outputs of commands whose result was truncated
//	etc/      the passwd and group files commands see
//
// File tools confine every path to work/: absolute paths outside it, ".."
// escapes and symlinks that resolve outside it are refused; files are then
// opened with openat2 and RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a symlink
// swapped in after the check is refused by the kernel; a file with more than
// one hard link is never written to.
//
// Commands (the bash tool, and stdio MCP servers through StdioCommand) run
// with bash in work/, inside bubblewrap (work/ and home/ read-write, system
// directories read-only, no network, own PID namespace, so no other
// process's /proc), in their own process group, with a timeout and an
// output limit. Without bubblewrap a command could read the server's
// environment (/proc/<pid>/environ holds every provider key), its database
// and the other sessions' sandboxes, so commands are refused unless
// Options.UnsafeUnsandboxedCommands says otherwise; the Manager logs which it
// is at start.
//
// # Users and capabilities
//
// A command never has a capability: bubblewrap runs unprivileged, in a user
// namespace of its own, with --cap-drop ALL, and may not create nested user
// namespaces; /, /dev and the system directories are read-only mounts it
// cannot remount. When the server runs as root, each sandbox also has a
// host uid (and gid) of its own from Options.UIDBase/UIDCount, recorded as
// the owner of its work directory (so it survives restarts): its commands,
// and bubblewrap itself, run as that uid with no supplementary group, so
// the host sees them as an ordinary user that owns nothing but its own
// sandbox, and one sandbox's processes and files are not another's. The
// file tools (the server, root) read and write whatever commands create;
// what they create (files, directories) they give to the sandbox's uid, so
// commands may change it. A server that is not root runs commands as its
// own uid (it cannot switch); they still have no capability.
//
// Every command starts as the server's own binary re-executed as a
// launcher (package internal/launcher): it sets the resource limits, and as root
// binds the session's directories in a private mount namespace where the
// unprivileged bubblewrap can reach them (the server's paths may pass
// through directories only root may enter), switches to the sandbox's uid
// and executes bubblewrap.
//
// # Limits
//
// Per process (setrlimit, inherited by everything a command starts): memory
// (Options.MemoryLimit, 1 GiB, as RLIMIT_DATA, with eight times that as the
// bound on address space), CPU time (CPUTime, by
// default the command's timeout; none for stdio servers), file size
// (MaxFileSize, 1 GiB), no core files. Per sandbox: processes and threads
// (MaxProcs, 256; counted per uid, so only with a uid per sandbox), /tmp
// (TmpSize, 256 MiB, an in-memory tmpfs; /dev/shm the smaller of it and
// 64 MiB), disk space of work/ and home/ (WorkspaceQuota, 2 GiB: measured
// during a command and after it; a command crossing it is killed, and until
// files are deleted write_file and edit_file are refused and commands run
// with file writes disabled) and commands at once (SessionCommands, 8; more
// wait their turn). Per server: commands at once (MaxCommands, 64). A limit
// a command hits is named in the bash tool's result ("[memory limit 1 GiB
// exceeded: ...]", "[file size limit ...]", "[too many processes ...]",
// "[killed: CPU time limit ...]", "[killed: workspace quota ...]").
//
// Control groups are not used (docs/decisions.md says why): memory is
// bounded per process, not per session.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/forge-runtime/forge"
)

// BwrapMode says whether commands run inside bubblewrap.
type BwrapMode int

const (
	// BwrapAuto uses bubblewrap when it is installed and works.
	BwrapAuto BwrapMode = iota
	// BwrapOn requires bubblewrap: NewManager fails without it.
	BwrapOn
	// BwrapOff never uses bubblewrap.
	BwrapOff
)

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// CommandTimeout is the default timeout of a bash call (60 s).
	CommandTimeout time.Duration
	// MaxCommandTimeout bounds the timeout a bash call may ask for
	// (10 min, or CommandTimeout when that is larger).
	MaxCommandTimeout time.Duration
	// MaxOutput bounds the output a tool returns to the model (64 KiB).
	MaxOutput int
	// MaxFullOutput bounds the full output kept on disk for a truncated
	// command (16 MiB).
	MaxFullOutput int64
	// UseBwrap selects process isolation (auto by default).
	UseBwrap BwrapMode
	// BwrapPath is the bubblewrap binary (looked up on PATH by default).
	BwrapPath string
	// ReadOnlyPaths are extra host paths bound read-only into the
	// bubblewrap sandbox (toolchains outside /usr, for example).
	ReadOnlyPaths []string
	// LineCountMaxSize: files larger than this are not line-counted in
	// patches (1 MiB).
	LineCountMaxSize int64
	// UnsafeUnsandboxedCommands lets commands (the bash tool, Run) run
	// without bubblewrap isolation, as the server's own user, able to read
	// whatever the server can: its environment (provider keys, API keys),
	// its database and every session's sandbox. Without it, commands are
	// refused with ErrUnsandboxed when isolation is not active. File tools
	// are confined either way. (forge serve --unsafe-unsandboxed-commands.)
	UnsafeUnsandboxedCommands bool

	// Resource limits. Zero takes the default; a negative value turns the
	// limit off. See the package documentation for what each bounds.

	// MemoryLimit bounds the memory each process a command runs may
	// write to (1 GiB; its address space is bounded at eight times it). (forge serve --sandbox-memory.)
	MemoryLimit int64
	// MaxProcs bounds the processes and threads a sandbox runs at once,
	// its commands and stdio servers together (256). It holds when each
	// sandbox has a uid of its own (the server runs as root); it is not
	// set otherwise. (--sandbox-max-procs.)
	MaxProcs int
	// CPUTime bounds the CPU time of each process of a command (default:
	// the command's timeout; stdio servers have no CPU limit).
	// (--sandbox-cpu-time.)
	CPUTime time.Duration
	// MaxFileSize bounds the size of any file a command or stdio server
	// writes (1 GiB). (--sandbox-max-file-size.)
	MaxFileSize int64
	// TmpSize is the size of the sandbox's /tmp, an in-memory filesystem
	// (256 MiB); /dev/shm gets the smaller of it and 64 MiB.
	// (--sandbox-tmp-size.)
	TmpSize int64
	// WorkspaceQuota bounds the disk space work/ and home/ use together
	// (2 GiB). It is measured while a command runs (see
	// QuotaCheckInterval) and after it; a command that crosses it is
	// killed, and until files are deleted write_file and edit_file are
	// refused and commands run with file writes disabled (a file size
	// limit of 0; rm works). (--sandbox-workspace-quota.)
	WorkspaceQuota int64
	// QuotaCheckInterval is how often the workspace of a running command
	// is measured (1 s; longer when measuring takes long).
	QuotaCheckInterval time.Duration
	// SessionCommands bounds the commands a session runs at once (8);
	// more wait their turn. (--sandbox-session-commands.)
	SessionCommands int
	// MaxCommands bounds the commands the server runs at once, all
	// sessions together (64). (--sandbox-max-commands.)
	MaxCommands int
	// UIDBase and UIDCount are the host uids sandboxes run as when the
	// server runs as root: each sandbox gets one of its own (with the gid
	// of the same number) from [UIDBase, UIDBase+UIDCount), by default
	// [1900000000, 1900065536). UIDCount 1 runs every sandbox as UIDBase
	// (a dedicated user; the process limit is then shared). A server that
	// is not root runs commands as its own uid. No uid of the range may
	// belong to anyone else. (--sandbox-uid-base, --sandbox-uid-count.)
	UIDBase  uint32
	UIDCount uint32
	// SnapshotHashBytes bounds the bytes one snapshot of the work
	// directory reads to hash files (256 MiB); past it, and for files
	// larger than LineCountMaxSize, files are compared by size, times,
	// inode and mode.
	SnapshotHashBytes int64
	// MaxSnapshots bounds the workspace snapshots a session keeps (100);
	// the oldest are pruned, with the blobs no other one holds. The
	// snapshots' store is also bounded by WorkspaceQuota: the oldest go
	// first to make room (see snapshots.go).
	MaxSnapshots int
}

// Limit defaults (Options).
const (
	DefaultMemoryLimit       = 1 << 30
	DefaultMaxProcs          = 256
	DefaultMaxFileSize       = 1 << 30
	DefaultTmpSize           = 256 << 20
	DefaultWorkspaceQuota    = 2 << 30
	DefaultSessionCommands   = 8
	DefaultMaxCommands       = 64
	DefaultUIDBase           = 1_900_000_000
	DefaultUIDCount          = 65536
	DefaultSnapshotHashBytes = 256 << 20
	DefaultMaxSnapshots      = 100
)

func (o *Options) setLimitDefaults() {
	def64 := func(v *int64, d int64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0 // off
		}
	}
	defInt := func(v *int, d int) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	def64(&o.MemoryLimit, DefaultMemoryLimit)
	defInt(&o.MaxProcs, DefaultMaxProcs)
	def64(&o.MaxFileSize, DefaultMaxFileSize)
	def64(&o.TmpSize, DefaultTmpSize)
	def64(&o.WorkspaceQuota, DefaultWorkspaceQuota)
	defInt(&o.SessionCommands, DefaultSessionCommands)
	defInt(&o.MaxCommands, DefaultMaxCommands)
	def64(&o.SnapshotHashBytes, DefaultSnapshotHashBytes)
	defInt(&o.MaxSnapshots, DefaultMaxSnapshots)
	if o.QuotaCheckInterval <= 0 {
		o.QuotaCheckInterval = time.Second
	}
	if o.UIDBase == 0 {
		o.UIDBase = DefaultUIDBase
	}
	if o.UIDCount == 0 {
		o.UIDCount = DefaultUIDCount
	}
}

// Manager provisions and tracks the sandboxes of sessions.
type Manager struct {
	root  string
	opts  Options
	log   *slog.Logger
	bwrap string // bubblewrap binary when isolation is active, else ""
	// stage is set when the server is root: the launcher stages the
	// sandbox's directories and switches to the sandbox's uid.
	stage     bool
	nofileMax uint64        // the hard limit on open files commands inherit
	commands  chan struct{} // MaxCommands slots (nil: no limit)
	gauge     commandGauge
	// snapshotHook, set by tests, is called at each entry a snapshot
	// walks.
	snapshotHook func()
	// stores bounds the memory of the workspace snapshot stores loaded.
	stores *storeLRU

	mu     sync.Mutex // guards the following
	boxes  map[string]*Sandbox
	uids   *uidPool // nil unless stage
	closed bool
	wg     sync.WaitGroup
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ErrClosed is returned by Get after Close.
var ErrClosed = errors.New("sandbox: manager closed")

// ErrUnsandboxed is returned by Run (and so by the bash tool) when
// bubblewrap isolation is not active and Options.UnsafeUnsandboxedCommands
// is not set.
var ErrUnsandboxed = errors.New("commands are disabled on this server: bubblewrap process isolation is not available " +
	"(install the bubblewrap package), and the operator did not allow commands without it (forge serve --unsafe-unsandboxed-commands)")

// NewManager returns a Manager keeping sandboxes under root, which it
// creates. It checks once whether bubblewrap isolation is available and logs
// the outcome.
func NewManager(root string, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = 60 * time.Second
	}
	if opts.MaxCommandTimeout <= 0 {
		opts.MaxCommandTimeout = 10 * time.Minute
	}
	if opts.MaxCommandTimeout < opts.CommandTimeout {
		opts.MaxCommandTimeout = opts.CommandTimeout
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = 64 << 10
	}
	if opts.MaxFullOutput <= 0 {
		opts.MaxFullOutput = 16 << 20
	}
	if opts.LineCountMaxSize <= 0 {
		opts.LineCountMaxSize = 1 << 20
	}
	opts.setLimitDefaults()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: create root: %w", err)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("sandbox: resolve root: %w", err)
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return nil, fmt.Errorf("sandbox: resolve root: %w", err)
	}
	m := &Manager{root: real, opts: opts, log: opts.Logger, boxes: map[string]*Sandbox{}, stores: newStoreLRU(snapshotMemoryEntries)}
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil {
		m.nofileMax = nofile.Max
	}
	if opts.MaxCommands > 0 {
		m.commands = make(chan struct{}, opts.MaxCommands)
	}
	// As root, sandboxes run as uids of their own: the launcher must then
	// stage their directories (see launcher.StageDir).
	m.stage = os.Geteuid() == 0 && useLauncher
	if err := m.setupBwrap(); err != nil {
		return nil, err
	}
	if m.bwrap == "" {
		m.stage = false
	}
	if m.stage {
		m.uids = newUIDPool(opts.UIDBase, opts.UIDCount)
		m.uids.load(m.root)
	}
	if m.CommandsAllowed() {
		m.log.Info("sandbox: limits", "memory_per_process", FormatBytes(opts.MemoryLimit),
			"processes", procLimitText(opts.MaxProcs, m.stage), "file_size", FormatBytes(opts.MaxFileSize),
			"tmp", FormatBytes(opts.TmpSize), "workspace_quota", FormatBytes(opts.WorkspaceQuota),
			"session_commands", opts.SessionCommands, "server_commands", opts.MaxCommands,
			"uids", uidRangeText(m.stage, opts.UIDBase, opts.UIDCount))
	}
	switch {
	case m.bwrap != "":
	case opts.UnsafeUnsandboxedCommands:
		m.log.Warn("sandbox: UNSAFE: commands run without process isolation (--unsafe-unsandboxed-commands): " +
			"a command can read the server's environment (provider and API keys), its database and every session's sandbox")
	default:
		m.log.Warn("sandbox: commands are disabled (the bash tool answers with an error): bubblewrap isolation is not available; " +
			"install bubblewrap, or pass --unsafe-unsandboxed-commands to run commands without isolation. File tools work.")
	}
	return m, nil
}

func (m *Manager) setupBwrap() error {
	if m.opts.UseBwrap == BwrapOff {
		m.log.Warn("sandbox: bubblewrap disabled: no process isolation")
		return nil
	}
	path := m.opts.BwrapPath
	if path == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			if m.opts.UseBwrap == BwrapOn {
				return errors.New("sandbox: bubblewrap required but not found (install the bubblewrap package)")
			}
			m.log.Warn("sandbox: bubblewrap not found: no process isolation")
			return nil
		}
		path = p
	}
	// Probe: a real command (the launcher, the limits, the uid, the same
	// bubblewrap arguments) running true.
	m.bwrap = path
	out, err := m.probe()
	if err != nil {
		m.bwrap = ""
		if m.opts.UseBwrap == BwrapOn {
			return fmt.Errorf("sandbox: bubblewrap required but not usable: %v: %s", err, out)
		}
		m.log.Warn("sandbox: bubblewrap not usable: no process isolation",
			"bwrap", path, "err", err, "output", string(out))
		return nil
	}
	m.log.Info("sandbox: bubblewrap process isolation active", "bwrap", path)
	return nil
}

// probe runs true in a throwaway sandbox the way every command runs.
func (m *Manager) probe() ([]byte, error) {
	probeDir, err := os.MkdirTemp(m.root, ".probe-")
	if err != nil {
		return nil, fmt.Errorf("sandbox: probe: %w", err)
	}
	defer os.RemoveAll(probeDir)
	sb := &Sandbox{m: m, base: probeDir, dir: filepath.Join(probeDir, "work"), uid: -1, gid: -1}
	if m.stage {
		sb.uid, sb.gid = int(m.opts.UIDBase), int(m.opts.UIDBase)
	}
	if err := sb.provision(); err != nil {
		return nil, fmt.Errorf("sandbox: probe: %w", err)
	}
	cmd, err := m.command(sb, launch{argv: []string{"true"}, env: commandEnv(sb.home(), "/tmp"), cpu: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(10*time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	err = cmd.Wait()
	return out.Bytes(), err
}

// Isolated reports whether commands run inside bubblewrap.
func (m *Manager) Isolated() bool { return m.bwrap != "" }

// CommandsAllowed reports whether commands run at all: inside bubblewrap,
// or without isolation because Options.UnsafeUnsandboxedCommands is set.
func (m *Manager) CommandsAllowed() bool { return m.bwrap != "" || m.opts.UnsafeUnsandboxedCommands }

// Root is the directory holding all sandboxes.
func (m *Manager) Root() string { return m.root }

// Get returns the session's sandbox, provisioning its directories when they
// do not exist yet (created is then true).
func (m *Manager) Get(ctx context.Context, sessionID string) (*Sandbox, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if !validID.MatchString(sessionID) {
		return nil, false, fmt.Errorf("sandbox: invalid session id %q", sessionID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	if sb, ok := m.boxes[sessionID]; ok {
		return sb, false, nil
	}
	base := filepath.Join(m.root, sessionID)
	work := filepath.Join(base, "work")
	created := false
	if _, err := os.Lstat(work); errors.Is(err, os.ErrNotExist) {
		created = true
	} else if err != nil {
		return nil, false, fmt.Errorf("sandbox: %w", err)
	}
	sb := &Sandbox{
		m:     m,
		id:    sessionID,
		base:  base,
		dir:   work,
		uid:   -1,
		gid:   -1,
		procs: map[uint64]context.CancelCauseFunc{},
		usage: -1,
		snaps: newSnapStore(base),
	}
	if m.opts.SessionCommands > 0 {
		sb.slots = make(chan struct{}, m.opts.SessionCommands)
	}
	if err := sb.provision(); err != nil {
		if sb.uid >= 0 {
			m.uids.release(sessionID, uint32(sb.uid))
		}
		return nil, false, fmt.Errorf("sandbox: provision: %w", err)
	}
	m.boxes[sessionID] = sb
	if created {
		m.log.Debug("sandbox: provisioned", "session_id", sessionID, "dir", work)
	}
	return sb, created, nil
}

// Open is Get for the engine: the session's sandbox as a forge.Sandbox.
func (m *Manager) Open(ctx context.Context, sessionID string) (forge.Sandbox, bool, error) {
	sb, created, err := m.Get(ctx, sessionID)
	if err != nil {
		return nil, false, err
	}
	return sb, created, nil
}

// ToolNames are the names of the tools every sandbox offers (Sandbox.Tools).
func (m *Manager) ToolNames() []string { return slices.Clone(toolNames) }

// Stop kills the running commands of the session's sandbox (with their
// process groups). The sandbox stays usable.
func (m *Manager) Stop(sessionID string) {
	m.mu.Lock()
	sb := m.boxes[sessionID]
	m.mu.Unlock()
	if sb != nil {
		sb.Stop()
	}
}

// Remove stops the session's sandbox, waits for its commands to end and
// deletes its directories.
func (m *Manager) Remove(sessionID string) error {
	if !validID.MatchString(sessionID) {
		return fmt.Errorf("sandbox: invalid session id %q", sessionID)
	}
	m.mu.Lock()
	sb := m.boxes[sessionID]
	delete(m.boxes, sessionID)
	if sb != nil && sb.uid >= 0 {
		m.uids.release(sessionID, uint32(sb.uid))
	}
	m.mu.Unlock()
	if sb != nil {
		sb.removed()
		if sb.snaps != nil {
			m.stores.forget(sb.snaps)
		}
	}
	if err := os.RemoveAll(filepath.Join(m.root, sessionID)); err != nil {
		return fmt.Errorf("sandbox: remove: %w", err)
	}
	return nil
}

// Close stops every sandbox and waits, until ctx ends, for all commands the
// Manager started. Get fails afterwards; directories are kept.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	boxes := make([]*Sandbox, 0, len(m.boxes))
	for _, sb := range m.boxes {
		boxes = append(boxes, sb)
	}
	m.mu.Unlock()
	for _, sb := range boxes {
		sb.Stop()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin registers a command with the Manager; false after Close.
func (m *Manager) begin() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}
