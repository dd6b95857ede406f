//go:build unix

package storetest

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user and system) the process has used so far:
// on a machine shared with other work, wall time says little.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
