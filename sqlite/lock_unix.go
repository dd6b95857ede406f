//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/forge-runtime/forge"
)

// lockWait is how long lockFile retries a lock someone holds. A process
// that forks (to run a command, an MCP server, a test's child) lends the
// child every descriptor it has until the child execs, flocked ones
// included: a lock just released by its owner may stay held that long.
const lockWait = time.Second

// lockFile takes an exclusive flock on path, waiting at most lockWait for
// a holder to let go. The kernel drops it when the file is closed or the
// process dies (kill -9 included), so a crashed owner never leaves a stale
// lock behind.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lock: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("sqlite: %s: %w", path, forge.ErrLocked)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
