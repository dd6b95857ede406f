package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run scripts/test --exec with a command that reports what the
// script started, and check that the services answer and that nothing is
// left behind however the script ends. Each runs with its own TMPDIR, so
// the script's sweep of dead runs only ever sees the test's own.

// scriptRun is one scripts/test process.
type scriptRun struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited; err is set
	err    error
	lines  chan string   // output lines, closed at the output's end
	eof    chan struct{} // closed at the output's end

	mu  sync.Mutex // guards the following
	out strings.Builder
}

// startScript starts scripts/test --exec sh -c inner with env added to an
// environment free of FORGE_TEST_* variables, and TMPDIR tmp.
func startScript(t *testing.T, tmp string, env []string, inner string) *scriptRun {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"redis-server", "redis-cli", "psql", "runuser"} {
		tool(t, prog)
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "test"), "--exec", "sh", "-c", inner)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FORGE_TEST_") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp, "FORGE_TEST_NO_INSTALL=1")
	cmd.Env = append(cmd.Env, env...)
	// An *os.File, so that Wait does not wait for the output's end: the
	// command's own children may hold the pipe after the script is gone.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	r := &scriptRun{cmd: cmd, exited: make(chan struct{}), lines: make(chan string, 100), eof: make(chan struct{})}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	go func() {
		defer close(r.eof)
		defer close(r.lines)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.mu.Lock()
			r.out.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			select {
			case r.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	return r
}

func (r *scriptRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// wait waits for the script to exit and its output to end, and returns
// its exit code.
func (r *scriptRun) wait(t *testing.T) int {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	select {
	case <-r.exited:
	case <-timeout:
		t.Fatalf("scripts/test did not exit; output:\n%s", r.output())
	}
	select {
	case <-r.eof:
	case <-timeout:
		t.Fatalf("scripts/test exited, but something it started holds its output open; output:\n%s", r.output())
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return 0
}

// line waits for an output line matching re and returns its submatches.
func (r *scriptRun) line(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				code := r.wait(t)
				t.Fatalf("scripts/test ended (exit code %d) without a line matching %s; output:\n%s", code, re, r.output())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %s; output:\n%s", re, r.output())
		}
	}
}

// report is the inner command's first line: the pids of the services.
const report = `echo "pids pg=$(head -n 1 "$FORGE_TEST_POSTGRES_DIR/data/postmaster.pid") redis=$(cat "$FORGE_TEST_RUN_DIR/redis.pid") shell=$$"`

var pidsLine = regexp.MustCompile(`^pids pg=(\d+) redis=(\d+) shell=(\d+)$`)

func pids(t *testing.T, m []string) (pg, redis, shell int) {
	t.Helper()
	n := make([]int, 3)
	for i := range n {
		v, err := strconv.Atoi(m[i+1])
		if err != nil || v <= 0 {
			t.Fatalf("bad pid in %q", m[0])
		}
		n[i] = v
	}
	return n[0], n[1], n[2]
}

// running tells whether process pid runs (a zombie nobody reaped yet does not).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// checkGone fails unless the processes are gone and tmp holds no run directory.
func checkGone(t *testing.T, tmp string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d still runs", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "forge-test.*"))
	if len(left) > 0 {
		t.Errorf("run directories left behind: %v", left)
	}
}

func TestScriptStartsServicesAndStopsThemOnExit(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	r := startScript(t, tmp, nil, report+`
psql "$FORGE_TEST_POSTGRES_URL" -Atc "select current_database(), rolsuper from pg_roles where rolname = current_user" | sed 's/^/psql /'
redis-cli -u "$FORGE_TEST_REDIS_URL" ping | sed 's/^/redis /'
echo "require=$FORGE_TEST_REQUIRE_SERVICES chromium=$FORGE_TEST_CHROMIUM"
exit 7`)
	pg, redis, _ := pids(t, r.line(t, pidsLine))
	if code := r.wait(t); code != 7 {
		t.Errorf("exit code %d, want the command's 7; output:\n%s", code, r.output())
	}
	out := r.output()
	for _, want := range []string{"psql forge_test|t\n", "redis PONG\n", "require=1 chromium=/"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	checkGone(t, tmp, pg, redis)
}

func TestScriptStopsServicesOnSIGTERM(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	r := startScript(t, tmp, nil, report+"\nexec sleep 600")
	pg, redis, sleep := pids(t, r.line(t, pidsLine))
	if !running(pg) || !running(redis) || !running(sleep) {
		t.Fatalf("not running: pg %v, redis %v, command %v", running(pg), running(redis), running(sleep))
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 143 {
		t.Errorf("exit code %d after SIGTERM, want 143; output:\n%s", code, r.output())
	}
	checkGone(t, tmp, pg, redis, sleep)
}

// TestScriptSweepsAfterKill9: a script killed with SIGKILL cannot stop its
// services; the next run on the machine stops them.
func TestScriptSweepsAfterKill9(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	r := startScript(t, tmp, nil, report+"\nexec sleep 600")
	pg, redis, sleep := pids(t, r.line(t, pidsLine))
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// The command runs in its own process group: ours to end.
	_ = syscall.Kill(sleep, syscall.SIGKILL)
	r.wait(t)
	if !running(pg) || !running(redis) {
		t.Fatalf("the services died with the script (pg %v, redis %v): the sweep is not tested", running(pg), running(redis))
	}
	// The sweep comes before anything starts: given services, the second
	// run starts none of its own.
	again := startScript(t, tmp, []string{
		"FORGE_TEST_POSTGRES_URL=postgres://given/db", "FORGE_TEST_REDIS_URL=redis://given/0", "FORGE_TEST_CHROMIUM=/given/chromium",
	}, "true")
	if code := again.wait(t); code != 0 {
		t.Fatalf("second run: exit code %d; output:\n%s", code, again.output())
	}
	if !strings.Contains(again.output(), "stopping the services of an earlier run that was killed") {
		t.Errorf("the second run did not say it swept:\n%s", again.output())
	}
	checkGone(t, tmp, pg, redis)
}

// TestScriptUsesGivenServices: variables already set are used as given,
// and nothing is started for them.
func TestScriptUsesGivenServices(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	r := startScript(t, tmp, []string{
		"FORGE_TEST_POSTGRES_URL=postgres://given/db",
		"FORGE_TEST_REDIS_URL=redis://given/0",
		"FORGE_TEST_CHROMIUM=/given/chromium",
		"FORGE_TEST_REQUIRE_SERVICES=0",
	}, `echo "env $FORGE_TEST_POSTGRES_URL $FORGE_TEST_REDIS_URL $FORGE_TEST_CHROMIUM $FORGE_TEST_REQUIRE_SERVICES"; ls -A "$FORGE_TEST_RUN_DIR" | tr '\n' ' '; echo`)
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, r.output())
	}
	out := r.output()
	if !strings.Contains(out, "env postgres://given/db redis://given/0 /given/chromium 0\nowner \n") {
		t.Errorf("output:\n%s", out)
	}
	checkGone(t, tmp)
}
