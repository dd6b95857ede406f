package sandbox

// Workspace snapshots: after a step that changed files, the engine asks
// for a restorable snapshot of the work directory (TrackSnapshot). It is
// kept in <base>/snapshots/, beside work/ and never inside it: bubblewrap
// binds only work/ and home/, and the directory is the server's (0700), so
// a command can neither see nor change a snapshot.
//
//	snapshots/blobs/ab/abcdef…   file contents, named by their sha256
//	snapshots/manifests/<id>   path -> hash, size, mode, metadata; symlinks; directories (manifest.go):
//	                           whole, or a delta of the newest whole one (<id>.base once pruned)
//	snapshots/HEAD   after a restore, the id restored to (otherwise the newest is the head)
//
// Snapshots of a session share blobs. A manifest is built from the previous
// one and the step's walk of the files (the one its patch needed): a file
// whose size, mode, times and inode are those of the previous manifest's
// entry (a write changes its ctime, which no program can set back), or
// whose content the walk hashed to a blob already kept, takes that entry
// without being read. Only the files the step changed are read and
// stored.
//
// Limits: a file larger than LineCountMaxSize is not kept, a snapshot
// reads at most SnapshotHashBytes of new content, and the store (blobs and
// manifests) stays within WorkspaceQuota, the oldest snapshots being pruned
// first to make room; a file that cannot be kept is listed as skipped and
// the snapshot is partial. A walk stopped at MaxSnapshotFiles makes it
// partial too (truncated: a restore then removes no file, since it cannot
// tell which ones came later). At most MaxSnapshots are kept. .git
// directories are never snapshotted nor touched by a restore.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/forge-runtime/forge"
)

// lockSnapshots takes the store's lock; the func it returns releases it
// and records the use (storeLRU).
func (s *Sandbox) lockSnapshots() (st *snapStore, unlock func()) {
	st = s.snaps
	st.mu.Lock()
	return st, func() {
		w := st.weight()
		st.mu.Unlock()
		s.m.stores.used(st, w)
	}
}

// TrackSnapshot is Track whose changes func also keeps a restorable
// snapshot when the step changed files (forge.SnapshotSandbox). A snapshot
// that cannot be kept is logged and returned nil: it never fails the step.
func (s *Sandbox) TrackSnapshot(ctx context.Context) (func(context.Context, func() string) (Patch, *forge.WorkspaceSnapshot, error), error) {
	before, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, newID func() string) (Patch, *forge.WorkspaceSnapshot, error) {
		patch, after, err := s.Diff(ctx, before)
		if err != nil || patch.Empty() {
			return patch, nil, err
		}
		ws, err := s.keep(ctx, newID(), after)
		if err != nil {
			if ctx.Err() == nil {
				s.m.log.Warn("sandbox: workspace snapshot not kept", "session_id", s.id, "err", err)
			}
			return patch, nil, nil
		}
		return patch, ws, nil
	}, nil
}

var _ forge.SnapshotSandbox = (*Sandbox)(nil)

// LatestSnapshot is the snapshot the files were last saved as or restored
// to, nil when there is none (or it was pruned).
func (s *Sandbox) LatestSnapshot() *forge.WorkspaceSnapshot {
	if s.snaps == nil {
		return nil
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil || st.head == nil || !st.has(st.head.ID) {
		return nil
	}
	return &forge.WorkspaceSnapshot{ID: st.head.ID, Files: len(st.head.Files), Partial: st.head.Partial}
}

// Snapshots lists the session's workspace snapshots, oldest first.
func (s *Sandbox) Snapshots() ([]string, error) {
	if s.snaps == nil {
		return nil, nil
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil {
		return nil, err
	}
	ids := make([]string, len(st.list))
	for i, r := range st.list {
		ids[i] = r.id
	}
	return ids, nil
}

// keep saves a snapshot named id of the files as after (the step's walk)
// found them.
func (s *Sandbox) keep(ctx context.Context, id string, after *Snapshot) (*forge.WorkspaceSnapshot, error) {
	if s.snaps == nil {
		return nil, errors.New("sandbox: no snapshot store")
	}
	if !snapshotIDPattern.MatchString(id) {
		return nil, fmt.Errorf("sandbox: invalid snapshot id %q", id)
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil {
		return nil, err
	}
	if st.has(id) {
		return nil, fmt.Errorf("sandbox: snapshot %s exists", id)
	}
	opts := s.m.opts
	m := &manifest{ID: id, Seq: st.seq + 1, Files: make(map[string]*entry, len(after.files)),
		Dirs: make(map[string]uint32, len(after.dirs)), Truncated: after.partial}
	for p, mode := range after.dirs {
		m.Dirs[p] = uint32(mode)
	}
	var prev map[string]*entry
	if st.head != nil {
		prev = st.head.Files
	}
	// held are the references taken for m: they keep its blobs from being
	// pruned to make room, and are dropped again if m is not saved.
	var held []string
	saved := false
	defer func() {
		if !saved {
			for _, h := range held {
				st.unref(h)
			}
		}
	}()
	take := func(p string, e *entry) {
		st.ref(e.Hash)
		held = append(held, e.Hash)
		m.Files[p] = e
	}
	paths := make([]string, 0, len(after.files))
	for p := range after.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var read int64
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := after.files[p]
		if f.mode&fs.ModeSymlink != 0 {
			m.Files[p] = &entry{Link: f.target}
			continue
		}
		meta := metaKey(f.meta)
		if e := prev[p]; e != nil && e.Link == "" && e.Size == f.size && e.Mode == uint32(f.mode) && e.Meta == meta && st.refs[e.Hash] > 0 {
			take(p, e)
			continue
		}
		if f.hashed {
			if h := hex.EncodeToString(f.hash[:]); st.refs[h] > 0 {
				take(p, &entry{Hash: h, Size: f.size, Mode: uint32(f.mode), Meta: meta})
				continue
			}
		}
		if f.size > opts.LineCountMaxSize || (opts.SnapshotHashBytes > 0 && read+f.size > opts.SnapshotHashBytes) {
			m.Skipped = append(m.Skipped, p)
			continue
		}
		e, n, err := s.storeFile(p)
		read += n
		if err != nil {
			m.Skipped = append(m.Skipped, p)
			continue
		}
		take(p, e)
	}
	m.Partial = m.Truncated || len(m.Skipped) > 0
	// A delta of the base while it differs little: an unchanged file
	// costs the manifest nothing either.
	var data []byte
	delta := false
	if st.base != nil {
		data, delta = encodeDelta(m, st.base)
	}
	if delta {
		m.Base = st.base.ID
	} else {
		data = encodeManifest(m)
	}
	size, err := writeAtomic(st.manifestPath(id), func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: snapshot manifest: %w", err)
	}
	saved = true
	st.seq = m.Seq
	st.list = append(st.list, snapRef{id: id, seq: m.Seq, bytes: size, base: m.Base})
	st.bytes += size
	st.head = m
	if !delta {
		st.base = m
	}
	if st.headFile {
		if err := os.Remove(filepath.Join(st.dir, "HEAD")); err == nil || errors.Is(err, fs.ErrNotExist) {
			st.headFile = false
		}
	}
	for opts.MaxSnapshots > 0 && len(st.list) > opts.MaxSnapshots {
		st.pruneOldest()
	}
	// The manifest itself may take the store over its room.
	for opts.WorkspaceQuota > 0 && st.bytes > opts.WorkspaceQuota && len(st.list) > 1 {
		st.pruneOldest()
	}
	return &forge.WorkspaceSnapshot{ID: id, Files: len(m.Files), Partial: m.Partial}, nil
}

// storeFile reads a file of the work directory (refusing symlinks on the
// way, as the file tools do) and keeps its content as a blob unless one
// holds it already. n is how much it read.
func (s *Sandbox) storeFile(rel string) (e *entry, n int64, err error) {
	st := s.snaps
	limit := s.m.opts.LineCountMaxSize
	f, err := s.openInside(filepath.Join(s.dir, filepath.FromSlash(rel)), os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, int64(len(data)), err
	}
	n = int64(len(data))
	if n > limit {
		return nil, n, errors.New("grew past the size kept")
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, n, err
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	e = &entry{Hash: h, Size: n, Mode: uint32(fi.Mode().Perm()), Meta: metaKey(metaOf(fi))}
	if st.refs[h] > 0 {
		return e, n, nil
	}
	if !st.room(n, s.m.opts.WorkspaceQuota) {
		return nil, n, errors.New("no room left in the snapshot store")
	}
	if err := writeBlob(st.blobPath(h), data); err != nil {
		return nil, n, err
	}
	st.blobSize[h] = n
	st.bytes += n
	return e, n, nil
}

// ListSnapshots lists the workspace snapshots the session's sandbox keeps,
// oldest first, without provisioning a sandbox (none: an empty list).
func (m *Manager) ListSnapshots(_ context.Context, sessionID string) ([]forge.WorkspaceSnapshotInfo, error) {
	out := []forge.WorkspaceSnapshotInfo{}
	if !validID.MatchString(sessionID) {
		return out, nil
	}
	entries, err := os.ReadDir(filepath.Join(m.root, sessionID, "snapshots", "manifests"))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: list snapshots: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !snapshotIDPattern.MatchString(e.Name()) {
			continue // a pruned base kept for its deltas, a temporary file
		}
		fi, err := e.Info()
		if err != nil {
			continue // pruned meanwhile
		}
		out = append(out, forge.WorkspaceSnapshotInfo{ID: e.Name(), CreatedAt: fi.ModTime().UTC()})
	}
	slices.SortFunc(out, func(a, b forge.WorkspaceSnapshotInfo) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}
