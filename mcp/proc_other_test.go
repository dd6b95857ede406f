//go:build !unix

package mcp

import "os"

func processAlive(pid int) bool { return false }

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
