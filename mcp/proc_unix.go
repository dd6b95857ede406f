//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts a stdio server in its own process group so that the
// children it spawns (npx, shells) can be stopped with it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills what is left of a stdio server's process group.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.Process.Pid <= 0 {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
