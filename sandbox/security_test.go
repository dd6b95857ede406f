package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
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

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a server running as root is what this exercises (run the tests as root)")
	}
}

// hostProcess finds the host pid of the process whose command line is
// argv, waiting up to 5 s for it to appear.
func hostProcess(t *testing.T, argv ...string) int {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			if b, err := os.ReadFile(d + "/cmdline"); err == nil && string(b) == want {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no host process runs %q", argv)
	return 0
}

func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// A server running as root used to hand its sandboxes uid 0 with every
// capability: mount -o remount,bind,rw /usr then wrote the host's /usr,
// /etc/hosts and /etc/passwd. Now a command runs as an unprivileged uid of
// its own with no capability at all, and none of that works.
func TestRootServerSandboxIsUnprivileged(t *testing.T) {
	requireBwrap(t)
	requireRoot(t)
	secret := randomSecret(t, "sk-server-env-")
	t.Setenv("FORGE_TEST_SERVER_SECRET", secret)
	_, sb := newBox(t, Options{UseBwrap: BwrapOn})
	uid := sb.UID()
	if uid <= 0 {
		t.Errorf("sandbox uid %d: a root server must give its sandboxes an unprivileged uid", uid)
	}
	run := func(cmd string) forge.ToolResult {
		t.Helper()
		res, err := call(t, sb, "bash", map[string]any{"command": cmd})
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		return res
	}

	caps := run("grep ^Cap /proc/self/status").Output
	if n := strings.Count(caps, "\t0000000000000000\n"); n != 5 {
		t.Errorf("capabilities inside the sandbox (want all five sets empty):\n%s", caps)
	}
	ids := strings.Fields(run("id -u; id -g; id -G; id -un").Output)
	if want := []string{itoa(uid), itoa(uid), itoa(uid), "sandbox"}; !slices.Equal(ids, want) {
		t.Errorf("ids inside: %q, want %q", ids, want)
	}

	hosts, _ := os.ReadFile("/etc/hosts")
	passwd, _ := os.ReadFile("/etc/passwd")
	marker := filepath.Join("/usr/local/share", randomSecret(t, "forge-escape-"))
	t.Cleanup(func() { os.Remove(marker) })
	for _, cmd := range []string{
		"mount -o remount,bind,rw /usr",
		"mount -o remount,bind,rw /usr; touch " + marker,
		"touch " + marker,
		"echo 6.6.6.6 pwned >> /etc/hosts",
		"echo pwned::0:0::/:/bin/sh >> /etc/passwd",
		"mount -t tmpfs none " + sb.Dir(),
		"unshare -r id",    // no nested user namespace to gain capabilities in
		"su -c id root",    // setuid binaries grant nothing
		"kill -9 -1; true", // harmless: only the sandbox's own processes are visible
	} {
		if res := run(cmd); !res.IsError && !strings.HasPrefix(cmd, "kill") {
			t.Errorf("%q succeeded inside the sandbox: %s", cmd, res.Output)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("a sandboxed command created %s on the host", marker)
	}
	if b, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(b, hosts) {
		t.Fatal("a sandboxed command changed the host's /etc/hosts")
	}
	if b, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(b, passwd) {
		t.Fatal("a sandboxed command changed the host's /etc/passwd")
	}
	if opts := strings.TrimSpace(run("findmnt -no OPTIONS /usr").Output); !strings.HasPrefix(opts, "ro,") {
		t.Errorf("/usr inside: %q, want read-only", opts)
	}

	// The environment of the sandbox's pid 1 (bubblewrap) and of every
	// process it sees is the sandbox's own minimal one, never the server's.
	env := run("cat /proc/1/environ; cat /proc/$PPID/environ; for f in /proc/[0-9]*/environ; do cat $f; done").Output
	if strings.Contains(env, secret) || !strings.Contains(env, "HOME="+sb.home()) {
		t.Fatalf("environment seen inside:\n%s", env)
	}

	// The host sees the command as the sandbox's uid, without capabilities.
	done := make(chan forge.ToolResult, 1)
	go func() { done <- run("exec sleep 31.7") }()
	pid := hostProcess(t, "sleep", "31.7")
	if got, want := statusField(t, pid, "Uid"), strings.Repeat(itoa(uid)+" ", 4); got+" " != want {
		t.Errorf("host view of the command's uids: %q, want %q", got, want)
	}
	if got := statusField(t, pid, "CapEff"); got != "0000000000000000" {
		t.Errorf("host view of the command's capabilities: %s", got)
	}
	sb.Stop()
	<-done
}

// Files keep working both ways: the server's file tools read and change
// what commands create (even mode 0600), and what the file tools create
// belongs to the sandbox's uid, so commands may change it.
func TestSandboxFileOwnership(t *testing.T) {
	requireBwrap(t)
	requireRoot(t)
	_, sb := newBox(t, Options{UseBwrap: BwrapOn})
	uid := sb.UID()
	mustCall(t, sb, "bash", map[string]any{"command": "umask 077; echo from-command > private.txt; mkdir -p made/deep"})
	if out := mustCall(t, sb, "read_file", map[string]any{"path": "private.txt"}); out != "from-command\n" {
		t.Fatalf("read_file of a command's 0600 file: %q", out)
	}
	mustCall(t, sb, "edit_file", map[string]any{"path": "private.txt", "old_string": "from-command", "new_string": "edited"})
	mustCall(t, sb, "write_file", map[string]any{"path": "made/deep/tool.txt", "content": "by the tool\n"})
	mustCall(t, sb, "write_file", map[string]any{"path": "new/dir/tool.txt", "content": "by the tool\n"})
	writeHost(t, filepath.Join(sb.Dir(), "legacy.txt"), "written by root\n") // a file from before sandboxes had their uid
	mustCall(t, sb, "write_file", map[string]any{"path": "legacy.txt", "content": "rewritten\n"})
	for _, p := range []string{"private.txt", "made/deep/tool.txt", "new", "new/dir", "new/dir/tool.txt", "legacy.txt"} {
		if owner, _ := ownerOf(filepath.Join(sb.Dir(), p)); int(owner) != uid {
			t.Errorf("%s is owned by %d, want the sandbox's uid %d", p, owner, uid)
		}
	}
	out := mustCall(t, sb, "bash", map[string]any{"command": "echo more >> new/dir/tool.txt && touch new/dir/other made/deep/x && " +
		"echo again >> legacy.txt && cat private.txt new/dir/tool.txt legacy.txt"})
	if out != "edited\nby the tool\nmore\nrewritten\nagain\n" {
		t.Fatalf("the command's view: %q", out)
	}
}

// Each sandbox has a uid of its own (so its process limit is its own, and
// no sandbox may touch another's files or processes even on the host), the
// uid survives a restart, and a sandbox made before uids (owned by root)
// is given its uid.
func TestSandboxUIDs(t *testing.T) {
	requireBwrap(t)
	requireRoot(t)
	root := t.TempDir()
	legacy := filepath.Join(root, "ses_legacy", "work")
	writeHost(t, filepath.Join(legacy, "old.txt"), "old\n")
	open := func(opts Options) (*Manager, map[string]int) {
		opts.UseBwrap = BwrapOn
		opts.Logger = slog.New(slog.DiscardHandler)
		m, err := NewManager(root, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(context.Background()) })
		uids := map[string]int{}
		for _, id := range []string{"ses_a", "ses_b", "ses_legacy"} {
			sb, _, err := m.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			uids[id] = sb.UID()
			if owner, _ := ownerOf(sb.Dir()); int(owner) != sb.UID() {
				t.Errorf("%s: work owned by %d, uid %d", id, owner, sb.UID())
			}
		}
		return m, uids
	}
	m, first := open(Options{})
	for id, uid := range first {
		if uid < DefaultUIDBase || uid >= DefaultUIDBase+DefaultUIDCount {
			t.Errorf("%s: uid %d outside the default range", id, uid)
		}
	}
	if first["ses_a"] == first["ses_b"] || first["ses_a"] == first["ses_legacy"] || first["ses_b"] == first["ses_legacy"] {
		t.Fatalf("sandboxes share uids: %v", first)
	}
	if owner, _ := ownerOf(filepath.Join(legacy, "old.txt")); int(owner) != first["ses_legacy"] {
		t.Errorf("the legacy sandbox's file is owned by %d", owner)
	}
	m.Close(context.Background())
	m2, again := open(Options{})
	if !maps.Equal(first, again) {
		t.Fatalf("uids after a restart %v, before %v", again, first)
	}
	sb, _, err := m2.Get(context.Background(), "ses_new")
	if err != nil {
		t.Fatal(err)
	}
	for id, uid := range first {
		if sb.UID() == uid {
			t.Fatalf("a new sandbox got the uid of %s (%d), found on disk", id, uid)
		}
	}
	// One dedicated uid for all: UIDCount 1.
	m3, err := NewManager(t.TempDir(), Options{UseBwrap: BwrapOn, UIDBase: 1_950_000_000, UIDCount: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close(context.Background())
	for _, id := range []string{"ses_x", "ses_y"} {
		sb, _, err := m3.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.UID() != 1_950_000_000 {
			t.Errorf("%s: uid %d with a one-uid range", id, sb.UID())
		}
		if out := mustCall(t, sb, "bash", map[string]any{"command": "id -u"}); out != "1950000000\n" {
			t.Errorf("%s: id -u %q", id, out)
		}
	}
}

// A stdio program (an MCP server) is built by the same function as a bash
// command: no capability, the sandbox's uid, its limits and its /tmp.
func TestStdioCommandIsHardened(t *testing.T) {
	requireBwrap(t)
	m, sb := newBox(t, Options{UseBwrap: BwrapOn, MemoryLimit: 512 << 20, MaxProcs: 100, MaxFileSize: 8 << 20, TmpSize: 4 << 20})
	cmd, err := m.StdioCommand(context.Background(), sb.SessionID(), []string{"bash", "-c",
		"grep ^CapEff /proc/self/status; id -u; ulimit -d; ulimit -v; ulimit -u; ulimit -f; ulimit -t; df -k --output=size /tmp | tail -1; " +
			"touch /usr/x 2>/dev/null || echo ro; echo $FOO; cat /proc/1/environ | tr '\\0' '\\n' | grep -c SECRET"},
		map[string]string{"FOO": "bar"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORGE_TEST_SECRET", "x")
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(err.Error(), "exit status 1") { // grep -c finding nothing
		t.Fatalf("%v: %s", err, out)
	}
	wantUID := os.Getuid()
	procs := "unlimited" // the process limit needs a uid of its own
	if sb.UID() >= 0 {
		wantUID, procs = sb.UID(), "100"
	}
	want := []string{"CapEff:\t0000000000000000", itoa(wantUID), "524288", "4194304", procs, "8192", "unlimited", "4096", "ro", "bar", "0"}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := range got {
		got[i] = strings.TrimSpace(got[i])
	}
	if !slices.Equal(got, want) {
		t.Fatalf("stdio program's view:\n%q\nwant\n%q", got, want)
	}
}

// TestReadOnlyPathsUnderTmpAreVisible: a read-only path under /tmp (a
// checkout there holding an operator's MCP command) is seen inside the
// sandbox, above its own /tmp, and cannot be written.
func TestReadOnlyPathsUnderTmpAreVisible(t *testing.T) {
	requireBwrap(t)
	dir, err := os.MkdirTemp("/tmp", "forge-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // as a checkout's directories are
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/tool.txt", []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, sb := newBox(t, Options{UseBwrap: BwrapOn, ReadOnlyPaths: []string{dir}})
	cmd, err := m.StdioCommand(context.Background(), sb.SessionID(), []string{"bash", "-c",
		"cat " + dir + "/tool.txt; echo; touch " + dir + "/x 2>/dev/null || echo ro; touch /tmp/y && echo tmp-writable"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != "from the host\nro\ntmp-writable" {
		t.Fatalf("%v: %q", err, got)
	}
}
