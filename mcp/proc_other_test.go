//go:build !unix

package mcp

func processAlive(pid int) bool { return false }
