//go:build linux

package launcher

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// launch runs this test binary as the launcher (its init is this
// package's) with the given directives and program.
func launchCmd(args ...string) *exec.Cmd {
	return &exec.Cmd{Path: Path, Args: append([]string{Arg0}, args...)}
}

func TestLauncherSetsLimits(t *testing.T) {
	// RLIMIT_CORE (4) and RLIMIT_CPU (0).
	out, err := launchCmd("rlimit=4:0:0", "rlimit=0:7:9", "--", "/bin/sh", "-c", "ulimit -c; ulimit -St; ulimit -Ht").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != "0 7 9" {
		t.Fatalf("limits seen by the program: %q", out)
	}
}

func TestLauncherRefusesBadDirectives(t *testing.T) {
	for _, args := range [][]string{
		{"rlimit=4:x:0", "--", "/bin/true"},
		{"stage=rx:n:/tmp", "--", "/bin/true"},
		{"user=1", "--", "/bin/true"},
		{"bogus", "--", "/bin/true"},
		{"--", "true"}, // not absolute
		{"--"},
	} {
		out, err := launchCmd(args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != Failed || !strings.HasPrefix(string(out), "sandbox: cannot start the command: ") {
			t.Errorf("%q: %v %q", args, err, out)
		}
	}
}

// As root, a staged directory is reachable by an unprivileged uid at its
// staged path although its parent is closed to everyone but root; the
// host's own /tmp is not changed.
func TestLauncherStagesAndSwitchesUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("staging and switching users needs root")
	}
	closed := t.TempDir()
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(closed, "work")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("staged\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "id -u; cat " + Staged("w") + "/f.txt; cat " + dir + "/f.txt >/dev/null 2>&1 || echo unreachable; " +
		"touch " + Staged("w") + "/new 2>&1 | grep -c 'Read-only'; grep -c NoNewPrivs:.1 /proc/self/status"
	out, err := launchCmd("stage=ro:w:"+dir, "user=65534:65534", "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != "65534 staged unreachable 1 1" {
		t.Fatalf("the program saw %q", out)
	}
	// Without staging, the same uid cannot reach it: what staging is for.
	out, err = launchCmd("user=65534:65534", "--", "/bin/cat", filepath.Join(dir, "f.txt")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("unstaged: %v %q", err, out)
	}
	if _, err := os.Stat(Staged("w")); err == nil {
		t.Fatalf("%s exists on the host", Staged("w"))
	}
}
