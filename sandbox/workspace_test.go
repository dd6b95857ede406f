package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

// step runs f as a step's tool calls would and returns the workspace
// snapshot its changes func kept (nil when nothing changed).
func step(t testing.TB, sb *Sandbox, id string, f func()) *forge.WorkspaceSnapshot {
	t.Helper()
	changes, err := sb.TrackSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f()
	asked := false
	patch, snap, err := changes(context.Background(), func() string { asked = true; return id })
	if err != nil {
		t.Fatal(err)
	}
	if patch.Empty() != (snap == nil) || asked != !patch.Empty() {
		t.Fatalf("patch %+v, snapshot %+v, id asked %v", patch, snap, asked)
	}
	return snap
}

func readHost(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustNotExist(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: %v, want it gone", p, err)
	}
}

func blobCount(t testing.TB, sb *Sandbox) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(filepath.Join(sb.snaps.dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// A snapshot holds every file, symlink and directory as the step left
// them; restoring an earlier one removes what came since and writes back
// what changed or went, then restoring the later one redoes it.
func TestWorkspaceSnapshotRestore(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	d := sb.Dir()
	snap1 := step(t, sb, "snap_1", func() {
		writeHost(t, d+"/a.txt", "one\n")
		writeHost(t, d+"/dir/b.txt", "bee\n")
		writeHost(t, d+"/run.sh", "#!/bin/sh\n")
		_ = os.Chmod(d+"/run.sh", 0o755)
		_ = os.Mkdir(d+"/empty", 0o750)
		_ = os.Symlink("a.txt", d+"/link")
	})
	if snap1 == nil || snap1.ID != "snap_1" || snap1.Files != 4 || snap1.Partial {
		t.Fatalf("snapshot %+v", snap1)
	}
	if s := step(t, sb, "snap_unused", func() {}); s != nil {
		t.Fatalf("a step that changed nothing kept %+v", s)
	}
	snap2 := step(t, sb, "snap_2", func() {
		writeHost(t, d+"/a.txt", "two\n")
		_ = os.Remove(d + "/dir/b.txt")
		writeHost(t, d+"/new.txt", "new\n")
		writeHost(t, d+"/newdir/deep/x", "x")
		_ = os.Remove(d + "/empty")
		_ = os.Chmod(d+"/run.sh", 0o600)
		_ = os.Remove(d + "/link")
		_ = os.Symlink("new.txt", d+"/link")
	})
	if snap2 == nil || snap2.ID != "snap_2" {
		t.Fatalf("snapshot %+v", snap2)
	}
	if got := sb.LatestSnapshot(); got == nil || got.ID != "snap_2" {
		t.Fatalf("latest %+v", got)
	}
	res, err := sb.Restore(t.Context(), "snap_1")
	if err != nil || res.Partial {
		t.Fatalf("restore %+v %v", res, err)
	}
	// Written: a.txt, dir/b.txt, run.sh (its mode), link; removed:
	// new.txt, newdir/deep/x, then newdir.
	if res.Written != 4 || res.Removed != 3 {
		t.Fatalf("restore %+v", res)
	}
	if readHost(t, d+"/a.txt") != "one\n" || readHost(t, d+"/dir/b.txt") != "bee\n" {
		t.Fatal("contents not restored")
	}
	mustNotExist(t, d+"/new.txt")
	mustNotExist(t, d+"/newdir")
	if fi, err := os.Stat(d + "/run.sh"); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("run.sh %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(d + "/empty"); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("empty dir %v", err)
	}
	if target, err := os.Readlink(d + "/link"); err != nil || target != "a.txt" {
		t.Fatalf("link -> %q %v", target, err)
	}
	if got := sb.LatestSnapshot(); got == nil || got.ID != "snap_1" {
		t.Fatalf("latest after restore %+v", got)
	}
	// Nothing changed since: restoring again writes nothing.
	if res, err := sb.Restore(t.Context(), "snap_1"); err != nil || res.Written != 0 || res.Removed != 0 {
		t.Fatalf("second restore %+v %v", res, err)
	}
	if _, err := sb.Restore(t.Context(), "snap_2"); err != nil {
		t.Fatal(err)
	}
	if readHost(t, d+"/a.txt") != "two\n" || readHost(t, d+"/newdir/deep/x") != "x" {
		t.Fatal("snap_2 not restored")
	}
	mustNotExist(t, d+"/dir/b.txt")
	mustNotExist(t, d+"/empty")
}

// Snapshots share blobs: after the first, a step changing one file of
// fifty stores one blob, and the unchanged files' entries are taken from
// the previous manifest without reading them, also after a restart.
func TestWorkspaceSnapshotSharesUnchangedFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m, err := NewManager(root, Options{UseBwrap: BwrapOff, UIDBase: DefaultUIDBase + 3_000_000, UIDCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := m.Get(t.Context(), "ses_share")
	if err != nil {
		t.Fatal(err)
	}
	d := sb.Dir()
	step(t, sb, "snap_a", func() {
		for i := range 50 {
			writeHost(t, fmt.Sprintf("%s/src/f%d.txt", d, i), fmt.Sprintf("file %d\n", i))
		}
	})
	if n := blobCount(t, sb); n != 50 {
		t.Fatalf("%d blobs, want 50", n)
	}
	first := sb.snaps.head
	step(t, sb, "snap_b", func() { writeHost(t, d+"/src/f7.txt", "changed\n") })
	if n := blobCount(t, sb); n != 51 {
		t.Fatalf("%d blobs, want 51", n)
	}
	second := sb.snaps.head
	for p, e := range second.Files {
		if (first.Files[p] == e) != (p != "src/f7.txt") {
			t.Errorf("%s: entry reused %v", p, first.Files[p] == e)
		}
	}
	// A restarted server finds the snapshots on disk; its next snapshot
	// reuses what it finds there.
	if err := m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager(root, Options{UseBwrap: BwrapOff, UIDBase: DefaultUIDBase + 3_000_000, UIDCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close(context.Background()) })
	sb2, _, err := m2.Get(t.Context(), "ses_share")
	if err != nil {
		t.Fatal(err)
	}
	if got := sb2.LatestSnapshot(); got == nil || got.ID != "snap_b" || got.Files != 50 {
		t.Fatalf("latest after restart %+v", got)
	}
	step(t, sb2, "snap_c", func() { writeHost(t, d+"/src/f8.txt", "changed too\n") })
	if n := blobCount(t, sb2); n != 52 {
		t.Fatalf("%d blobs, want 52", n)
	}
	if _, err := sb2.Restore(t.Context(), "snap_a"); err != nil {
		t.Fatal(err)
	}
	if readHost(t, d+"/src/f7.txt") != "file 7\n" || readHost(t, d+"/src/f8.txt") != "file 8\n" {
		t.Fatal("snap_a not restored after the restart")
	}
	// The head after a restore is the restored snapshot, across a
	// restart too; a new snapshot is the head again.
	reopen := func() *Sandbox {
		m3, err := NewManager(root, Options{UseBwrap: BwrapOff, UIDBase: DefaultUIDBase + 3_000_000, UIDCount: 100})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m3.Close(context.Background()) })
		sb3, _, err := m3.Get(t.Context(), "ses_share")
		if err != nil {
			t.Fatal(err)
		}
		return sb3
	}
	if got := reopen().LatestSnapshot(); got == nil || got.ID != "snap_a" {
		t.Fatalf("head after a restore and a restart %+v", got)
	}
	step(t, sb2, "snap_d", func() { writeHost(t, d+"/src/f9.txt", "nine\n") })
	if got := reopen().LatestSnapshot(); got == nil || got.ID != "snap_d" {
		t.Fatalf("head after a new snapshot and a restart %+v", got)
	}
	// Deleting the session deletes its snapshots.
	if err := m2.Remove("ses_share"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, filepath.Join(root, "ses_share", "snapshots"))
}

// The store is beside work/, the server's own (0700), and a command in
// bubblewrap cannot see it.
func TestWorkspaceSnapshotsOutsideTheWorkDirectory(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	_, sb := newBox(t, Options{UseBwrap: BwrapOn})
	step(t, sb, "snap_x", func() { writeHost(t, sb.Dir()+"/a.txt", "a") })
	if within(sb.Dir(), sb.snaps.dir) {
		t.Fatalf("store %s inside %s", sb.snaps.dir, sb.Dir())
	}
	fi, err := os.Stat(sb.snaps.dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store %v %v", fi.Mode(), err)
	}
	manifest := sb.snaps.manifestPath("snap_x")
	if _, err := os.Stat(manifest); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(t.Context(), fmt.Sprintf("ls %s; cat %s || echo hidden", filepath.Dir(sb.snaps.dir), manifest), 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Output, manifestMagic) || strings.Contains(res.Output, "snapshots\n") || !strings.Contains(res.Output, "hidden") {
		t.Fatalf("a command sees the snapshots: %s", res.Output)
	}
}

// Ids that are no snapshot id are refused as invalid before any path is
// made of them; another session's snapshot is not found.
func TestRestoreHostileSnapshotIDs(t *testing.T) {
	t.Parallel()
	m, sb := newBox(t, Options{UseBwrap: BwrapOff})
	step(t, sb, "snap_mine", func() { writeHost(t, sb.Dir()+"/a.txt", "a") })
	other, _, err := m.Get(t.Context(), "ses_other")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../..", "snap_../../ses_test/snapshots/manifests/snap_mine", "snap_a/b", "snap_", "", "snap_x.json", "HEAD"} {
		if _, err := m.RestoreSnapshot(t.Context(), "ses_other", id); !errors.Is(err, forge.ErrInvalid) {
			t.Errorf("%q: %v, want invalid", id, err)
		}
		if _, err := other.Restore(t.Context(), id); !errors.Is(err, forge.ErrInvalid) {
			t.Errorf("%q: %v, want invalid", id, err)
		}
	}
	if _, err := m.RestoreSnapshot(t.Context(), "ses_other", "snap_mine"); !errors.Is(err, forge.ErrSnapshotNotFound) {
		t.Errorf("another session's snapshot: %v", err)
	}
	if _, err := m.RestoreSnapshot(t.Context(), "ses_nobody", "snap_mine"); !errors.Is(err, forge.ErrSnapshotNotFound) {
		t.Errorf("a session without a sandbox: %v", err)
	}
	if _, err := m.RestoreSnapshot(t.Context(), "../ses_test", "snap_mine"); !errors.Is(err, forge.ErrSnapshotNotFound) {
		t.Errorf("a traversal session id: %v", err)
	}
	mustNotExist(t, filepath.Join(m.Root(), "ses_nobody"))
	if _, err := m.RestoreSnapshot(t.Context(), "ses_test", "snap_mine"); err != nil {
		t.Errorf("its own: %v", err)
	}
}

// Symlinks and hard links an agent leaves in the workspace after a
// snapshot are replaced by a restore, never written through: the files
// they point at outside stay as they were.
func TestRestoreDoesNotWriteThroughLinks(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	d := sb.Dir()
	outside := t.TempDir()
	writeHost(t, outside+"/a.txt", "outside a")
	writeHost(t, outside+"/top.txt", "outside top")
	writeHost(t, outside+"/hard.txt", "outside hard")
	step(t, sb, "snap_1", func() {
		writeHost(t, d+"/notes/a.txt", "inside a")
		writeHost(t, d+"/top.txt", "inside top")
		writeHost(t, d+"/hard.txt", "inside hard")
	})
	step(t, sb, "snap_2", func() {
		_ = os.RemoveAll(d + "/notes")
		_ = os.Symlink(outside, d+"/notes")
		_ = os.Remove(d + "/top.txt")
		_ = os.Symlink(outside+"/top.txt", d+"/top.txt")
		_ = os.Remove(d + "/hard.txt")
		if err := os.Link(outside+"/hard.txt", d+"/hard.txt"); err != nil {
			t.Fatal(err)
		}
	})
	res, err := sb.Restore(t.Context(), "snap_1")
	if err != nil || res.Partial {
		t.Fatalf("restore %+v %v", res, err)
	}
	for name, want := range map[string]string{"a.txt": "outside a", "top.txt": "outside top", "hard.txt": "outside hard"} {
		if got := readHost(t, outside+"/"+name); got != want {
			t.Errorf("outside %s: %q", name, got)
		}
	}
	for name, want := range map[string]string{"notes/a.txt": "inside a", "top.txt": "inside top", "hard.txt": "inside hard"} {
		fi, err := os.Lstat(d + "/" + name)
		if err != nil || !fi.Mode().IsRegular() || readHost(t, d+"/"+name) != want {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
	if fi, err := os.Lstat(d + "/notes"); err != nil || !fi.IsDir() {
		t.Errorf("notes: %v %v", fi, err)
	}
}

// A workspace larger than the limits gives a partial snapshot, never a
// failed step: files over LineCountMaxSize and past the read budget are
// skipped (and left alone by a restore), and the store stays within the
// workspace quota by pruning the oldest snapshots.
func TestWorkspaceSnapshotLimits(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff, LineCountMaxSize: 1000, SnapshotHashBytes: 4000, WorkspaceQuota: 20_000, MaxSnapshots: 3})
	d := sb.Dir()
	snap := step(t, sb, "snap_big", func() {
		writeHost(t, d+"/big.bin", strings.Repeat("b", 1500))
		for i := range 8 {
			writeHost(t, fmt.Sprintf("%s/f%d", d, i), strings.Repeat(itoa(i), 900))
		}
	})
	if snap == nil || !snap.Partial {
		t.Fatalf("snapshot %+v, want partial", snap)
	}
	m := sb.snaps.head
	// The walk hashed the files within its own budget (4000 bytes: four);
	// the snapshot reads at most as much again for the others.
	if !slicesContain(m.Skipped, "big.bin") || len(m.Files) >= 9 || len(m.Files)+len(m.Skipped) != 9 {
		t.Fatalf("files %d, skipped %v", len(m.Files), m.Skipped)
	}
	kept := map[string]bool{}
	for p := range m.Files {
		kept[p] = true
	}
	// A later step changes a skipped file and a kept one; restoring the
	// partial snapshot brings the kept one back and leaves the skipped.
	var keptName string
	for p := range kept {
		keptName = p
		break
	}
	step(t, sb, "snap_next", func() {
		writeHost(t, d+"/big.bin", "changed")
		writeHost(t, d+"/"+keptName, "changed")
	})
	res, err := sb.Restore(t.Context(), "snap_big")
	if err != nil || !res.Partial {
		t.Fatalf("restore %+v %v", res, err)
	}
	if readHost(t, d+"/big.bin") != "changed" {
		t.Error("a skipped file was touched")
	}
	if readHost(t, d+"/"+keptName) == "changed" {
		t.Error("a kept file was not restored")
	}
	// More snapshots than MaxSnapshots, more bytes than the quota: the
	// oldest go, with their blobs, and the store stays within the quota.
	for i := range 6 {
		step(t, sb, fmt.Sprintf("snap_n%d", i), func() {
			writeHost(t, fmt.Sprintf("%s/g%d", d, i), strings.Repeat("g", 990)+itoa(i))
		})
		if sb.snaps.bytes > 20_000 {
			t.Fatalf("store %d bytes over the quota", sb.snaps.bytes)
		}
	}
	ids, _ := sb.Snapshots()
	if len(ids) > 3 || ids[len(ids)-1] != "snap_n5" {
		t.Fatalf("snapshots %v", ids)
	}
	if _, err := sb.Restore(t.Context(), "snap_big"); !errors.Is(err, forge.ErrSnapshotNotFound) {
		t.Fatalf("a pruned snapshot: %v", err)
	}
	var onDisk int64
	_ = filepath.WalkDir(sb.snaps.dir, func(p string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() && de.Name() != "HEAD" {
			fi, _ := de.Info()
			onDisk += fi.Size()
		}
		return nil
	})
	if onDisk != sb.snaps.bytes {
		t.Fatalf("store counts %d bytes, disk holds %d", sb.snaps.bytes, onDisk)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Any name a file may have survives the manifest: spaces, quotes, newlines,
// bytes that are not UTF-8; a damaged manifest is refused, not half read.
func TestManifestRoundTrip(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("ab", 32)
	m := &manifest{ID: "snap_x", Seq: 7, Truncated: true, Partial: true,
		Files: map[string]*entry{
			"a b.txt":      {Hash: h, Size: 3, Mode: 0o644, Meta: [4]int64{1, 2, 3, 4}},
			"new\nline":    {Hash: h, Size: 0, Mode: 0o600, Meta: [4]int64{-1, 0, 0, 9}},
			`q"uote\x`:     {Link: "../target with spaces"},
			"d/\xff\xfe.b": {Hash: h, Size: 5, Mode: 0o755},
		},
		Dirs:    map[string]uint32{"d": 0o750, "e mpty": 0o700},
		Skipped: []string{"big one.bin"},
	}
	got, err := decodeManifest(encodeManifest(m))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || got.Seq != m.Seq || !got.Truncated || !got.Partial || len(got.Files) != 4 ||
		len(got.Dirs) != 2 || got.Dirs["e mpty"] != 0o700 || len(got.Skipped) != 1 || got.Skipped[0] != "big one.bin" {
		t.Fatalf("decoded %+v", got)
	}
	for p, e := range m.Files {
		if g := got.Files[p]; g == nil || *g != *e {
			t.Errorf("%q: %+v, want %+v", p, g, e)
		}
	}
	for _, bad := range []string{"", "forge-snapshot 2 snap_x 1 -\n", "forge-snapshot 1 snap_x 1 -\nf abc 1 644 1 2 3 4 \"a\"\n",
		"forge-snapshot 1 snap_x 1 -\nd 755 a\n", "forge-snapshot 1 snap_x 1 -\nx \"a\"\n"} {
		if _, err := decodeManifest([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// Past the Manager's memory budget the stores used least recently are
// unloaded; they are read again from disk when next used, whole.
func TestSnapshotStoresUnloadPastTheirMemoryBudget(t *testing.T) {
	t.Parallel()
	m, a := newBox(t, Options{UseBwrap: BwrapOff})
	m.stores.budget = 30
	b, _, err := m.Get(t.Context(), "ses_b")
	if err != nil {
		t.Fatal(err)
	}
	files := func(sb *Sandbox, content string) func() {
		return func() {
			for i := range 10 {
				writeHost(t, fmt.Sprintf("%s/f%d", sb.Dir(), i), content+itoa(i))
			}
		}
	}
	step(t, a, "snap_a1", files(a, "a"))
	step(t, a, "snap_a2", files(a, "A"))
	if !a.snaps.loaded {
		t.Fatal("a not loaded")
	}
	step(t, b, "snap_b1", files(b, "b")) // a (10 + 20) and b (10 + 10) exceed 30
	a.snaps.mu.Lock()
	loaded := a.snaps.loaded
	a.snaps.mu.Unlock()
	if loaded || !b.snaps.loaded {
		t.Fatalf("loaded: a %v, b %v", loaded, b.snaps.loaded)
	}
	if got := a.LatestSnapshot(); got == nil || got.ID != "snap_a2" {
		t.Fatalf("a's latest after reload %+v", got)
	}
	if _, err := a.Restore(t.Context(), "snap_a1"); err != nil {
		t.Fatal(err)
	}
	if readHost(t, a.Dir()+"/f3") != "a3" {
		t.Fatal("a not restored after reload")
	}
	if err := m.Remove("ses_b"); err != nil {
		t.Fatal(err)
	}
	m.stores.mu.Lock()
	_, kept := m.stores.elems[b.snaps]
	m.stores.mu.Unlock()
	if kept {
		t.Fatal("a removed sandbox's store is still counted")
	}
}

// A snapshot that cannot be kept (here its store is not a directory) never
// fails the step: the patch stands, without a snapshot.
func TestWorkspaceSnapshotFailureLeavesThePatch(t *testing.T) {
	t.Parallel()
	_, sb := newBox(t, Options{UseBwrap: BwrapOff})
	if err := os.WriteFile(sb.snaps.dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	changes, err := sb.TrackSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	writeHost(t, sb.Dir()+"/a.txt", "a")
	patch, snap, err := changes(t.Context(), func() string { return "snap_1" })
	if err != nil || len(patch.Files) != 1 || snap != nil {
		t.Fatalf("patch %+v, snapshot %+v, %v", patch, snap, err)
	}
	if got := sb.LatestSnapshot(); got != nil {
		t.Fatalf("latest %+v", got)
	}
	if _, err := sb.Restore(t.Context(), "snap_1"); err == nil {
		t.Fatal("restored a snapshot that was never kept")
	}
}

// Manifests after the first are deltas of it while the workspace differs
// little: an unchanged file costs them nothing. Pruning the whole one
// keeps it (as a base) while deltas stand on it, every snapshot kept stays
// restorable, across a restart too, and the base goes with the last delta.
func TestWorkspaceSnapshotDeltas(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	opts := Options{UseBwrap: BwrapOff, MaxSnapshots: 3, UIDBase: DefaultUIDBase + 5_000_000, UIDCount: 100}
	m, err := NewManager(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := m.Get(t.Context(), "ses_delta")
	if err != nil {
		t.Fatal(err)
	}
	d := sb.Dir()
	step(t, sb, "snap_0", func() {
		for i := range 200 {
			writeHost(t, fmt.Sprintf("%s/src/f%d.txt", d, i), fmt.Sprintf("file %d\n", i))
		}
	})
	size := func(id string) int64 {
		fi, err := os.Stat(sb.snaps.manifestPath(id))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for i := 1; i <= 3; i++ {
		step(t, sb, "snap_"+itoa(i), func() {
			writeHost(t, fmt.Sprintf("%s/src/f%d.txt", d, i), "changed "+itoa(i)+"\n")
			_ = os.Remove(fmt.Sprintf("%s/src/f%d.txt", d, 100+i))
		})
	}
	if whole, delta := sizeOf(t, sb.snaps.basePath("snap_0")), size("snap_3"); delta*10 > whole {
		t.Fatalf("delta %d bytes against a whole manifest of %d", delta, whole)
	}
	// snap_0 was pruned (three kept) but stays as the base of the others.
	if ids, _ := sb.Snapshots(); strings.Join(ids, " ") != "snap_1 snap_2 snap_3" {
		t.Fatalf("snapshots %v", ids)
	}
	if _, err := sb.Restore(t.Context(), "snap_0"); !errors.Is(err, forge.ErrSnapshotNotFound) {
		t.Fatalf("the pruned base restored: %v", err)
	}
	if _, err := sb.Restore(t.Context(), "snap_1"); err != nil {
		t.Fatal(err)
	}
	if readHost(t, d+"/src/f1.txt") != "changed 1\n" || readHost(t, d+"/src/f2.txt") != "file 2\n" || readHost(t, d+"/src/f102.txt") != "file 102\n" {
		t.Fatal("snap_1 not restored")
	}
	mustNotExist(t, d+"/src/f101.txt")
	// After a restart the deltas resolve against the base on disk.
	if err := m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close(context.Background()) })
	sb2, _, err := m2.Get(t.Context(), "ses_delta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb2.Restore(t.Context(), "snap_3"); err != nil {
		t.Fatal(err)
	}
	if readHost(t, d+"/src/f3.txt") != "changed 3\n" || readHost(t, d+"/src/f1.txt") != "changed 1\n" {
		t.Fatal("snap_3 not restored after the restart")
	}
	mustNotExist(t, d+"/src/f103.txt")
	// Steps that change most files write whole manifests; once no delta
	// stands on snap_0 it goes, and every blob on disk is held.
	for i := 4; i <= 8; i++ {
		step(t, sb2, "snap_"+itoa(i), func() {
			for j := range 200 {
				writeHost(t, fmt.Sprintf("%s/src/f%d.txt", d, j), fmt.Sprintf("round %d %d\n", i, j))
			}
		})
	}
	mustNotExist(t, sb2.snaps.basePath("snap_0"))
	if _, err := sb2.Restore(t.Context(), "snap_6"); err != nil || readHost(t, d+"/src/f5.txt") != "round 6 5\n" {
		t.Fatalf("snap_6: %v", err)
	}
	var onDisk int64
	_ = filepath.WalkDir(sb2.snaps.dir, func(p string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() && de.Name() != "HEAD" {
			fi, _ := de.Info()
			onDisk += fi.Size()
		}
		return nil
	})
	if onDisk != sb2.snaps.bytes {
		t.Fatalf("store counts %d bytes, disk holds %d", sb2.snaps.bytes, onDisk)
	}
	if n := blobCount(t, sb2); n != 3*200 {
		t.Fatalf("%d blobs, want those of the three snapshots kept (600)", n)
	}
}

func sizeOf(t testing.TB, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
