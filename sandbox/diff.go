package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/forge-runtime/forge"
)

// Patch is what a step changed in the work directory: the data of a
// "patch" part.
type Patch = forge.Patch

// File change statuses.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// FileChange is one changed file. Added and Removed count lines; they are
// zero for binary files and for files larger than LineCountMaxSize.
type FileChange = forge.FileChange

// MaxSnapshotFiles bounds the files a Snapshot records.
const MaxSnapshotFiles = 50000

// Snapshot is the state of the work directory's files (not their content:
// a hash and per-line hashes of the small ones, the metadata of all). .git
// is skipped.
type Snapshot struct {
	files map[string]*fileState
	// dirs are the directories below the work directory, with their
	// permissions (a workspace snapshot recreates them, empty ones too).
	dirs    map[string]fs.FileMode
	partial bool
	// hashedBytes is how much of the files' content the snapshot read.
	hashedBytes int64
}

type fileState struct {
	size int64
	mode fs.FileMode
	meta fileMeta
	// hashed says hash (and lines, for text) describe the content;
	// otherwise the file is compared by its metadata.
	hashed   bool
	hash     [32]byte
	lines    []uint64 // per-line hashes; nil when binary, too large or not hashed
	binary   bool
	tooLarge bool
	target   string // a symlink's target
}

// fileMeta identifies a version of a file without reading it: any write
// changes its ctime, which (unlike mtime) no program can set back.
type fileMeta struct {
	mtime, ctime int64
	dev, ino     uint64
}

func metaOf(fi fs.FileInfo) fileMeta {
	m := fileMeta{mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		m.ctime = st.Ctim.Nano()
		m.dev, m.ino = uint64(st.Dev), st.Ino
	}
	return m
}

// Snapshot records the work directory's files. Files up to
// LineCountMaxSize are read and hashed, until SnapshotHashBytes have been
// read; larger files, and those past that budget, are recorded by size,
// times, inode and mode, so that a snapshot costs about one stat per file
// whatever the files hold (a 16 GiB sparse file included). It stops with
// ctx's error when ctx ends.
func (s *Sandbox) Snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{files: map[string]*fileState{}, dirs: map[string]fs.FileMode{}}
	limit := s.m.opts.LineCountMaxSize
	budget := s.m.opts.SnapshotHashBytes
	hook := s.m.snapshotHook
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if hook != nil {
			hook()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err != nil {
			if p == s.dir {
				return err
			}
			return nil
		}
		if d.IsDir() {
			if p == s.dir {
				return nil
			}
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if fi, err := d.Info(); err == nil {
				snap.dirs[s.rel(p)] = fi.Mode().Perm()
			}
			return nil
		}
		if len(snap.files) >= MaxSnapshotFiles {
			snap.partial = true
			return filepath.SkipAll
		}
		rel := s.rel(p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return nil
			}
			snap.files[rel] = &fileState{mode: fs.ModeSymlink, hashed: true, hash: sha256.Sum256([]byte(t)), binary: true, target: t}
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st := &fileState{size: fi.Size(), mode: fi.Mode().Perm(), meta: metaOf(fi)}
			switch {
			case fi.Size() > limit:
				st.tooLarge = true
			case budget > 0 && snap.hashedBytes+fi.Size() > budget:
				// Compared by metadata: changes are still seen, not counted.
			default:
				if !s.hashFile(p, limit, st) {
					return nil
				}
				if st.hashed {
					snap.hashedBytes += st.size
				}
			}
			snap.files[rel] = st
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: snapshot: %w", err)
	}
	return snap, nil
}

// hashFile reads a file of at most limit bytes (as its stat said) into st;
// false when it cannot be read. A file that grew past limit since is
// recorded as too large.
func (s *Sandbox) hashFile(p string, limit int64, st *fileState) bool {
	f, err := s.openInside(p, os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return false
	}
	if fi, err := f.Stat(); err == nil {
		st.size, st.meta, st.mode = fi.Size(), metaOf(fi), fi.Mode().Perm()
	}
	if int64(len(data)) > limit {
		st.tooLarge = true
		return true
	}
	st.size = int64(len(data))
	st.hashed = true
	st.hash = sha256.Sum256(data)
	if isBinary(data) {
		st.binary = true
		return true
	}
	st.lines = lineHashes(data)
	return true
}

// changed reports whether a file differs between two snapshots: by content
// when both read it, by metadata otherwise.
func changed(a, b *fileState) bool {
	if a.mode != b.mode {
		return true
	}
	if a.hashed && b.hashed {
		return a.hash != b.hash
	}
	return a.size != b.size || a.meta != b.meta
}

func lineHashes(data []byte) []uint64 {
	var out []uint64
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		h := fnv.New64a()
		h.Write(line)
		out = append(out, h.Sum64())
	}
	return out
}

// countLines counts lines as diff tools do: a last line without a newline
// counts.
func countLines(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// Diff snapshots the work directory and compares it with before. It returns
// the changes and the new snapshot (the "before" of the next step).
func (s *Sandbox) Diff(ctx context.Context, before *Snapshot) (Patch, *Snapshot, error) {
	after, err := s.Snapshot(ctx)
	if err != nil {
		return Patch{}, nil, err
	}
	return Compare(before, after), after, nil
}

var _ forge.Sandbox = (*Sandbox)(nil)

// Track records the state of the work directory and returns a func that
// reports what changed since (forge.Sandbox). Both stop when their context
// ends.
func (s *Sandbox) Track(ctx context.Context) (func(context.Context) (Patch, error), error) {
	before, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (Patch, error) {
		patch, _, err := s.Diff(ctx, before)
		return patch, err
	}, nil
}

// Compare lists the files added, modified and deleted from a to b, sorted
// by path. A nil a is an empty directory.
func Compare(a, b *Snapshot) Patch {
	if a == nil {
		a = &Snapshot{}
	}
	if b == nil {
		b = &Snapshot{}
	}
	var p Patch
	p.Partial = a.partial || b.partial
	for path, nb := range b.files {
		ob, ok := a.files[path]
		switch {
		case !ok:
			p.Files = append(p.Files, FileChange{Path: path, Status: Added, Added: len(nb.lines), Binary: nb.binary, TooLarge: nb.tooLarge})
		case changed(ob, nb):
			c := FileChange{Path: path, Status: Modified, Binary: ob.binary || nb.binary, TooLarge: ob.tooLarge || nb.tooLarge}
			switch {
			case c.Binary || c.TooLarge:
			case ob.hashed && nb.hashed:
				c.Added, c.Removed = editCounts(ob.lines, nb.lines)
			default:
				p.Partial = true // past the hash budget: not counted
			}
			p.Files = append(p.Files, c)
		}
	}
	for path, ob := range a.files {
		if _, ok := b.files[path]; !ok {
			if !ob.hashed && !ob.tooLarge {
				p.Partial = true
			}
			p.Files = append(p.Files, FileChange{Path: path, Status: Deleted, Removed: len(ob.lines), Binary: ob.binary, TooLarge: ob.tooLarge})
		}
	}
	sort.Slice(p.Files, func(i, j int) bool { return p.Files[i].Path < p.Files[j].Path })
	return p
}

// editCounts returns the lines added and removed by a shortest edit script
// from a to b (Myers), bounded in work; past the bound it falls back to a
// multiset count, which ignores moves.
func editCounts(a, b []uint64) (added, removed int) {
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return m, n
	}
	dmax := n + m
	if budget := 50_000_000 / (n + m); dmax > budget {
		dmax = max(budget, 64)
	}
	off := dmax + 1
	v := make([]int, 2*dmax+3)
	for d := 0; d <= dmax; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return (d + m - n) / 2, (d - m + n) / 2
			}
		}
	}
	counts := map[uint64]int{}
	for _, h := range a {
		counts[h]++
	}
	common := 0
	for _, h := range b {
		if counts[h] > 0 {
			counts[h]--
			common++
		}
	}
	return m - common, n - common
}
