//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/forge-runtime/forge"
)

// lockWait is how long taking ownership retries a lock someone holds. A
// process that forks (to run a command, an MCP server, a test's child)
// lends the child every descriptor it has until the child execs, flocked
// ones included: a lock just released by its owner may stay held that long.
const lockWait = time.Second

// fileID is what a database file is, whatever path names it: a symlink and
// a hard link of one file have the same fileID.
type fileID struct{ dev, ino uint64 }

// ownedFiles are the database files this process owns, by what they are.
// A second Store of the same file in this process is refused here, before
// it opens the file: closing any descriptor of a file drops every POSIX
// lock this process holds on it, SQLite's own included.
var ownedFiles struct {
	mu sync.Mutex // guards the following
	m  map[fileID]bool
}

// ownership is a Store's exclusive claim on its database file: an flock on
// the file itself (so that every path naming it, symlinks and hard links
// included, meets the same lock) and one on <resolved path>.lock (the lock
// earlier versions took, so that they exclude us and we exclude them). The
// kernel drops both when the process dies (kill -9 included), so a crashed
// owner never leaves a stale lock behind. flock and SQLite's POSIX locks
// do not interact on Linux.
type ownership struct {
	id    fileID
	files []*os.File
}

// own takes ownership of the database file at path (absolute), creating it
// when missing. It returns the path with symlinks resolved, which is the
// one SQLite must open (its -wal and -shm files are named after it), and
// an error wrapping forge.ErrLocked when another Store owns the file.
func own(path string) (*ownership, string, error) {
	resolved, err := resolvePath(path)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: %w", err)
	}
	if fi, err := os.Stat(resolved); err == nil {
		if id, ok := idOf(fi); ok && isOwned(id) {
			return nil, "", fmt.Errorf("sqlite: %s: %w", path, forge.ErrLocked)
		}
	}
	db, err := os.OpenFile(resolved, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	fi, err := db.Stat()
	if err != nil {
		_ = db.Close()
		return nil, "", fmt.Errorf("sqlite: %w", err)
	}
	if !fi.Mode().IsRegular() {
		_ = db.Close()
		return nil, "", fmt.Errorf("sqlite: %s is not a regular file", path)
	}
	id, _ := idOf(fi)
	ownedFiles.mu.Lock()
	if ownedFiles.m[id] {
		ownedFiles.mu.Unlock()
		// Another Store of this process took the file between the check
		// and the open. This descriptor is kept open on purpose: closing
		// it would drop that Store's SQLite locks.
		leaked.add(db)
		return nil, "", fmt.Errorf("sqlite: %s: %w", path, forge.ErrLocked)
	}
	if ownedFiles.m == nil {
		ownedFiles.m = map[fileID]bool{}
	}
	ownedFiles.m[id] = true
	ownedFiles.mu.Unlock()
	o := &ownership{id: id, files: []*os.File{db}}
	if err := flockWait(db, path); err != nil {
		o.release()
		return nil, "", err
	}
	legacy, err := os.OpenFile(resolved+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		o.release()
		return nil, "", fmt.Errorf("sqlite: lock: %w", err)
	}
	o.files = append(o.files, legacy)
	if err := flockWait(legacy, path); err != nil {
		o.release()
		return nil, "", err
	}
	return o, resolved, nil
}

// release gives the file up. The Store calls it after closing every SQLite
// connection.
func (o *ownership) release() error {
	var errs []error
	for _, f := range o.files {
		errs = append(errs, f.Close())
	}
	ownedFiles.mu.Lock()
	delete(ownedFiles.m, o.id)
	ownedFiles.mu.Unlock()
	return errors.Join(errs...)
}

// flockWait takes an exclusive flock on f, waiting at most lockWait for a
// holder to let go.
func flockWait(f *os.File, path string) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("sqlite: lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sqlite: %s: %w", path, forge.ErrLocked)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resolvePath resolves the symlinks of path, or of its directory when the
// file does not exist yet.
func resolvePath(path string) (string, error) {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		// A dangling symlink: SQLite would create its target.
		return "", fmt.Errorf("%s is a symlink to a missing file", path)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(path)), nil
}

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true //nolint:unconvert // types differ by platform
}

func isOwned(id fileID) bool {
	ownedFiles.mu.Lock()
	defer ownedFiles.mu.Unlock()
	return ownedFiles.m[id]
}

// leaked holds descriptors that must stay open for the life of the process
// (see own).
var leaked keptFiles

type keptFiles struct {
	mu    sync.Mutex // guards files
	files []*os.File
}

func (k *keptFiles) add(f *os.File) {
	k.mu.Lock()
	k.files = append(k.files, f)
	k.mu.Unlock()
}
