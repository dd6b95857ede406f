package cli

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

func TestTuneGC(t *testing.T) {
	env := func(vals map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	}
	var set []int
	setter := func(p int) int { set = append(set, p); return 100 }

	if got := tuneGC(env(nil), setter); got != serveGCPercent || len(set) != 1 || set[0] != serveGCPercent {
		t.Fatalf("GOGC unset: got %d, set %v; want %d", got, set, serveGCPercent)
	}
	set = nil
	for _, v := range []string{"100", "off", ""} {
		if got := tuneGC(env(map[string]string{"GOGC": v}), setter); got != -1 || len(set) != 0 {
			t.Fatalf("GOGC=%q: got %d, set %v; want the runtime's own", v, got, set)
		}
	}
}

// TestServeMemoryLimitFromCgroup: forge serve in a memory cgroup of
// 512 MiB runs with GOMEMLIMIT at 90 % of it, and leaves a GOMEMLIMIT the
// environment sets alone. It makes a cgroup (v1 or v2, whichever this
// machine lets it write) and runs this test binary in it.
func TestServeMemoryLimitFromCgroup(t *testing.T) {
	if os.Getenv("FORGE_TEST_MEMLIMIT_CHILD") == "1" {
		tuneServeMemory(slog.New(slog.DiscardHandler))
		fmt.Println(debug.SetMemoryLimit(-1))
		return
	}
	const limit = 512 << 20
	dir, procs := memoryCgroup(t, limit)
	for _, tc := range []struct {
		env  string
		want int64
	}{
		{"", limit * 9 / 10},
		{"GOMEMLIMIT=100MiB", 100 << 20},
	} {
		cmd := exec.Command("sh", "-c", `echo $$ > "$1" && exec "$2" -test.run '^TestServeMemoryLimitFromCgroup$'`, "sh", procs, os.Args[0])
		cmd.Env = append(os.Environ(), "FORGE_TEST_MEMLIMIT_CHILD=1", tc.env)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child in %s: %v", dir, err)
		}
		got, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
		if err != nil {
			t.Fatalf("child said %q", out)
		}
		// The ratio is applied to the limit as a float.
		if d := got - tc.want; d < -4096 || d > 4096 {
			t.Errorf("env %q: GOMEMLIMIT %d, want %d", tc.env, got, tc.want)
		}
	}
}

// memoryCgroup makes a memory cgroup limited to limit bytes and returns
// its directory and the file that moves a process into it; it skips the
// test when the machine has no writable memory controller.
func memoryCgroup(t *testing.T, limit int64) (dir, procs string) {
	t.Helper()
	name := fmt.Sprintf("forge-test-%d", os.Getpid())
	for _, c := range []struct{ root, limitFile string }{
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"}, // v1
		{"/sys/fs/cgroup", "memory.max"},                   // v2
	} {
		if _, err := os.Stat(filepath.Join(c.root, c.limitFile)); err != nil && c.root == "/sys/fs/cgroup" {
			continue // v2 without the memory controller at the root
		}
		dir = filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		t.Cleanup(func() { _ = os.Remove(dir) }) // empty once the children exit
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			continue
		}
		return dir, filepath.Join(dir, "cgroup.procs")
	}
	t.Skip("no writable memory cgroup on this machine")
	return "", ""
}
