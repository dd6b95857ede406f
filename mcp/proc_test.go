//go:build unix

package mcp

import "syscall"

func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// killGroup kills the process group led by pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
