package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Skip or Fatal instead of ending
// the test, so the policy of lookup can be checked both ways.
type recorder struct {
	testing.TB
	skipped, failed string
}

// stopped is what recorder panics with to leave the function under test,
// as the real Skip and Fatal leave it with runtime.Goexit.
type stopped struct{}

func (r *recorder) Helper()                   {}
func (r *recorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...); panic(stopped{}) }
func (r *recorder) Fatal(args ...any)         { r.failed = fmt.Sprint(args...); panic(stopped{}) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...); panic(stopped{}) }

// record runs fn with a recorder and returns it with fn's result.
func record(t *testing.T, fn func(tb testing.TB) string) (r *recorder, got string) {
	r = &recorder{TB: t}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stopped); !ok {
				panic(v)
			}
		}
	}()
	return r, fn(r)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestLookupSkipsOrFailsWhenUnset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		vars              map[string]string
		want              string
		skipped, required bool
	}{
		{name: "set", vars: map[string]string{PostgresEnv: "postgres://x"}, want: "postgres://x"},
		{name: "set and required", vars: map[string]string{PostgresEnv: "postgres://x", RequireEnv: "1"}, want: "postgres://x"},
		{name: "unset skips", vars: map[string]string{}, skipped: true},
		{name: "unset with require=0 skips", vars: map[string]string{RequireEnv: "0"}, skipped: true},
		{name: "unset and required fails", vars: map[string]string{RequireEnv: "1"}, required: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, got := record(t, func(tb testing.TB) string {
				return lookup(tb, env(tc.vars), PostgresEnv, "PostgreSQL")
			})
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if (r.skipped != "") != tc.skipped || (r.failed != "") != tc.required {
				t.Fatalf("skipped %q, failed %q", r.skipped, r.failed)
			}
			msg := r.skipped + r.failed
			if msg != "" && (!strings.Contains(msg, PostgresEnv) || !strings.Contains(msg, "./scripts/test")) {
				t.Errorf("the message does not say what is missing and how to get it: %s", msg)
			}
			if tc.required && !strings.Contains(msg, RequireEnv+"=1") {
				t.Errorf("the failure does not say why it is not a skip: %s", msg)
			}
		})
	}
}

func TestMCPServerLookup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := filepath.Join(dir, "mcp-server-exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "not-exe"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	defaultDir := filepath.Join(root, "mcp", "testdata", "npm", "node_modules", ".bin")
	for _, tc := range []struct {
		name, server string
		vars         map[string]string
		want         string
		skipped      string // part of the skip message
		failed       bool
	}{
		{name: "installed", server: "mcp-server-exe", vars: map[string]string{MCPBinEnv: dir}, want: exe},
		{name: "not executable", server: "not-exe", vars: map[string]string{MCPBinEnv: dir}, skipped: "not-exe is not installed in " + dir},
		{name: "missing", server: "nope", vars: map[string]string{MCPBinEnv: dir}, skipped: "npm ci --prefix mcp/testdata/npm"},
		{name: "missing and required", server: "nope", vars: map[string]string{MCPBinEnv: dir, RequireEnv: "1"}, failed: true},
		{name: "default directory", server: "nope", vars: map[string]string{}, skipped: "nope is not installed in " + defaultDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, got := record(t, func(tb testing.TB) string { return mcpServer(tb, env(tc.vars), tc.server) })
			if got != tc.want || (r.failed != "") != tc.failed || !strings.Contains(r.skipped, tc.skipped) || (tc.skipped != "") != (r.skipped != "") {
				t.Fatalf("got %q, skipped %q, failed %q", got, r.skipped, r.failed)
			}
		})
	}
}

// TestPostgresAnswers checks that the server scripts/test gave us takes
// the URL: a superuser on the database forge_test (or the one given).
func TestPostgresAnswers(t *testing.T) {
	t.Parallel()
	url := PostgresURL(t)
	psql := tool(t, "psql")
	out, err := exec.Command(psql, url, "-Atc", "select rolsuper from pg_roles where rolname = current_user").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "t" {
		t.Fatalf("psql %s: %v\n%s", url, err, out)
	}
}

func TestRedisAnswers(t *testing.T) {
	t.Parallel()
	url := RedisURL(t)
	cli := tool(t, "redis-cli")
	out, err := exec.Command(cli, "-u", url, "ping").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "PONG" {
		t.Fatalf("redis-cli -u %s ping: %v\n%s", url, err, out)
	}
}

// TestChromiumRenders runs the browser headless on a page and reads the
// DOM it built, with the flags NOTES.md found needed here.
func TestChromiumRenders(t *testing.T) {
	t.Parallel()
	bin := Chromium(t)
	cmd := exec.Command(bin, ChromiumFlags(t.TempDir())...)
	cmd.Args = append(cmd.Args, "--dump-dom", "data:text/html,<p id=x></p><script>x.textContent='rendered '+(6*7)</script>")
	// Its helper processes share its process group, so nothing outlives the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		err = fmt.Errorf("chromium did not exit")
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers; ESRCH when none
	if err != nil || !strings.Contains(out.String(), "rendered 42") {
		t.Fatalf("%s --dump-dom: %v\n%s", bin, err, out.String())
	}
}

// tool returns the path of the program name, skipping (failing under
// FORGE_TEST_REQUIRE_SERVICES=1) when it is not installed.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		missing(t, os.Getenv, fmt.Sprintf("%s is not installed: run ./scripts/test, which installs it", name))
	}
	return path
}
