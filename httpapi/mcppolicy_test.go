package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/internal/testenv"
	"github.com/forge-runtime/forge/mcp"
	"github.com/forge-runtime/forge/sandbox"
)

// withMCP vets agents' MCP servers with a real MCP manager whose stdio
// servers run in sandboxes from bwrap (sandbox.BwrapOn or BwrapOff).
func withMCP(t *testing.T, bwrap sandbox.BwrapMode, network mcp.NetworkPolicy) stackOption {
	t.Helper()
	sb, err := sandbox.NewManager(t.TempDir(), sandbox.Options{UseBwrap: bwrap, UnsafeUnsandboxedCommands: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		if testenv.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	m := mcp.NewManager(mcp.Options{Launcher: sb, Network: network})
	t.Cleanup(func() { _ = m.Close(context.Background()); _ = sb.Close(context.Background()) })
	return func(c *httpapi.Config) { c.MCP = m }
}

// An agent whose MCP server this server would not run is refused when it
// is defined (POST and PUT), with the reason, and nothing is stored: a
// stdio command on a host without isolation (whatever
// --unsafe-unsandboxed-commands says), a URL naming a loopback, private or
// metadata address.
func TestAgentMCPServersThisServerWouldNotRunAreInvalid(t *testing.T) {
	s := newStack(t, withMCP(t, sandbox.BwrapOff, mcp.NetworkPolicy{}))
	s.call("POST", "/v1/agents", map[string]any{"name": "a", "model": "scripted/echo"}, 201, nil)
	server := func(m map[string]any) map[string]any {
		m["name"] = "m"
		return map[string]any{"model": "scripted/echo", "mcp_servers": []any{m}}
	}
	for _, c := range []struct {
		name string
		srv  map[string]any
		msg  string
	}{
		{"stdio without isolation", map[string]any{"command": []string{"sh", "-c", "cat /proc/$PPID/environ"}},
			"mcp_servers[0] (m): stdio MCP servers run only inside the sandbox, and this server has no process isolation"},
		{"loopback url", map[string]any{"url": "http://127.0.0.1:5432/"}, "mcp_servers[0] (m): connecting to 127.0.0.1:5432 was refused: it is a loopback address"},
		{"localhost url", map[string]any{"url": "http://localhost:6379/"}, "it is a loopback address"},
		{"private url", map[string]any{"url": "http://10.0.0.5/mcp"}, "it is a private address"},
		{"metadata url", map[string]any{"url": "http://169.254.169.254/latest/meta-data/iam/"}, "it is a cloud metadata address"},
		{"ipv6 metadata url", map[string]any{"url": "http://[fd00:ec2::254]/"}, "it is a cloud metadata address"},
		{"bad env name", map[string]any{"command": []string{"x"}, "env": map[string]string{"LD PRELOAD": "x"}}, `env "LD PRELOAD" must be a variable name`},
		{"header with line break", map[string]any{"url": "https://mcp.example.com/", "headers": map[string]string{"X-A": "a\r\nHost: evil"}}, `header "X-A"`},
	} {
		for _, r := range []struct{ method, path string }{{"POST", "/v1/agents"}, {"PUT", "/v1/agents/a"}} {
			body := server(c.srv)
			body["name"] = map[string]string{"POST": "new", "PUT": "a"}[r.method]
			a := s.do(req{method: r.method, path: r.path, body: body})
			if a.status != 400 || a.errCode() != "invalid_request" || !strings.Contains(string(a.body), jsonText(c.msg)) {
				t.Errorf("%s: %s %s = %s\nwant 400 invalid_request with %q", c.name, r.method, r.path, a, c.msg)
			}
		}
	}
	if _, err := s.store.GetAgent(context.Background(), forge.DefaultTenant, "new"); err == nil {
		t.Error("a refused agent was stored")
	}
	if a, err := s.store.GetAgent(context.Background(), forge.DefaultTenant, "a"); err != nil || a.Version != 1 {
		t.Errorf("a refused PUT changed the agent: %+v %v", a, err)
	}
	// A public URL is fine (it is checked again on every connection).
	s.call("PUT", "/v1/agents/a", server(map[string]any{"url": "https://mcp.example.com/mcp"}), 200, nil)
}

// With the operator's allowance private URLs are accepted, metadata ones
// still not; with isolation stdio commands are accepted.
func TestAgentMCPServersAllowedByTheOperator(t *testing.T) {
	s := newStack(t, withMCP(t, sandbox.BwrapOn, mcp.NetworkPolicy{AllowPrivate: true}))
	s.call("POST", "/v1/agents", map[string]any{"name": "a", "model": "scripted/echo", "mcp_servers": []any{
		map[string]any{"name": "local", "url": "http://127.0.0.1:3000/mcp"},
		map[string]any{"name": "lan", "url": "http://10.0.0.5/mcp"},
		map[string]any{"name": "tools", "command": []string{"node", "server.js"}, "env": map[string]string{"LD_PRELOAD": "in-the-sandbox-only.so"}},
	}}, 201, nil)
	a := s.do(req{method: "POST", path: "/v1/agents", body: map[string]any{"name": "b", "model": "scripted/echo",
		"mcp_servers": []any{map[string]any{"name": "meta", "url": "http://169.254.169.254/"}}}})
	if a.status != 400 || !strings.Contains(string(a.body), "cloud metadata") {
		t.Fatalf("metadata with private allowed: %s", a)
	}
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
