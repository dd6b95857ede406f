package sandbox

// Restoring a workspace snapshot: the work directory is walked, compared
// with the manifest and brought back to it through an os.Root.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/forge-runtime/forge"
)

// workState is the work directory as a restore finds it (metadata only).
type workState struct {
	files map[string]fs.FileInfo // everything but directories
	dirs  map[string]bool
	// truncated: the walk stopped before seeing everything.
	truncated bool
}

func (s *Sandbox) walkState(ctx context.Context) (*workState, error) {
	ws := &workState{files: map[string]fs.FileInfo{}, dirs: map[string]bool{}}
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err != nil {
			if p == s.dir {
				return err
			}
			return nil
		}
		if p == s.dir {
			return nil
		}
		if len(ws.files)+len(ws.dirs) >= 2*MaxSnapshotFiles {
			ws.truncated = true
			return filepath.SkipAll
		}
		rel := s.rel(p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			ws.dirs[rel] = true
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		ws.files[rel] = fi
		return nil
	})
	return ws, err
}

// Restore brings the work directory back to the snapshot id: files and
// directories made since are removed (unless the snapshot is truncated),
// changed and deleted ones written again, symlinks recreated. Files the
// snapshot skipped, and .git directories, are left as they are. Every
// change goes through an os.Root on the work directory and replaces
// entries rather than writing through them (a new file renamed over the
// old name), so a symlink or hard link found in the workspace is never
// followed out of it.
func (s *Sandbox) Restore(ctx context.Context, id string) (forge.WorkspaceRestore, error) {
	res := forge.WorkspaceRestore{Snapshot: id}
	if !snapshotIDPattern.MatchString(id) {
		return res, forge.Errorf(forge.ErrInvalid, "snapshot %q is not a snapshot id (snap_...)", id)
	}
	if s.snaps == nil {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", id)
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil {
		return res, err
	}
	if !st.has(id) {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", id)
	}
	m, err := st.readManifest(id)
	if err != nil {
		return res, fmt.Errorf("sandbox: snapshot %s: %w", id, err)
	}
	res.Partial = m.Partial
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return res, fmt.Errorf("sandbox: restore: %w", err)
	}
	defer root.Close()
	cur, err := s.walkState(ctx)
	if err != nil {
		return res, fmt.Errorf("sandbox: restore: %w", err)
	}
	if cur.truncated {
		res.Partial = true // files past the walk's bound stay
	}
	var failed []error
	fail := func(p string, err error) {
		failed = append(failed, fmt.Errorf("%s: %w", p, err))
	}
	skipped := map[string]bool{}
	for _, p := range m.Skipped {
		skipped[p] = true
	}
	// What came since goes: files first, then directories (the topmost of
	// each tree that the snapshot lacks).
	if !m.Truncated {
		for p, fi := range cur.files {
			if e := m.Files[p]; (e != nil && (e.Link != "") == (fi.Mode()&fs.ModeSymlink != 0)) || skipped[p] {
				continue
			}
			if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fail(p, err)
				continue
			}
			delete(cur.files, p)
			res.Removed++
		}
		var extra []string
		for p := range cur.dirs {
			if _, ok := m.Dirs[p]; !ok {
				extra = append(extra, p)
			}
		}
		sort.Strings(extra)
		for _, p := range extra {
			if parent := path.Dir(p); parent != "." {
				if _, ok := m.Dirs[parent]; !ok {
					continue // inside an extra directory removed whole
				}
			}
			if err := root.RemoveAll(p); err != nil {
				fail(p, err)
				continue
			}
			res.Removed++
		}
	}
	dirs := make([]string, 0, len(m.Dirs))
	for p := range m.Dirs {
		dirs = append(dirs, p)
	}
	sort.Strings(dirs) // parents first
	for _, p := range dirs {
		if err := s.restoreDir(root, p); err != nil {
			fail(p, err)
		}
	}
	paths := make([]string, 0, len(m.Files))
	for p := range m.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	head := &manifest{ID: m.ID, Seq: m.Seq, Files: make(map[string]*entry, len(m.Files)), Dirs: m.Dirs,
		Skipped: m.Skipped, Truncated: m.Truncated, Partial: m.Partial}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		e := m.Files[p]
		head.Files[p] = e
		written, err := s.restoreFile(root, p, e, cur.files[p])
		if err != nil {
			fail(p, err)
			continue
		}
		if written != nil {
			head.Files[p] = written
			res.Written++
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children first
		if err := restoreDirMode(root, dirs[i], fs.FileMode(m.Dirs[dirs[i]])); err != nil {
			fail(dirs[i], err)
		}
	}
	// The quota is measured again before the next write.
	s.mu.Lock()
	s.usage = -1
	s.mu.Unlock()
	st.head = head
	if err := st.writeHead(id); err != nil {
		s.m.log.Warn("sandbox: snapshot head not written", "session_id", s.id, "err", err)
	} else {
		st.headFile = true
	}
	if len(failed) > 0 {
		res.Partial = true
		s.m.log.Warn("sandbox: restore left files as they were", "session_id", s.id, "snapshot", id,
			"failed", len(failed), "err", errors.Join(failed[:min(len(failed), 5)]...))
	}
	return res, nil
}

// restoreDir makes p a directory, replacing whatever else is there (a
// symlink is removed, not followed). Its mode is set after the files are
// written (restoreDirModes): a read-only directory still takes them.
func (s *Sandbox) restoreDir(root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		if err := root.Remove(p); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := root.Mkdir(p, 0o700); err != nil {
		return err
	}
	if s.uid >= 0 {
		return root.Lchown(p, s.uid, s.gid)
	}
	return nil
}

// restoreDirMode sets a directory's permissions back (p was made a
// directory by restoreDir).
func restoreDirMode(root *os.Root, p string, perm fs.FileMode) error {
	fi, err := root.Lstat(p)
	if err != nil || !fi.IsDir() {
		return err
	}
	if fi.Mode().Perm() == perm {
		return nil
	}
	return root.Chmod(p, perm)
}

// restoreFile makes p the file or symlink e, unless cur (what the walk
// found there) already is. It returns the entry as written (with the new
// file's metadata), nil when nothing needed writing.
func (s *Sandbox) restoreFile(root *os.Root, p string, e *entry, cur fs.FileInfo) (*entry, error) {
	if e.Link != "" {
		if cur != nil && cur.Mode()&fs.ModeSymlink != 0 {
			if t, err := root.Readlink(p); err == nil && t == e.Link {
				return nil, nil
			}
		}
		if err := s.clear(root, p); err != nil {
			return nil, err
		}
		if err := root.Symlink(e.Link, p); err != nil {
			return nil, err
		}
		if s.uid >= 0 {
			if err := root.Lchown(p, s.uid, s.gid); err != nil {
				return nil, err
			}
		}
		return e, nil
	}
	if cur != nil && cur.Mode().IsRegular() && cur.Size() == e.Size && uint32(cur.Mode().Perm()) == e.Mode {
		if metaKey(metaOf(cur)) == e.Meta || s.sameContent(root, p, e.Hash) {
			return nil, nil
		}
	}
	blob, err := os.Open(s.snaps.blobPath(e.Hash))
	if err != nil {
		return nil, err
	}
	defer blob.Close()
	tmp := path.Join(path.Dir(p), ".forge-restore-"+rand.Text())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), blob)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != e.Hash {
		err = errors.New("the kept content is damaged")
	}
	if err == nil {
		err = f.Chmod(fs.FileMode(e.Mode))
	}
	if err == nil && s.uid >= 0 {
		err = f.Chown(s.uid, s.gid)
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && cur != nil && cur.IsDir() {
		err = root.RemoveAll(p)
	}
	if err == nil {
		// Rename replaces the name: a symlink or hard link there is
		// dropped, never written through.
		err = root.Rename(tmp, p)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return nil, err
	}
	// The rename keeps the inode; only the ctime may move: read it again.
	if after, err := root.Lstat(p); err == nil {
		fi = after
	}
	return &entry{Hash: e.Hash, Size: e.Size, Mode: e.Mode, Meta: metaKey(metaOf(fi))}, nil
}

// clear removes whatever is at p (a directory with its contents).
func (s *Sandbox) clear(root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return root.RemoveAll(p)
	default:
		return root.Remove(p)
	}
}

// sameContent reports whether the regular file p holds the content of
// hash (read through the root, without following a final symlink).
func (s *Sandbox) sameContent(root *os.Root, p, want string) bool {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, s.m.opts.LineCountMaxSize+1)); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == want
}

// RestoreSnapshot restores the session's work directory to a workspace
// snapshot (Sandbox.Restore). A session without a sandbox has no
// snapshots: none is provisioned for the asking.
func (m *Manager) RestoreSnapshot(ctx context.Context, sessionID, snapshotID string) (forge.WorkspaceRestore, error) {
	res := forge.WorkspaceRestore{Snapshot: snapshotID}
	if !snapshotIDPattern.MatchString(snapshotID) {
		return res, forge.Errorf(forge.ErrInvalid, "snapshot %q is not a snapshot id (snap_...)", snapshotID)
	}
	if !validID.MatchString(sessionID) {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", snapshotID)
	}
	if _, err := os.Lstat(filepath.Join(m.root, sessionID, "snapshots", "manifests", snapshotID)); err != nil {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", snapshotID)
	}
	sb, _, err := m.Get(ctx, sessionID)
	if err != nil {
		return res, err
	}
	return sb.Restore(ctx, snapshotID)
}
