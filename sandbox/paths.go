package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrOutside is wrapped by errors for paths that leave the work directory.
var ErrOutside = errors.New("path is outside the sandbox work directory")

func within(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Resolve maps a tool's path (relative to the work directory, or absolute
// inside it) to a host path inside the work directory with every existing
// symlink resolved. It refuses paths that leave the work directory
// lexically (absolute paths elsewhere, ".." escapes) or through a symlink,
// and dangling or looping symlinks.
func (s *Sandbox) Resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path contains a NUL byte")
	}
	var abs string
	if filepath.IsAbs(p) {
		abs = filepath.Clean(p)
	} else {
		abs = filepath.Join(s.dir, p)
	}
	if !within(s.dir, abs) {
		return "", fmt.Errorf("%q: %w", p, ErrOutside)
	}
	// The deepest existing ancestor (or the path itself) must resolve
	// inside the work directory.
	cur := abs
	for {
		_, err := os.Lstat(cur)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%q: %w", p, unwrapPathErr(err))
		}
		cur = filepath.Dir(cur)
		if !within(s.dir, cur) {
			return "", fmt.Errorf("%q: work directory missing", p)
		}
	}
	real, err := filepath.EvalSymlinks(cur)
	if err != nil {
		return "", fmt.Errorf("%q: cannot resolve (dangling or looping symlink): refused", p)
	}
	if !within(s.dir, real) {
		return "", fmt.Errorf("%q: a symlink resolves outside the work directory: %w", p, ErrOutside)
	}
	rest, err := filepath.Rel(cur, abs)
	if err != nil {
		return "", fmt.Errorf("%q: %w", p, err)
	}
	if rest == "." {
		return real, nil
	}
	return filepath.Join(real, rest), nil
}

// rel is the path shown to the model: relative to the work directory.
func (s *Sandbox) rel(abs string) string {
	r, err := filepath.Rel(s.dir, abs)
	if err != nil {
		return abs
	}
	return filepath.ToSlash(r)
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openInside opens abs, a path inside the work directory as Resolve
// returned it (symlink-free). The kernel resolves it beneath the work
// directory refusing every symlink (openat2 with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS), which closes the window between Resolve and the
// open in which a component could be swapped for a symlink leading out.
// Without openat2 it falls back to the path with O_NOFOLLOW, which only
// guards the last component. Only regular files are opened, without
// blocking on a FIFO. A file opened for writing must have a single link: a
// hard link's other name may be outside the sandbox, and writing through it
// would change that file too.
func (s *Sandbox) openInside(abs string, flag int, perm os.FileMode) (*os.File, error) {
	if !within(s.dir, abs) {
		return nil, ErrOutside
	}
	rel, err := filepath.Rel(s.dir, abs)
	if err != nil {
		return nil, err
	}
	f, ok, err := openAt(s.dir, rel, flag, perm)
	if !ok {
		f, err = openNoFollow(abs, flag, perm)
	}
	if err != nil {
		if isEscape(err) {
			return nil, fmt.Errorf("a symlink appeared in the path after it was checked: refused: %w", ErrOutside)
		}
		return nil, unwrapPathErr(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		if fi.IsDir() {
			return nil, errors.New("is a directory")
		}
		return nil, errors.New("not a regular file")
	}
	if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		if n := linkCount(fi); n > 1 {
			f.Close()
			return nil, fmt.Errorf("the file has %d hard links; writing through it would also change its other names, which may be outside the sandbox: refused (write a new file instead)", n)
		}
		// A file the server wrote belongs to the sandbox's uid, like
		// those its commands write: they may change it afterwards.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && s.uid >= 0 && int(st.Uid) != s.uid {
			if err := f.Chown(s.uid, s.gid); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	return f, nil
}

// linkCount is the number of hard links of a file (1 when unknown).
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// openNoFollow opens a path without following a symlink in its last
// component and without blocking on a FIFO (the fallback of openInside).
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		return nil, unwrapPathErr(err)
	}
	return f, nil
}

// mkdirInside creates the directory abs inside the work directory and its
// missing parents, refusing to follow a symlink on the way (see mkdirAt).
func (s *Sandbox) mkdirInside(abs string) error {
	if !within(s.dir, abs) {
		return ErrOutside
	}
	rel, err := filepath.Rel(s.dir, abs)
	if err != nil {
		return err
	}
	ok, err := mkdirAt(s.dir, rel, s.uid, s.gid)
	if !ok {
		if err = os.MkdirAll(abs, 0o755); err == nil {
			err = s.giveDirs(rel)
		}
	}
	if err != nil {
		if isEscape(err) {
			return fmt.Errorf("a symlink appeared in the path after it was checked: refused: %w", ErrOutside)
		}
		return unwrapPathErr(err)
	}
	return nil
}

// giveDirs gives the directories of rel (below the work directory) that
// the server owns to the sandbox's uid (the fallback of mkdirAt).
func (s *Sandbox) giveDirs(rel string) error {
	if s.uid < 0 {
		return nil
	}
	p := s.dir
	for _, comp := range strings.Split(filepath.ToSlash(rel), "/") {
		if comp == "" || comp == "." {
			continue
		}
		p = filepath.Join(p, comp)
		if owner, ok := ownerOf(p); ok && int(owner) == os.Geteuid() {
			if err := os.Lchown(p, s.uid, s.gid); err != nil {
				return err
			}
		}
	}
	return nil
}
