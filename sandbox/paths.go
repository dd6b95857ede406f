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

// openNoFollow opens a resolved path without following a symlink in its
// last component (one swapped in after Resolve) and without blocking on a
// FIFO; it refuses anything but a regular file.
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errors.New("is a symlink: refused")
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
	return f, nil
}
