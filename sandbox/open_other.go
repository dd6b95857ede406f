//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"syscall"
)

// Without openat2, files are opened by path (see openInside).

func openAt(dir, rel string, flag int, perm os.FileMode) (*os.File, bool, error) {
	return nil, false, nil
}

func mkdirAt(dir, rel string, uid, gid int) (bool, error) { return false, nil }

func isEscape(err error) bool { return errors.Is(err, syscall.ELOOP) }
