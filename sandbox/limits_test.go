package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// bash runs a command through the bash tool, as the model does, and
// returns what the model sees.
func bash(t *testing.T, sb *Sandbox, command string) forge.ToolResult {
	t.Helper()
	res, err := call(t, sb, "bash", map[string]any{"command": command})
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	return res
}

func wantLimit(t *testing.T, res forge.ToolResult, says ...string) {
	t.Helper()
	if !res.IsError {
		t.Errorf("the result is not an error: %q", res.Output)
	}
	for _, s := range says {
		if !strings.Contains(res.Output, s) {
			t.Errorf("the result does not say %q:\n%s", s, res.Output)
		}
	}
}

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{MemoryLimit: 256 << 20}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) {
		res := bash(t, sb, `perl -e '$x = "a" x (512*1024*1024); print "allocated\n"'`)
		if strings.Contains(res.Output, "allocated") {
			t.Fatalf("512 MiB allocated under a 256 MiB limit: %q", res.Output)
		}
		wantLimit(t, res, "[memory limit 256 MiB exceeded")
		// Within the limit, all is well.
		if out := mustCall(t, sb, "bash", map[string]any{"command": `perl -e '$x = "a" x (64*1024*1024); print "ok\n"'`}); out != "ok\n" {
			t.Fatalf("64 MiB: %q", out)
		}
	})
}

func TestProcessLimit(t *testing.T) {
	requireBwrap(t)
	requireRoot(t) // the limit needs a uid per sandbox
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOn, MaxProcs: 40})
	res := bash(t, sb, `perl -e 'for my $i (1..200) { my $p = fork; if (!defined $p) { print "forked $i\n"; die "fork: $!\n" } if (!$p) { sleep 5; exit } }'`)
	wantLimit(t, res, "[too many processes: the sandbox runs at most 40 processes")
	var n int
	if m := regexp.MustCompile(`forked (\d+)`).FindStringSubmatch(res.Output); m == nil {
		t.Fatalf("no fork failed: %q", res.Output)
	} else if n, _ = strconv.Atoi(m[1]); n > 40 || n < 20 {
		t.Fatalf("the fork that failed was number %d, under a limit of 40 (bubblewrap and bash take a few)", n)
	}
	// The limit is the sandbox's, not the host's: another sandbox of the
	// same server is not affected while this one is full.
	m := sb.m
	other, _, err := m.Get(context.Background(), "ses_other")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan forge.ToolResult, 1)
	go func() {
		done <- bash(t, sb, `perl -e 'for (1..200) { my $p = fork; last if !defined $p; if (!$p) { sleep 3; exit } } sleep 3'`)
	}()
	waitRunning(t, sb)
	time.Sleep(300 * time.Millisecond) // let it fill its process limit
	if out := mustCall(t, other, "bash", map[string]any{"command": "for i in 1 2 3 4 5 6 7 8; do sleep 0.1 & done; wait; echo ok"}); out != "ok\n" {
		t.Fatalf("the other sandbox: %q", out)
	}
	sb.Stop()
	<-done
}

func TestCPUTimeLimit(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{CPUTime: time.Second}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) {
		res, err := call(t, sb, "bash", map[string]any{"command": "while :; do :; done", "timeout_ms": 30000})
		if err != nil {
			t.Fatal(err)
		}
		wantLimit(t, res, "[killed: CPU time limit 1s exceeded")
		if strings.Contains(res.Output, "timed out") {
			t.Fatalf("the timeout, not the CPU limit, ended it: %q", res.Output)
		}
	})
	// By default the CPU limit is the command's timeout.
	m, _ := newBox(t, Options{UseBwrap: BwrapOff, UnsafeUnsandboxedCommands: true, CommandTimeout: 7 * time.Second})
	sb, _, _ := m.Get(context.Background(), "ses_cpu")
	if out := mustCall(t, sb, "bash", map[string]any{"command": "ulimit -t", "timeout_ms": 3000}); out != "3\n" {
		t.Errorf("CPU limit of a 3 s command: %q", out)
	}
	if out := mustCall(t, sb, "bash", map[string]any{"command": "ulimit -t"}); out != "7\n" {
		t.Errorf("CPU limit of a command with the default timeout: %q", out)
	}
}

func TestFileSizeLimit(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{MaxFileSize: 1 << 20}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) {
		res := bash(t, sb, "head -c 3M /dev/zero > big.bin")
		wantLimit(t, res, "[file size limit 1 MiB exceeded")
		if fi, err := os.Stat(filepath.Join(sb.Dir(), "big.bin")); err != nil || fi.Size() > 1<<20 {
			t.Fatalf("big.bin: %v %v", fi.Size(), err)
		}
		// Python ignores SIGXFSZ and reports the error itself.
		res = bash(t, sb, `perl -e 'open(my $f, ">", "p.bin") or die; $SIG{XFSZ}="IGNORE"; print $f ("x" x (2*1024*1024)) or die "write: $!\n"; close($f) or die "close: $!\n"'`)
		wantLimit(t, res, "[file size limit 1 MiB exceeded")
	})
}

func TestTmpSizeLimit(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOn, TmpSize: 2 << 20})
	for _, dir := range []string{"/tmp", "/dev/shm", "$TMPDIR"} {
		res := bash(t, sb, "head -c 5M /dev/zero > "+dir+"/fill")
		wantLimit(t, res, "[no space left: /tmp holds at most 2 MiB and /dev/shm 2 MiB")
	}
	// The sandbox's root and /dev are not a way around it.
	for _, cmd := range []string{"head -c 1M /dev/zero > /fill", "mkdir /dev/fill", "head -c 1M /dev/zero > /dev/fill"} {
		if res := bash(t, sb, cmd); !res.IsError || !strings.Contains(res.Output, "Read-only file system") {
			t.Errorf("%q: %q", cmd, res.Output)
		}
	}
}

// Over the workspace quota the command says so, the file tools refuse to
// write and commands run with file writes disabled, until files are
// deleted.
func TestWorkspaceQuota(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{WorkspaceQuota: 4 << 20}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) {
		mustCall(t, sb, "write_file", map[string]any{"path": "small.txt", "content": "small\n"})
		res := bash(t, sb, "head -c 6M /dev/urandom > big.bin; echo wrote")
		wantLimit(t, res, "wrote", "[workspace quota exceeded: work/ and home/ use 6 MiB of 4 MiB")
		_, err := call(t, sb, "write_file", map[string]any{"path": "more.txt", "content": "more\n"})
		if !errors.Is(err, ErrOverQuota) || !strings.Contains(err.Error(), "delete files") {
			t.Fatalf("write_file over quota: %v", err)
		}
		if _, err := call(t, sb, "edit_file", map[string]any{"path": "small.txt", "old_string": "small", "new_string": "larger text"}); !errors.Is(err, ErrOverQuota) {
			t.Fatalf("edit_file over quota: %v", err)
		}
		res = bash(t, sb, "echo x > new.txt; echo appended >> small.txt")
		wantLimit(t, res, "[file writes are disabled: the workspace is over its quota of 4 MiB")
		if b, _ := os.ReadFile(filepath.Join(sb.Dir(), "small.txt")); string(b) != "small\n" {
			t.Fatalf("a command wrote over quota: %q", b)
		}
		// Deleting files brings it back.
		out := mustCall(t, sb, "bash", map[string]any{"command": "rm big.bin; echo removed"})
		if !strings.Contains(out, "removed") || !strings.Contains(out, "[the workspace is back under its quota") {
			t.Fatalf("rm: %q", out)
		}
		mustCall(t, sb, "write_file", map[string]any{"path": "more.txt", "content": "more\n"})
		mustCall(t, sb, "bash", map[string]any{"command": "echo appended >> small.txt"})
		// A write_file that would cross the quota is refused up front.
		_, err = call(t, sb, "write_file", map[string]any{"path": "huge.txt", "content": strings.Repeat("x", 5<<20)})
		if !errors.Is(err, ErrOverQuota) {
			t.Fatalf("write_file of 5 MiB under a 4 MiB quota: %v", err)
		}
	})
}

// A command that keeps writing is killed once the workspace crosses the
// quota, not only told afterwards.
func TestWorkspaceQuotaKillsRunningCommand(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{WorkspaceQuota: 4 << 20, QuotaCheckInterval: 50 * time.Millisecond}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) {
		res, err := call(t, sb, "bash", map[string]any{"timeout_ms": 60000,
			"command": "for i in $(seq 1 200); do head -c 1M /dev/urandom > f$i; sleep 0.05; done; echo finished"})
		if err != nil {
			t.Fatal(err)
		}
		wantLimit(t, res, "[killed: workspace quota 4 MiB exceeded")
		if strings.Contains(res.Output, "finished") {
			t.Fatal("the command ran to its end")
		}
		files, _ := filepath.Glob(filepath.Join(sb.Dir(), "f*"))
		if len(files) > 50 {
			t.Fatalf("%d MiB written before the kill", len(files))
		}
	})
}

// countConcurrent runs n commands at once in each sandbox; each reports how
// many of its sandbox's commands were running when it was (marker
// directories in the shared work directory).
func countConcurrent(t *testing.T, n int, boxes ...*Sandbox) (most int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sb := range boxes {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := mustCall(t, sb, "bash", map[string]any{"command": fmt.Sprintf("mkdir running.%d; sleep 0.3; ls -d running.* | wc -l; rmdir running.%d", i, i)})
				var c int
				fmt.Sscan(out, &c)
				mu.Lock()
				most = max(most, c)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return most
}

func TestSessionCommandLimit(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{SessionCommands: 2}, func(t *testing.T, _ bool, _ *Manager, sb *Sandbox) {
		if most := countConcurrent(t, 6, sb); most != 2 {
			t.Fatalf("at most %d commands ran at once, want 2", most)
		}
	})
}

func TestServerCommandLimit(t *testing.T) {
	t.Parallel()
	forEachCommandMode(t, Options{MaxCommands: 3}, func(t *testing.T, _ bool, m *Manager, sb *Sandbox) {
		other, _, err := m.Get(context.Background(), "ses_other")
		if err != nil {
			t.Fatal(err)
		}
		countConcurrent(t, 4, sb, other)
		if _, peak := m.RunningCommands(); peak != 3 {
			t.Fatalf("at most %d commands ran at once on the server, want 3", peak)
		}
	})
}

// A command waiting for a slot is ended by a cancel or a Stop without
// running.
func TestWaitingCommandCancelled(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff, UnsafeUnsandboxedCommands: true, SessionCommands: 1})
	go sb.Run(context.Background(), "sleep 5", 0)
	waitRunning(t, sb)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := sb.Run(ctx, "touch ran", 0)
	if err != nil || !res.Canceled {
		t.Fatalf("waiting command: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(sb.Dir(), "ran")); err == nil {
		t.Fatal("the cancelled command ran")
	}
	sb.Stop()
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1024": 1024, "1K": 1024, "1G": 1 << 30, "1GiB": 1 << 30, "512MiB": 512 << 20,
		"2GB": 2e9, "1.5G": 3 << 29, "0": -1, "off": -1, "-1": -1} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "1X", "one"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q): no error", bad)
		}
	}
	for n, want := range map[int64]string{1 << 30: "1 GiB", 256 << 20: "256 MiB", 1536: "1.5 KiB", 12: "12 B"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
