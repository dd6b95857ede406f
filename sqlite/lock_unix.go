//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/forge-runtime/forge"
)

// lockFile takes a non-blocking exclusive flock on path. The kernel drops
// it when the file is closed or the process dies (kill -9 included), so a
// crashed owner never leaves a stale lock behind.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("sqlite: %s: %w", path, forge.ErrLocked)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	return f, nil
}
