package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// sparse creates a file of size bytes holding nothing on disk.
func sparse(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// A 16 GiB sparse file in the work directory used to be hashed whole in
// the server at every step (tens of seconds, not cancellable). It is now
// compared by its metadata: never read, and its changes still reported.
func TestSnapshotBigSparseFile(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	big := filepath.Join(sb.Dir(), "big.img")
	sparse(t, big, 16<<30)
	writeHost(t, filepath.Join(sb.Dir(), "small.txt"), "a\n")
	var box forge.Sandbox = sb
	changes, err := box.Track(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before := mustSnap(t, sb)
	if before.hashedBytes != 2 {
		t.Fatalf("the snapshot read %d bytes of content, want only small.txt's 2", before.hashedBytes)
	}
	if p, err := changes(t.Context()); err != nil || !p.Empty() {
		t.Fatalf("nothing changed: %+v %v", p, err)
	}
	// One byte in the middle, the mtime set back: the ctime still tells.
	fi, _ := os.Stat(big)
	f, err := os.OpenFile(big, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{1}, 8<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(big, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	p, err := changes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(p)
	if want := `{"files":[{"path":"big.img","status":"modified","added":0,"removed":0,"too_large":true}]}`; string(got) != want {
		t.Fatalf("patch %s, want %s", got, want)
	}
}

// A snapshot honours its context: cancelled, it ends at once with the
// context's error, whatever the workspace holds.
func TestSnapshotCancelled(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	sparse(t, filepath.Join(sb.Dir(), "big.img"), 16<<30)
	for i := range 200 {
		writeHost(t, filepath.Join(sb.Dir(), "src", "f"+itoa(i)+".txt"), strings.Repeat("x\n", 100))
	}
	changes, err := sb.Track(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := sb.Track(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Track with a cancelled context: %v", err)
	}
	if _, err := changes(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("changes with a cancelled context: %v", err)
	}
	// Cancelled while it walks: it stops at the next file.
	ctx, cancel = context.WithCancel(t.Context())
	n := 0
	sb.m.snapshotHook = func() {
		if n++; n == 10 {
			cancel()
		}
	}
	t.Cleanup(func() { sb.m.snapshotHook = nil })
	if _, err := sb.Snapshot(ctx); !errors.Is(err, context.Canceled) || n > 11 {
		t.Fatalf("cancelled after 10 files: %v, %d files looked at", err, n)
	}
}

// Past SnapshotHashBytes, files are compared by metadata: their changes
// are reported, without line counts (the patch says it is partial).
func TestSnapshotHashBudget(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff, SnapshotHashBytes: 10 << 10})
	for i := range 20 {
		writeHost(t, filepath.Join(sb.Dir(), "f"+itoa(i)+".txt"), strings.Repeat("line\n", 200)) // 1000 bytes
	}
	before := mustSnap(t, sb)
	if before.hashedBytes > 10<<10 || before.hashedBytes < 9000 {
		t.Fatalf("hashed %d bytes with a budget of 10 KiB", before.hashedBytes)
	}
	time.Sleep(10 * time.Millisecond) // a later mtime on coarse clocks
	for i := range 20 {
		writeHost(t, filepath.Join(sb.Dir(), "f"+itoa(i)+".txt"), strings.Repeat("LINE\n", 200))
	}
	p := Compare(before, mustSnap(t, sb))
	if len(p.Files) != 20 || !p.Partial {
		t.Fatalf("%d files changed, partial %v: %+v", len(p.Files), p.Partial, p)
	}
	counted := 0
	for _, c := range p.Files {
		if c.Status != Modified || c.TooLarge {
			t.Fatalf("change %+v", c)
		}
		if c.Added == 200 && c.Removed == 200 {
			counted++
		}
	}
	if counted < 9 || counted > 10 {
		t.Fatalf("%d changes counted, want those within the budget (10)", counted)
	}
}
