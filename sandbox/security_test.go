package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func randomSecret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// Without bubblewrap, a command would run as the server's user and could
// read /proc/$PPID/environ (every provider key and FORGE_API_KEYS), the
// database and the other sessions' sandboxes: commands are refused, with a
// clear tool error and a startup log line, unless the operator allows them.
func TestCommandsRefusedWithoutIsolation(t *testing.T) {
	noBwrapPath := t.TempDir()
	for _, c := range []struct {
		name string
		opts Options
		env  string // PATH
	}{
		{"bwrap off", Options{UseBwrap: BwrapOff}, ""},
		{"bwrap not on PATH", Options{}, noBwrapPath},
		{"bwrap not usable", Options{BwrapPath: "/bin/false"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("PATH", c.env)
			}
			var logs bytes.Buffer
			c.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			m, sb := newBox(t, c.opts)
			if m.Isolated() || m.CommandsAllowed() {
				t.Fatalf("isolated %v, commands allowed %v", m.Isolated(), m.CommandsAllowed())
			}
			if !strings.Contains(logs.String(), "commands are disabled") || !strings.Contains(logs.String(), "--unsafe-unsandboxed-commands") {
				t.Errorf("no startup line saying commands are disabled: %s", logs.String())
			}
			res, err := call(t, sb, "bash", map[string]any{"command": "touch ran; cat /proc/$PPID/environ"})
			if err == nil || !errors.Is(err, ErrUnsandboxed) || !strings.Contains(err.Error(), "bash: commands are disabled") ||
				!strings.Contains(err.Error(), "--unsafe-unsandboxed-commands") {
				t.Fatalf("bash without isolation: err %v, result %+v", err, res)
			}
			if _, err := os.Stat(filepath.Join(sb.Dir(), "ran")); err == nil {
				t.Fatal("the command ran")
			}
			if _, err := sb.Run(context.Background(), "true", 0); !errors.Is(err, ErrUnsandboxed) {
				t.Fatalf("Run: %v", err)
			}
			if d := tool(t, sb, "bash").Def().Description; !strings.Contains(d, "Disabled on this server") {
				t.Errorf("bash description does not say it is disabled: %q", d)
			}
			// File tools still work.
			mustCall(t, sb, "write_file", map[string]any{"path": "a.txt", "content": "x\n"})
			if out := mustCall(t, sb, "read_file", map[string]any{"path": "a.txt"}); out != "x\n" {
				t.Fatalf("read_file: %q", out)
			}
		})
	}
	// With the operator's consent they run, and the log says it is unsafe.
	var logs bytes.Buffer
	m, sb := newBox(t, Options{UseBwrap: BwrapOff, UnsafeUnsandboxedCommands: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if m.Isolated() || !m.CommandsAllowed() || !strings.Contains(logs.String(), "UNSAFE: commands run without process isolation") {
		t.Fatalf("unsafe mode: isolated %v, allowed %v, log %s", m.Isolated(), m.CommandsAllowed(), logs.String())
	}
	if out := mustCall(t, sb, "bash", map[string]any{"command": "echo hi"}); out != "hi\n" {
		t.Fatalf("unsafe bash: %q", out)
	}
}

// hostSecrets lays out what a server holds next to its sandboxes: a
// process whose environment carries keys (as forge serve's does), the
// database file beside the sandbox root, and another session's sandbox.
type hostSecrets struct {
	envKey, dbContent, otherContent string
	pid                             int
	db, root, other                 string
}

func newHostSecrets(t *testing.T) *hostSecrets {
	t.Helper()
	dir := t.TempDir()
	h := &hostSecrets{
		envKey:       randomSecret(t, "sk-forgetest-"),
		dbContent:    randomSecret(t, "db-row-"),
		otherContent: randomSecret(t, "other-session-"),
		db:           filepath.Join(dir, "forge.db"),
	}
	h.root = h.db + ".sandboxes"
	writeHost(t, h.db, "SQLite format 3\x00"+h.dbContent)
	// A stand-in for the server process: same user, keys in its
	// environment.
	cmd := exec.Command("sleep", "300")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "OPENAI_API_KEY=" + h.envKey, "FORGE_API_KEYS=" + h.envKey + "=tenant"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	h.pid = cmd.Process.Pid
	return h
}

// probes are commands that read the host's secrets; their combined output
// must not contain any of them.
func (h *hostSecrets) probes() []string {
	return []string{
		"cat /proc/" + strconv.Itoa(h.pid) + "/environ",
		"cat /proc/" + strconv.Itoa(os.Getpid()) + "/environ",
		"cat /proc/$PPID/environ",
		"for f in /proc/[0-9]*/environ; do cat $f; done",
		"cat " + h.db,
		"ls -R " + h.root,
		"cat " + h.other,
		"cat " + filepath.Join(h.root, "*", "work", "secret.txt"),
	}
}

func (h *hostSecrets) leaked(out string) string {
	for _, s := range []string{h.envKey, h.dbContent, h.otherContent} {
		if strings.Contains(out, s) {
			return s
		}
	}
	return ""
}

// TestBubblewrapHidesServerSecrets: a sandboxed bash cannot read the server
// process's environment, the database file, nor another session's sandbox.
// The same probes without isolation do read them (so the probes are sound).
func TestBubblewrapHidesServerSecrets(t *testing.T) {
	requireBwrap(t)
	h := newHostSecrets(t)
	run := func(opts Options) (string, *Manager) {
		opts.Logger = slog.New(slog.DiscardHandler)
		m, err := NewManager(h.root, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(context.Background()) })
		osb, _, err := m.Get(context.Background(), "ses_other")
		if err != nil {
			t.Fatal(err)
		}
		h.other = filepath.Join(osb.Dir(), "secret.txt")
		writeHost(t, h.other, h.otherContent)
		sb, _, err := m.Get(context.Background(), "ses_probe")
		if err != nil {
			t.Fatal(err)
		}
		var all strings.Builder
		for _, p := range h.probes() {
			res, err := call(t, sb, "bash", map[string]any{"command": p})
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			all.WriteString(res.Output + "\n")
		}
		return all.String(), m
	}
	out, m := run(Options{UseBwrap: BwrapOn})
	if !m.Isolated() {
		t.Fatal("not isolated")
	}
	if s := h.leaked(out); s != "" {
		t.Fatalf("a sandboxed command read %q:\n%s", s, out)
	}
	out, _ = run(Options{UseBwrap: BwrapOff, UnsafeUnsandboxedCommands: true})
	for _, s := range []string{h.envKey, h.dbContent, h.otherContent} {
		if !strings.Contains(out, s) {
			t.Errorf("without isolation the probes did not read %q: the probes prove nothing", s)
		}
	}
}

// write_file and edit_file never write through a hard link: its other name
// may be a file outside the sandbox.
func TestHardLinkNotWrittenThrough(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run("openat2="+strconv.FormatBool(!fallback), func(t *testing.T) {
			if fallback {
				noOpenat2.Store(true)
				t.Cleanup(func() { noOpenat2.Store(false) })
			}
			_, sb := newBox(t, Options{UseBwrap: BwrapOff})
			outside := filepath.Join(t.TempDir(), "passwd")
			writeHost(t, outside, "root:x:0:0\n")
			link := filepath.Join(sb.Dir(), "passwd")
			if err := os.Link(outside, link); err != nil {
				t.Skipf("cannot hard link across the temp dirs: %v", err)
			}
			for name, args := range map[string]map[string]any{
				"write_file": {"path": "passwd", "content": "pwned\n"},
				"edit_file":  {"path": "passwd", "old_string": "root", "new_string": "pwned"},
			} {
				_, err := call(t, sb, name, args)
				if err == nil || !strings.Contains(err.Error(), "hard links") {
					t.Errorf("%s through a hard link: %v", name, err)
				}
			}
			if b, _ := os.ReadFile(outside); string(b) != "root:x:0:0\n" {
				t.Fatalf("the file outside changed: %q", b)
			}
			// Once the link is gone the name is an ordinary file again.
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			mustCall(t, sb, "write_file", map[string]any{"path": "passwd", "content": "mine\n"})
			mustCall(t, sb, "edit_file", map[string]any{"path": "passwd", "old_string": "mine", "new_string": "ours"})
			if b, _ := os.ReadFile(outside); string(b) != "root:x:0:0\n" {
				t.Fatalf("the file outside changed: %q", b)
			}
		})
	}
}

// A directory swapped for a symlink between Resolve and the open (a command
// racing the file tool) is refused by the kernel: the open does not follow
// it out, and mkdir does not create directories through it.
func TestSymlinkSwappedAfterResolve(t *testing.T) {
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	outside := t.TempDir()
	writeHost(t, filepath.Join(outside, "f.txt"), "outside\n")
	writeHost(t, filepath.Join(sb.Dir(), "sub", "f.txt"), "inside\n")
	p, err := sb.Resolve("sub/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	newDir, err := sb.Resolve("made/deeper/g.txt")
	if err != nil {
		t.Fatal(err)
	}
	// The swap.
	if err := os.Rename(filepath.Join(sb.Dir(), "sub"), filepath.Join(sb.Dir(), "sub.old")); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"sub", "made"} {
		if err := os.Symlink(outside, filepath.Join(sb.Dir(), l)); err != nil {
			t.Fatal(err)
		}
	}
	if f, err := sb.openInside(p, os.O_RDONLY, 0); err == nil {
		b := make([]byte, 64)
		n, _ := f.Read(b)
		f.Close()
		t.Fatalf("read through a swapped-in symlink: %q", b[:n])
	} else if !errors.Is(err, ErrOutside) {
		t.Errorf("error %v does not wrap ErrOutside", err)
	}
	if f, err := sb.openInside(p, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		f.WriteString("pwned")
		f.Close()
		t.Fatal("opened for writing through a swapped-in symlink")
	}
	if err := sb.mkdirInside(filepath.Dir(newDir)); err == nil {
		t.Fatal("mkdir through a swapped-in symlink")
	}
	if _, err := os.Stat(filepath.Join(outside, "deeper")); err == nil {
		t.Fatal("a directory was created outside")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "f.txt")); string(b) != "outside\n" {
		t.Fatalf("outside file changed: %q", b)
	}
}
