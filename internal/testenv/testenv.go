// Package testenv tells tests where the services and programs they need
// are: a PostgreSQL server, a Redis server, a Chromium binary, the pinned
// npm MCP servers. scripts/test installs and starts them and exports their
// addresses in FORGE_TEST_* variables (docs/testing.md).
//
// A test that needs one asks for it here. When its variable is unset the
// test is skipped with a message saying how to get it, so that a plain
// `go test ./...` passes on a machine without the services; under
// scripts/test (FORGE_TEST_REQUIRE_SERVICES=1) a missing service fails the
// test instead, so CI can never pass by skipping.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The variables scripts/test exports.
const (
	// PostgresEnv holds a superuser URL to a fresh, empty database
	// (postgres://postgres@127.0.0.1:PORT/forge_test?sslmode=disable).
	PostgresEnv = "FORGE_TEST_POSTGRES_URL"
	// RedisEnv holds the URL of an empty Redis server (redis://127.0.0.1:PORT/0).
	RedisEnv = "FORGE_TEST_REDIS_URL"
	// ChromiumEnv holds the path of a Chromium (or Chrome) binary.
	ChromiumEnv = "FORGE_TEST_CHROMIUM"
	// MCPBinEnv holds the node_modules/.bin directory of the pinned MCP
	// servers (default: mcp/testdata/npm/node_modules/.bin in the module).
	MCPBinEnv = "FORGE_TEST_MCP_BIN"
	// RequireEnv set to 1 makes a missing service fail the test instead
	// of skipping it.
	RequireEnv = "FORGE_TEST_REQUIRE_SERVICES"
)

// Required reports whether missing services fail tests rather than skip them.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// PostgresURL returns the URL of the test PostgreSQL server: a superuser
// on a fresh database. Tests that need isolation create their own
// databases with it.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return lookup(t, os.Getenv, PostgresEnv, "PostgreSQL")
}

// RedisURL returns the URL of the test Redis server.
func RedisURL(t testing.TB) string {
	t.Helper()
	return lookup(t, os.Getenv, RedisEnv, "Redis")
}

// Chromium returns the path of the Chromium binary for browser tests.
func Chromium(t testing.TB) string {
	t.Helper()
	path := lookup(t, os.Getenv, ChromiumEnv, "Chromium")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s=%s: %v", ChromiumEnv, path, err)
	}
	return path
}

// MCPServer returns the path of the executable name (for example
// "mcp-server-everything") among the pinned npm MCP servers of
// mcp/testdata/npm, which scripts/test installs.
func MCPServer(t testing.TB, name string) string {
	t.Helper()
	return mcpServer(t, os.Getenv, name)
}

func mcpServer(t testing.TB, getenv func(string) string, name string) string {
	t.Helper()
	dir := getenv(MCPBinEnv)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "mcp", "testdata", "npm", "node_modules", ".bin")
	}
	path := filepath.Join(dir, name)
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		missing(t, getenv, fmt.Sprintf("the MCP server %s is not installed in %s: run ./scripts/test, or npm ci --prefix mcp/testdata/npm", name, dir))
	}
	return path
}

// lookup returns the value of the variable env, or skips (fails under
// FORGE_TEST_REQUIRE_SERVICES=1) when it is unset.
func lookup(t testing.TB, getenv func(string) string, env, what string) string {
	t.Helper()
	v := getenv(env)
	if v == "" {
		missing(t, getenv, fmt.Sprintf("%s is not set, so there is no %s for this test: run ./scripts/test, which starts one", env, what))
	}
	return v
}

func missing(t testing.TB, getenv func(string) string, msg string) {
	t.Helper()
	if getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1 requires it)", msg, RequireEnv)
	}
	t.Skip(msg)
}

// moduleRoot finds the directory of go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ChromiumFlags returns the flags the Chromium of Chromium(t) needs to run
// headless here (as root, with no network beyond loopback) on a fresh
// profile in userDataDir (t.TempDir()). chromedp users pass them as
// allocator options.
func ChromiumFlags(userDataDir string) []string {
	return []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update",
		"--disable-quic", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + userDataDir,
		// Otherwise it looks up outside hosts at start.
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
	}
}
