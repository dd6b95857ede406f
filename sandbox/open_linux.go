//go:build linux

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// beneath is how every path below the work directory is resolved by the
// kernel: no symlink at all (Resolve already resolved the legitimate ones,
// so a symlink met here was swapped in since), no ".." out, no magic links
// (/proc/self/fd/N), no other mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// noOpenat2 is set once openat2 is found missing (Linux before 5.6, or a
// seccomp filter answering ENOSYS); the path-based fallback is used from
// then on.
var noOpenat2 atomic.Bool

// openAt opens rel, a path relative to dir, with openat2 and RESOLVE_BENEATH:
// the kernel, not a check made earlier, guarantees that no component of the
// path leaves dir or is a symlink. ok is false when openat2 is not
// available.
func openAt(dir, rel string, flag int, perm os.FileMode) (f *os.File, ok bool, err error) {
	if noOpenat2.Load() {
		return nil, false, nil
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, err
	}
	defer unix.Close(dfd)
	how := &unix.OpenHow{
		Flags:   uint64(flag) | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: beneath,
	}
	if flag&unix.O_CREAT != 0 {
		how.Mode = uint64(perm.Perm()) // must be 0 otherwise
	}
	fd, err := unix.Openat2(dfd, rel, how)
	switch {
	case errors.Is(err, unix.ENOSYS):
		noOpenat2.Store(true)
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, rel)), true, nil
}

// mkdirAt creates the directories of rel (relative to dir) one by one, each
// with mkdirat and reopened with RESOLVE_BENEATH, so a component swapped for
// a symlink is refused instead of followed (os.MkdirAll follows it). A
// directory it creates is given to uid:gid unless uid is -1. ok is false
// when openat2 is not available.
func mkdirAt(dir, rel string, uid, gid int) (ok bool, err error) {
	if noOpenat2.Load() {
		return false, nil
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, err
	}
	defer func() { unix.Close(fd) }()
	for _, comp := range strings.Split(filepath.ToSlash(rel), "/") {
		if comp == "" || comp == "." {
			continue
		}
		created := true
		if err := unix.Mkdirat(fd, comp, 0o755); errors.Is(err, unix.EEXIST) {
			created = false
		} else if err != nil {
			return true, err
		}
		next, err := unix.Openat2(fd, comp, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: beneath,
		})
		if errors.Is(err, unix.ENOSYS) {
			noOpenat2.Store(true)
			return false, nil
		}
		if err != nil {
			return true, err
		}
		unix.Close(fd)
		fd = next
		if created && uid >= 0 {
			if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// isEscape tells the errors openat2 gives for a path that left the
// directory (EXDEV) or met a symlink (ELOOP).
func isEscape(err error) bool {
	return errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP)
}
