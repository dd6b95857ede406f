package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/sqlite"
)

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
