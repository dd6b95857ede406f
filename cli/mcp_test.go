package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/sqlite"
)

// postAgent posts an agent with one MCP server to the server at url and
// returns the status and the answer.
func postAgent(t *testing.T, url, key, name string, srv map[string]any) (int, string) {
	t.Helper()
	srv["name"] = "m"
	b, _ := json.Marshal(map[string]any{"name": name, "model": "scripted/echo", "mcp_servers": []any{srv}})
	req, _ := http.NewRequest("POST", url+"/v1/agents", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(res.Body)
	return res.StatusCode, out.String()
}

// forge serve decides which addresses agents' MCP url servers may reach:
// without API keys (one tenant, on loopback) private ones, with keys only
// public ones, unless the flag or forge.yaml says otherwise; link-local and
// metadata ones never unless allowed explicitly.
func TestServeMCPURLPolicy(t *testing.T) {
	t.Parallel()
	loopback := map[string]any{"url": "http://127.0.0.1:9/mcp"}
	metadata := map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}
	config := func(body string) func(*serveOptions) {
		path := filepath.Join(t.TempDir(), "forge.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return func(o *serveOptions) { o.config = path }
	}
	no, yes := false, true
	for _, c := range []struct {
		name               string
		opts               []func(*serveOptions)
		key                string
		loopbackOK, metaOK bool
	}{
		{"keyless", nil, "", true, false},
		{"keyless, flag off", []func(*serveOptions){func(o *serveOptions) { o.allowPrivateMCPURLs = &no }}, "", false, false},
		{"keyed", []func(*serveOptions){func(o *serveOptions) { o.apiKeys = "k1=acme" }}, "k1", false, false},
		{"keyed, forge.yaml on", []func(*serveOptions){func(o *serveOptions) { o.apiKeys = "k1=acme" },
			config("mcp:\n  allow_private_urls: true\n")}, "k1", true, false},
		{"keyed, flag wins over forge.yaml", []func(*serveOptions){func(o *serveOptions) { o.apiKeys = "k1=acme"; o.allowPrivateMCPURLs = &no },
			config("mcp:\n  allow_private_urls: true\n")}, "k1", false, false},
		{"link-local flag", []func(*serveOptions){func(o *serveOptions) { o.allowLinkLocalMCPURLs = &yes }}, "", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := startServer(t, c.opts...)
			for _, s := range []struct {
				name string
				srv  map[string]any
				ok   bool
				msg  string
			}{{"loop", loopback, c.loopbackOK, "it is a loopback address"}, {"meta", metadata, c.metaOK, "it is a cloud metadata address"}} {
				status, body := postAgent(t, url, c.key, s.name, map[string]any{"url": s.srv["url"]})
				if s.ok && status != 201 || !s.ok && (status != 400 || !strings.Contains(body, s.msg)) {
					t.Errorf("%s: %d %s", s.name, status, body)
				}
			}
		})
	}
}

// A server that starts keyless allows private addresses only until a key
// exists; then never again (as the HTTP layer, which then requires keys).
func TestKeylessCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "forge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(ctx) })
	clock := &stepClock{now: time.Unix(1e9, 0)}
	k := &keylessCheck{keys: st, clock: clock, log: slog.New(slog.DiscardHandler)}
	if !k.keyless(ctx) {
		t.Fatal("no keys: not keyless")
	}
	key, _, err := st.CreateKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !k.keyless(ctx) {
		t.Fatal("asked the store again within a second")
	}
	clock.add(1100 * time.Millisecond)
	if k.keyless(ctx) {
		t.Fatal("a key exists: still keyless")
	}
	if err := st.RevokeKey(ctx, "acme", key.ID); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Hour)
	if k.keyless(ctx) {
		t.Fatal("keyless again after the last key was revoked")
	}
	if (&keylessCheck{static: true}).keyless(ctx) {
		t.Fatal("static keys: keyless")
	}
}

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Read-only sandbox paths that would show sandboxes the database or each
// other are refused at start.
func TestCheckReadOnlyPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "forge.db")
	root := filepath.Join(dir, "data", "forge.db.sandboxes")
	for _, c := range []struct {
		path, want string
	}{
		{dir, "overlaps the sandbox root"},
		{filepath.Join(dir, "data"), "overlaps the sandbox root"},
		{filepath.Join(root, "ses_1"), "overlaps the sandbox root"},
		{"/usr/local/lib/node_modules", ""},
	} {
		err := checkReadOnlyPaths([]string{c.path}, db, root)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
	}
	other := filepath.Join(dir, "sandboxes")
	if err := checkReadOnlyPaths([]string{filepath.Join(dir, "data")}, db, other); err == nil || !strings.Contains(err.Error(), "holds the database") {
		t.Errorf("database: %v", err)
	}
}
