package mcp

import (
	"fmt"
	"testing"

	forge "github.com/forge-runtime/forge"
)

// BenchmarkStdioStart starts server-everything and lists its tools, in the
// session's sandbox and, for comparison, on the host (an operator's Host
// command): the cost of the isolation at start.
func BenchmarkStdioStart(b *testing.B) {
	bin := everythingBin(b)
	for _, host := range []bool{false, true} {
		b.Run(map[bool]string{false: "sandboxed", true: "host"}[host], func(b *testing.B) {
			opts := Options{Launcher: benchSandboxes(b)}
			if host {
				opts.Commands = []AllowedCommand{{Name: "everything", Command: []string{bin, "stdio"}, Host: true}}
			}
			m := NewManager(opts)
			b.Cleanup(func() { _ = m.Close(b.Context()) })
			spec := forge.MCPServer{Name: "everything", Command: []string{bin, "stdio"}}
			i := 0
			for b.Loop() {
				sid := fmt.Sprintf("ses_%d", i)
				i++
				if _, _, err := m.Tools(b.Context(), sid, []forge.MCPServer{spec}); err != nil {
					b.Fatal(err)
				}
				m.CloseSession(sid)
			}
		})
	}
}
