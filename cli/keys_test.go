package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/server"
	"github.com/forge-runtime/forge/sqlite"
)

// runCLI runs forge with args and returns its stdout, stderr and error.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("forge %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

var keyLine = regexp.MustCompile(`^fk_[A-Za-z0-9_-]{43}\n$`)

// testKeysCommands runs create, list and revoke against db.
func testKeysCommands(t *testing.T, db string) {
	// create prints the key alone on stdout.
	out := mustCLI(t, "keys", "create", "--tenant", "acme", "--name", "ci", "--db", db)
	if !keyLine.MatchString(out) {
		t.Fatalf("keys create printed %q, want the key alone on a line", out)
	}
	secret := strings.TrimSpace(out)
	other := strings.TrimSpace(mustCLI(t, "keys", "create", "--tenant", "globex", "--db", db))

	s, err := server.OpenStore(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.KeyByHash(context.Background(), forge.HashAPIKey(secret))
	_ = s.Close(context.Background())
	if err != nil || k.Tenant != "acme" || k.Name != "ci" {
		t.Fatalf("the printed key resolves to %+v, %v", k, err)
	}

	list := mustCLI(t, "keys", "list", "--db", db)
	if strings.Contains(list, secret) || strings.Contains(list, strings.TrimPrefix(secret, "fk_")) || strings.Contains(list, other) {
		t.Fatalf("keys list shows a secret:\n%s", list)
	}
	if !strings.Contains(list, k.ID) || !strings.Contains(list, "globex") || strings.Count(list, "\n") != 3 {
		t.Fatalf("keys list:\n%s", list)
	}
	var listed []forge.APIKey
	if err := json.Unmarshal([]byte(mustCLI(t, "keys", "list", "--tenant", "acme", "--json", "--db", db)), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != k.ID || listed[0].RevokedAt != nil {
		t.Fatalf("keys list --tenant acme --json: %+v", listed)
	}

	// Another tenant's id is not found; the key stays.
	if _, _, err := runCLI(t, "keys", "revoke", "--tenant", "globex", k.ID, "--db", db); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("revoke as another tenant: %v", err)
	}
	if _, _, err := runCLI(t, "keys", "revoke", "key_ghost", "--db", db); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("revoke of an unknown id: %v", err)
	}
	if out := mustCLI(t, "keys", "revoke", k.ID, "--db", db); !strings.Contains(out, k.ID) {
		t.Fatalf("revoke printed %q", out)
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "keys", "list", "--tenant", "acme", "--json", "--db", db)), &listed); err != nil {
		t.Fatal(err)
	}
	if listed[0].RevokedAt == nil {
		t.Fatalf("revoked key listed as live: %+v", listed[0])
	}

	for _, args := range [][]string{
		{"keys", "create", "--db", db},                                       // no tenant
		{"keys", "create", "--tenant", "a b", "--db", db},                    // bad tenant
		{"keys", "create", "--tenant", "*", "--db", db},                      // not a tenant
		{"keys", "create", "--tenant", "acme", "--name", "\x00", "--db", db}, // bad name
		{"keys", "revoke", "--db", db},                                       // no id
	} {
		if out, _, err := runCLI(t, args...); err == nil || out != "" {
			t.Errorf("forge %q: %q, %v; want an error and nothing on stdout", args, out, err)
		}
	}
}

func TestKeysCommandsSQLite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "forge.db")
	testKeysCommands(t, db)

	// While a server owns the file, the commands say so.
	s, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, _, err := runCLI(t, "keys", "create", "--tenant", "acme", "--db", db); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("keys create on an owned file: %v", err)
	}
}

func TestKeysCommandsPostgres(t *testing.T) {
	t.Parallel()
	testKeysCommands(t, pgtest.NewDatabase(t))
}

// TestServeNeedsKeysOffLoopback: forge serve listens on a non-loopback
// address only when keys are configured, stored keys included, and then
// requires one on every request; a key created while it runs works at
// once and a revoked one stops at once (PostgreSQL: the CLI and the server
// share the database).
func TestServeNeedsKeysOffLoopback(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	addr := freeAddr(t, "0.0.0.0:0")
	o := serveOptions{addr: addr, db: db, turnTimeout: time.Minute, shutdownGrace: time.Second, logLevel: "info",
		sandboxRoot: t.TempDir(), logOut: &syncBuffer{}}
	err := serve(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "refusing to listen") {
		t.Fatalf("serve on %s without keys: %v", addr, err)
	}

	first := strings.TrimSpace(mustCLI(t, "keys", "create", "--tenant", "acme", "--db", db))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(addr)
	base := "http://127.0.0.1:" + port
	status := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/v1/sessions", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if res, err := http.Get(base + "/healthz"); err == nil {
			res.Body.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("server not up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := status(""); st != 401 {
		t.Fatalf("no key: %d", st)
	}
	if st := status(first); st != 200 {
		t.Fatalf("stored key: %d", st)
	}
	second := strings.TrimSpace(mustCLI(t, "keys", "create", "--tenant", "globex", "--db", db))
	if st := status(second); st != 200 {
		t.Fatalf("key created while serving: %d", st)
	}
	var listed []forge.APIKey
	if err := json.Unmarshal([]byte(mustCLI(t, "keys", "list", "--tenant", "globex", "--json", "--db", db)), &listed); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "keys", "revoke", listed[0].ID, "--db", db)
	if st := status(second); st != 401 {
		t.Fatalf("revoked key: %d", st)
	}
}

// freeAddr returns an address on host with a port free a moment ago.
func freeAddr(t *testing.T, hostPort string) string {
	t.Helper()
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
