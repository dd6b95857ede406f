//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlite

import (
	"fmt"
	"os"
)

// lockFile only creates the lock file where flock is unavailable: exclusive
// ownership is not enforced on these platforms.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lock: %w", err)
	}
	return f, nil
}
