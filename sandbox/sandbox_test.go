package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

func newBox(t testing.TB, opts Options) (*Manager, *Sandbox) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.UIDBase == 0 {
		// Tests run in parallel, each with a Manager: as servers sharing
		// a host must, they use disjoint uid ranges.
		opts.UIDBase, opts.UIDCount = testUIDs()
	}
	m, err := NewManager(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	sb, created, err := m.Get(context.Background(), "ses_test")
	if err != nil || !created {
		t.Fatalf("get: %v created=%v", err, created)
	}
	return m, sb
}

var testUIDRanges atomic.Uint32

// testUIDs is a uid range of 100 no other Manager of the test binary uses.
func testUIDs() (base, count uint32) {
	return DefaultUIDBase + 1_000_000 + testUIDRanges.Add(1)*100, 100
}

// commandModes are the two ways commands may run: inside bubblewrap (skipped
// when it is not installed), and without isolation as an operator allows
// with --unsafe-unsandboxed-commands.
var commandModes = []struct {
	name string
	opts Options
}{
	{"bwrap", Options{UseBwrap: BwrapOn}},
	{"unsandboxed", Options{UseBwrap: BwrapOff, UnsafeUnsandboxedCommands: true}},
}

// forEachCommandMode runs f as a subtest per command mode, with base's
// settings plus the mode's.
func forEachCommandMode(t *testing.T, base Options, f func(t *testing.T, isolated bool, m *Manager, sb *Sandbox)) {
	for _, mode := range commandModes {
		t.Run(mode.name, func(t *testing.T) {
			if mode.opts.UseBwrap == BwrapOn {
				requireBwrap(t)
			}
			o := base
			o.UseBwrap, o.UnsafeUnsandboxedCommands = mode.opts.UseBwrap, mode.opts.UnsafeUnsandboxedCommands
			m, sb := newBox(t, o)
			f(t, m.Isolated(), m, sb)
		})
	}
}

func requireBwrap(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap not installed (/usr/bin/bwrap missing): isolation not exercised; install the bubblewrap package")
	}
}

func tool(t *testing.T, sb *Sandbox, name string) forge.Tool {
	t.Helper()
	for _, tl := range sb.Tools() {
		if tl.Def().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

func call(t *testing.T, sb *Sandbox, name string, args any) (forge.ToolResult, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return tool(t, sb, name).Call(context.Background(), raw)
}

func mustCall(t *testing.T, sb *Sandbox, name string, args any) string {
	t.Helper()
	res, err := call(t, sb, name, args)
	if err != nil || res.IsError {
		t.Fatalf("%s %v: err=%v result=%+v", name, args, err, res)
	}
	return res.Output
}

// giveToSandbox gives the files a test wrote into the work directory
// directly (as the server's user) to the sandbox's uid, as the file tools
// do for the files they write.
func giveToSandbox(t *testing.T, sb *Sandbox) {
	t.Helper()
	if sb.UID() >= 0 {
		if err := chownTree(sb.Dir(), sb.uid, sb.gid); err != nil {
			t.Fatal(err)
		}
	}
}

func writeHost(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestToolDefs(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	var names []string
	for _, tl := range sb.Tools() {
		d := tl.Def()
		names = append(names, d.Name)
		var schema map[string]any
		if err := json.Unmarshal(d.InputSchema, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s: bad schema %s: %v", d.Name, d.InputSchema, err)
		}
		if d.Description == "" {
			t.Errorf("%s: no description", d.Name)
		}
		// Bad arguments give a clear error, never a panic.
		for _, bad := range []string{`[]`, `{"nope":1}`, `"x"`} {
			if _, err := tl.Call(context.Background(), json.RawMessage(bad)); err == nil {
				t.Errorf("%s %s: no error", d.Name, bad)
			} else if !strings.Contains(err.Error(), d.Name) {
				t.Errorf("%s %s: error does not name the tool: %v", d.Name, bad, err)
			}
		}
	}
	if got := strings.Join(names, ","); got != "bash,read_file,write_file,edit_file,list_files,grep" {
		t.Fatalf("tools %s", got)
	}
}

func TestEscapesRefused(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	outside := t.TempDir()
	writeHost(t, filepath.Join(outside, "secret.txt"), "secret\n")
	writeHost(t, filepath.Join(sb.Dir(), "ok.txt"), "fine\n")
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(sb.Dir(), "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(sb.Dir(), "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "nothing"), filepath.Join(sb.Dir(), "dangling")); err != nil {
		t.Fatal(err)
	}
	bad := []string{"../x", "../../etc/passwd", "/etc/passwd", "sub/../../x", "link", "linkdir/secret.txt", "linkdir/new.txt", "linkdir", "dangling", filepath.Join(outside, "secret.txt")}
	for _, p := range bad {
		cases := map[string]map[string]any{
			"read_file":  {"path": p},
			"write_file": {"path": p, "content": "pwned"},
			"edit_file":  {"path": p, "old_string": "secret", "new_string": "pwned"},
			"list_files": {"path": p},
			"grep":       {"pattern": "secret", "path": p},
		}
		for name, args := range cases {
			res, err := call(t, sb, name, args)
			if err == nil {
				t.Errorf("%s %q: not refused: %+v", name, p, res)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "secret\n" {
		t.Fatalf("outside file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("file created outside")
	}
	if _, err := os.Stat(filepath.Join(outside, "nothing")); err == nil {
		t.Fatal("dangling symlink target created")
	}
	// grep of the whole directory does not follow the symlinks out.
	if out := mustCall(t, sb, "grep", map[string]any{"pattern": "secret"}); out != "[no matches]" {
		t.Fatalf("grep followed a symlink out: %q", out)
	}
	// Absolute paths inside, and symlinks that stay inside, are fine.
	if out := mustCall(t, sb, "read_file", map[string]any{"path": filepath.Join(sb.Dir(), "ok.txt")}); out != "fine\n" {
		t.Fatalf("absolute inside: %q", out)
	}
	if err := os.Symlink("ok.txt", filepath.Join(sb.Dir(), "inner")); err != nil {
		t.Fatal(err)
	}
	if out := mustCall(t, sb, "read_file", map[string]any{"path": "inner"}); out != "fine\n" {
		t.Fatalf("inner symlink: %q", out)
	}
	// A FIFO is refused rather than blocking.
	if err := mkfifo(filepath.Join(sb.Dir(), "fifo")); err == nil {
		if _, err := call(t, sb, "read_file", map[string]any{"path": "fifo"}); err == nil {
			t.Fatal("fifo read")
		}
	}
}

func TestFileTools(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	mustCall(t, sb, "write_file", map[string]any{"path": "src/a.go", "content": "package a\n\nfunc A() int { return 1 }\n"})
	mustCall(t, sb, "write_file", map[string]any{"path": "src/b.txt", "content": "foo\nbar\nfoo\n"})
	if out := mustCall(t, sb, "read_file", map[string]any{"path": "src/a.go", "offset": 3, "limit": 1}); out != "func A() int { return 1 }\n" {
		t.Fatalf("read offset: %q", out)
	}
	// edit_file: exact replace, not found, ambiguous, replace_all.
	mustCall(t, sb, "edit_file", map[string]any{"path": "src/a.go", "old_string": "return 1", "new_string": "return 2"})
	if b, _ := os.ReadFile(filepath.Join(sb.Dir(), "src/a.go")); !strings.Contains(string(b), "return 2") {
		t.Fatalf("edit: %q", b)
	}
	if _, err := call(t, sb, "edit_file", map[string]any{"path": "src/a.go", "old_string": "return 9", "new_string": "x"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("not found: %v", err)
	}
	if _, err := call(t, sb, "edit_file", map[string]any{"path": "src/b.txt", "old_string": "foo", "new_string": "baz"}); err == nil || !strings.Contains(err.Error(), "occurs 2 times") {
		t.Fatalf("ambiguous: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(sb.Dir(), "src/b.txt")); string(b) != "foo\nbar\nfoo\n" {
		t.Fatalf("ambiguous edit changed the file: %q", b)
	}
	mustCall(t, sb, "edit_file", map[string]any{"path": "src/b.txt", "old_string": "foo", "new_string": "baz", "replace_all": true})
	if b, _ := os.ReadFile(filepath.Join(sb.Dir(), "src/b.txt")); string(b) != "baz\nbar\nbaz\n" {
		t.Fatalf("replace_all: %q", b)
	}
	if _, err := call(t, sb, "edit_file", map[string]any{"path": "nope.txt", "old_string": "a", "new_string": "b"}); err == nil {
		t.Fatal("edit of a missing file")
	}
	// list_files
	if out := mustCall(t, sb, "list_files", map[string]any{}); out != "src/\nsrc/a.go\nsrc/b.txt" {
		t.Fatalf("list: %q", out)
	}
	if out := mustCall(t, sb, "list_files", map[string]any{"pattern": "*.go"}); out != "src/a.go" {
		t.Fatalf("list pattern: %q", out)
	}
	// grep
	if out := mustCall(t, sb, "grep", map[string]any{"pattern": "ba[rz]"}); out != "src/b.txt:1:baz\nsrc/b.txt:2:bar\nsrc/b.txt:3:baz" {
		t.Fatalf("grep: %q", out)
	}
	if out := mustCall(t, sb, "grep", map[string]any{"pattern": "FUNC", "ignore_case": true, "glob": "*.go"}); out != "src/a.go:3:func A() int { return 2 }" {
		t.Fatalf("grep -i: %q", out)
	}
	if out := mustCall(t, sb, "grep", map[string]any{"pattern": "bar", "path": "src/b.txt"}); out != "src/b.txt:2:bar" {
		t.Fatalf("grep file: %q", out)
	}
	if _, err := call(t, sb, "grep", map[string]any{"pattern": "("}); err == nil {
		t.Fatal("bad regexp accepted")
	}
}

func TestBashTimeoutAndTruncation(t *testing.T) {
	forEachCommandMode(t, Options{MaxOutput: 1000}, testBashTimeoutAndTruncation)
}

func testBashTimeoutAndTruncation(t *testing.T, isolated bool, _ *Manager, sb *Sandbox) {
	start := time.Now()
	res, err := call(t, sb, "bash", map[string]any{"command": "echo started; sleep 30", "timeout_ms": 300})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}
	if !res.IsError || !strings.Contains(res.Output, "timed out") || !strings.Contains(res.Output, "started") {
		t.Fatalf("timeout result: %+v", res)
	}
	// Background children die with the command's process group (inside
	// bubblewrap, with its PID namespace: TestBubblewrap).
	if !isolated {
		res, err = call(t, sb, "bash", map[string]any{"command": "(sleep 30; touch late) & echo $! > bg.pid"})
		if err != nil || res.IsError {
			t.Fatalf("bg: %v %+v", err, res)
		}
		pid, _ := os.ReadFile(filepath.Join(sb.Dir(), "bg.pid"))
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
			if err != nil || bytes.Contains(st, []byte(") Z")) {
				break // gone, or a zombie
			}
			if time.Now().After(deadline) {
				t.Fatalf("background process %s still running", pid)
			}
		}
	}

	r, err := sb.Run(context.Background(), "seq 1 10000", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || len(r.Output) > 1100 || !strings.Contains(r.Output, "[output truncated: ") ||
		!strings.HasPrefix(r.Output, "1\n2\n") || !strings.HasSuffix(r.Output, "9999\n10000\n") {
		t.Fatalf("truncation: %d bytes %q", len(r.Output), r.Output)
	}
	full, err := sb.FullOutput(r.OutputID)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(full)
	full.Close()
	var exp strings.Builder
	for i := 1; i <= 10000; i++ {
		exp.WriteString(itoa(i) + "\n")
	}
	if string(all) != exp.String() || r.TotalBytes != int64(exp.Len()) {
		t.Fatalf("full output: %d bytes, want %d", len(all), exp.Len())
	}
	omitted := r.TotalBytes - int64(len(r.Output)-len(markerLine(r.Output)))
	if !strings.Contains(r.Output, "[output truncated: "+itoa(int(omitted))+" bytes omitted]") {
		t.Fatalf("marker count: want %d in %q", omitted, markerLine(r.Output))
	}
	res, _ = call(t, sb, "bash", map[string]any{"command": "seq 1 10000"})
	if !strings.Contains(res.Output, "saved as "+"out-") {
		t.Fatalf("tool result does not name the full output: %q", res.Output[len(res.Output)-200:])
	}
	// Exit codes and stderr.
	res, _ = call(t, sb, "bash", map[string]any{"command": "echo oops >&2; exit 3"})
	if !res.IsError || res.Output != "oops\n[exit code 3]" {
		t.Fatalf("exit: %q", res.Output)
	}
	// The host environment does not leak.
	t.Setenv("FORGE_SECRET_TEST", "hunter2")
	if out := mustCall(t, sb, "bash", map[string]any{"command": "echo \"[$FORGE_SECRET_TEST]\"; pwd"}); out != "[]\n"+sb.Dir()+"\n" {
		t.Fatalf("env/pwd: %q", out)
	}
}

func markerLine(s string) string {
	i := strings.Index(s, "[output truncated: ")
	j := strings.Index(s[i:], "\n")
	return s[i : i+j+1]
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestStopKillsCommand(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{}, func(t *testing.T, _ bool, m *Manager, sb *Sandbox) { testStopKillsCommand(t, m, sb) })
}

func testStopKillsCommand(t *testing.T, m *Manager, sb *Sandbox) {
	done := make(chan forge.ToolResult, 1)
	go func() {
		res, _ := tool(t, sb, "bash").Call(context.Background(), json.RawMessage(`{"command":"sleep 30"}`))
		done <- res
	}()
	waitRunning(t, sb)
	start := time.Now()
	m.Stop("ses_test")
	select {
	case res := <-done:
		if !res.IsError || !strings.Contains(res.Output, "sandbox stopped") {
			t.Fatalf("stop result: %+v", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not kill the command")
	}
	t.Logf("stopped in %s", time.Since(start))
	// The sandbox stays usable after Stop.
	if out := mustCall(t, sb, "bash", map[string]any{"command": "echo again"}); out != "again\n" {
		t.Fatal(out)
	}
	// Context cancellation kills too.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { waitRunning(t, sb); cancel() }()
	if _, err := tool(t, sb, "bash").Call(ctx, json.RawMessage(`{"command":"sleep 30"}`)); err == nil {
		t.Fatal("canceled command returned no error")
	}
	// Remove stops, waits and deletes; Get provisions afresh.
	go func() { tool(t, sb, "bash").Call(context.Background(), json.RawMessage(`{"command":"sleep 30"}`)) }()
	waitRunning(t, sb)
	if err := m.Remove("ses_test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.Dir()); !os.IsNotExist(err) {
		t.Fatalf("work dir still there: %v", err)
	}
	if _, err := sb.Run(context.Background(), "true", 0); err == nil {
		t.Fatal("run on a removed sandbox")
	}
	if _, created, err := m.Get(context.Background(), "ses_test"); err != nil || !created {
		t.Fatalf("re-get: %v %v", err, created)
	}
	if _, _, err := m.Get(context.Background(), "../evil"); err == nil {
		t.Fatal("bad session id accepted")
	}
}

func waitRunning(t *testing.T, sb *Sandbox) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		sb.mu.Lock()
		n := len(sb.procs)
		sb.mu.Unlock()
		if n > 0 {
			time.Sleep(50 * time.Millisecond)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("command never started")
}

func TestDiff(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{LineCountMaxSize: 1000}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) { testDiff(t, sb) })
}

func testDiff(t *testing.T, sb *Sandbox) {
	d := sb.Dir()
	writeHost(t, filepath.Join(d, "keep.txt"), "same\n")
	writeHost(t, filepath.Join(d, "mod.txt"), "a\nb\nc\nd\n")
	writeHost(t, filepath.Join(d, "del.txt"), "x\ny\nz")
	writeHost(t, filepath.Join(d, "big.txt"), strings.Repeat("line\n", 300))
	writeHost(t, filepath.Join(d, ".git/HEAD"), "ref\n")
	giveToSandbox(t, sb) // written by the test (root) directly, not by a file tool
	before, err := sb.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := sb.Diff(t.Context(), before); !p.Empty() {
		t.Fatalf("no change, patch %+v", p)
	}
	writeHost(t, filepath.Join(d, "mod.txt"), "a\nB\nc\nd\ne\nf\n") // -b +B +e +f
	os.Remove(filepath.Join(d, "del.txt"))
	writeHost(t, filepath.Join(d, "new/added.txt"), "1\n2\n")
	writeHost(t, filepath.Join(d, "bin.dat"), "\x00\x01\x02")
	writeHost(t, filepath.Join(d, "big.txt"), strings.Repeat("line\n", 301))
	writeHost(t, filepath.Join(d, ".git/HEAD"), "other\n")
	p, after, err := sb.Diff(t.Context(), before)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(p)
	want := `{"files":[` +
		`{"path":"big.txt","status":"modified","added":0,"removed":0,"too_large":true},` +
		`{"path":"bin.dat","status":"added","added":0,"removed":0,"binary":true},` +
		`{"path":"del.txt","status":"deleted","added":0,"removed":3},` +
		`{"path":"mod.txt","status":"modified","added":3,"removed":1},` +
		`{"path":"new/added.txt","status":"added","added":2,"removed":0}]}`
	if string(got) != want {
		t.Fatalf("patch\n got %s\nwant %s", got, want)
	}
	// Changes made by bash are seen too; the next step starts from after.
	mustCall(t, sb, "bash", map[string]any{"command": "printf 'q\\n' >> keep.txt"})
	p = Compare(after, mustSnap(t, sb))
	if len(p.Files) != 1 || p.Files[0] != (FileChange{Path: "keep.txt", Status: Modified, Added: 1}) {
		t.Fatalf("bash change: %+v", p)
	}
}

func mustSnap(t *testing.T, sb *Sandbox) *Snapshot {
	s, err := sb.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEditCounts(t *testing.T) {
	t.Parallel()
	h := func(s string) []uint64 { return lineHashes([]byte(s)) }
	for _, c := range []struct {
		a, b       string
		add, remov int
	}{
		{"", "a\nb\n", 2, 0},
		{"a\nb\n", "", 0, 2},
		{"a\nb\nc\n", "a\nc\n", 0, 1},
		{"a\nb\nc\n", "c\nb\na\n", 2, 2},
		{"a\nb\nc\nd\n", "a\nx\nc\ny\n", 2, 2},
		{"a\nb\n", "b\na\nb\n", 1, 0},
	} {
		add, rem := editCounts(h(c.a), h(c.b))
		if add != c.add || rem != c.remov {
			t.Errorf("%q -> %q: +%d -%d, want +%d -%d", c.a, c.b, add, rem, c.add, c.remov)
		}
	}
}

func TestBubblewrap(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap not installed (/usr/bin/bwrap missing): isolation not exercised; install the bubblewrap package")
	}
	var logs bytes.Buffer
	m, sb := newBox(t, Options{UseBwrap: BwrapOn, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !m.Isolated() || !strings.Contains(logs.String(), "bubblewrap process isolation active") {
		t.Fatalf("not isolated; log: %s", logs.String())
	}
	out := mustCall(t, sb, "bash", map[string]any{"command": "echo hi > made.txt; pwd; echo $$; ls /proc | grep -c '^[0-9]'"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != sb.Dir() || lines[1] != "2" {
		t.Fatalf("inside bwrap: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(sb.Dir(), "made.txt")); string(b) != "hi\n" {
		t.Fatalf("work dir not writable through bwrap: %q", b)
	}
	osb, _, err := m.Get(context.Background(), "ses_other")
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(osb.Dir(), "secret.txt")
	writeHost(t, other, "other session\n")
	// System dirs read-only, host secrets and other sessions invisible,
	// no network.
	for _, cmd := range []string{
		"touch /usr/x", "cat /etc/shadow", "cat " + other, "ls /root",
		"bash -c 'echo > /dev/tcp/127.0.0.1/22'",
	} {
		res, err := call(t, sb, "bash", map[string]any{"command": cmd})
		if err != nil || !res.IsError {
			t.Errorf("%q succeeded inside bwrap: %+v %v", cmd, res, err)
		}
	}
	// Timeout kills the whole namespace.
	res, _ := call(t, sb, "bash", map[string]any{"command": "sleep 30 & sleep 30", "timeout_ms": 300})
	if !res.IsError || !strings.Contains(res.Output, "timed out") {
		t.Fatalf("bwrap timeout: %+v", res)
	}
	// Stop kills a command running inside bwrap.
	done := make(chan forge.ToolResult, 1)
	go func() {
		r, _ := tool(t, sb, "bash").Call(context.Background(), json.RawMessage(`{"command":"sleep 30"}`))
		done <- r
	}()
	waitRunning(t, sb)
	sb.Stop()
	select {
	case r := <-done:
		if !strings.Contains(r.Output, "sandbox stopped") {
			t.Fatalf("stop: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not kill the bwrap command")
	}
}

func TestNoBwrapLogged(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var logs2 bytes.Buffer
	m2, err := NewManager(t.TempDir(), Options{Logger: slog.New(slog.NewTextHandler(&logs2, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background())
	if m2.Isolated() || m2.CommandsAllowed() || !strings.Contains(logs2.String(), "bubblewrap not found: no process isolation") ||
		!strings.Contains(logs2.String(), "commands are disabled") {
		t.Fatalf("log: %s", logs2.String())
	}
	if _, err := NewManager(t.TempDir(), Options{UseBwrap: BwrapOn, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err == nil {
		t.Fatal("BwrapOn without bwrap: no error")
	}
}

// TestToolNamesNameTheTools keeps ToolNames (what the engine offers agents)
// and the tools a sandbox gives in step.
func TestToolNamesNameTheTools(t *testing.T) {
	m, err := NewManager(t.TempDir(), Options{UseBwrap: BwrapOff})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	sb, _, err := m.Get(t.Context(), "ses_names")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tool := range sb.Tools() {
		got = append(got, tool.Def().Name)
	}
	if !slices.Equal(got, m.ToolNames()) {
		t.Fatalf("tools %v, ToolNames %v", got, m.ToolNames())
	}
}
