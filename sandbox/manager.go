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
//
// File tools confine every path to work/: absolute paths outside it, ".."
// escapes and symlinks that resolve outside it are refused; files are then
// opened with openat2 and RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a symlink
// swapped in after the check is refused by the kernel; a file with more than
// one hard link is never written to. Commands run with bash in work/, inside
// bubblewrap (work/ and home/ read-write, system directories read-only, no
// network, own PID namespace, so no other process's /proc), in their own
// process group, with a timeout and an output limit. Without bubblewrap a
// command could read the server's environment (/proc/<pid>/environ holds
// every provider key), its database and the other sessions' sandboxes, so
// commands are refused unless Options.UnsafeUnsandboxedCommands says
// otherwise; the Manager logs which it is at start.
package sandbox

import (
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
}

// Manager provisions and tracks the sandboxes of sessions.
type Manager struct {
	root  string
	opts  Options
	log   *slog.Logger
	bwrap string // bubblewrap binary when isolation is active, else ""

	mu     sync.Mutex
	boxes  map[string]*Sandbox
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
	m := &Manager{root: real, opts: opts, log: opts.Logger, boxes: map[string]*Sandbox{}}
	if err := m.setupBwrap(); err != nil {
		return nil, err
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
	// Probe: the same arguments as a real command, running true.
	probeDir, err := os.MkdirTemp(m.root, ".probe-")
	if err != nil {
		return fmt.Errorf("sandbox: probe: %w", err)
	}
	defer os.RemoveAll(probeDir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := append(bwrapArgs(probeDir, probeDir, m.opts.ReadOnlyPaths), "--", "true")
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		if m.opts.UseBwrap == BwrapOn {
			return fmt.Errorf("sandbox: bubblewrap required but not usable: %v: %s", err, out)
		}
		m.log.Warn("sandbox: bubblewrap not usable: no process isolation",
			"bwrap", path, "err", err, "output", string(out))
		return nil
	}
	m.bwrap = path
	m.log.Info("sandbox: bubblewrap process isolation active", "bwrap", path)
	return nil
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
	for _, d := range []string{"work", "home", "tmp", "outputs"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			return nil, false, fmt.Errorf("sandbox: provision: %w", err)
		}
	}
	real, err := filepath.EvalSymlinks(work)
	if err != nil {
		return nil, false, fmt.Errorf("sandbox: provision: %w", err)
	}
	if real != work {
		return nil, false, fmt.Errorf("sandbox: work directory %s is a symlink", work)
	}
	sb := &Sandbox{
		m:     m,
		id:    sessionID,
		base:  base,
		dir:   work,
		procs: map[uint64]context.CancelCauseFunc{},
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
	m.mu.Unlock()
	if sb != nil {
		sb.removed()
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
