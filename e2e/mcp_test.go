package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/internal/testenv"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestTenantMCPServersCannotReachTheHost replays the hostile probe against
// a real forge serve with two tenants: tenant B's agent declares a stdio
// MCP server that tries to copy the server's environment (every tenant's
// API key, the provider key), the database and its identity into B's
// sandbox, then runs the real npm server. It runs sandboxed: the copies
// hold none of it, and the server still works (bound read-only through
// forge.yaml sandbox.read_only_paths). B's url server on loopback is
// refused when the agent is defined.
func TestTenantMCPServersCannotReachTheHost(t *testing.T) {
	t.Parallel()
	bin := testenv.MCPServer(t, "mcp-server-everything")
	modules := filepath.Dir(filepath.Dir(bin))
	dir := t.TempDir()
	db := filepath.Join(dir, "forge.db")
	sandboxes := filepath.Join(dir, "sandboxes")
	config := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(config, []byte("sandbox:\n  read_only_paths: ["+modules+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const keyA, keyB = "key-of-tenant-a-5c1f", "key-of-tenant-b-9e02"
	model := openaitest.New(t)
	s := startEnv(t, db, model, []string{"FORGE_API_KEYS=" + keyA + "=a," + keyB + "=b"},
		"--config", config, "--sandbox-root", sandboxes)
	b := bearer(keyB)

	probe := `cat /proc/$PPID/environ > leak 2>&1
for p in /proc/[0-9]*; do cat $p/environ; done > leak-all 2>&1
id > id.txt; env > env.txt; cat "$1" > db.txt 2>&1
exec "$0" stdio`
	s.must(201, "POST", "/v1/agents", obj{"name": "prober", "model": "openai/gpt-test",
		"mcp_servers": []obj{{"name": "everything", "command": []string{"sh", "-c", probe, bin, db}}}}, b...)
	if status, out := s.call("POST", "/v1/agents", obj{"name": "ssrf", "model": "openai/gpt-test",
		"mcp_servers": []obj{{"name": "crm", "url": strings.Replace(s.URL, "localhost", "127.0.0.1", 1) + "/v1/agents"}}}, b...); status != 400 ||
		!strings.Contains(out["error"].(obj)["message"].(string), "it is a loopback address") {
		t.Fatalf("loopback url: %d %v", status, out)
	}
	sid := s.must(201, "POST", "/v1/sessions", obj{"agent": "prober"}, b...)["id"].(string)
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "everything_echo", Args: `{"message":"still works"}`}),
		openaitest.Text("done"),
	)
	if turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("probe"), b...); turn["status"] != "done" {
		t.Fatalf("turn %v", turn)
	}
	req, _ := model.LastRequest()
	if got := req.Messages[len(req.Messages)-1].Content; got != "Echo: still works" {
		t.Fatalf("the sandboxed server answered %q", got)
	}
	work := filepath.Join(sandboxes, sid, "work")
	for _, name := range []string{"leak", "leak-all", "env.txt", "db.txt"} {
		got, err := os.ReadFile(filepath.Join(work, name))
		if err != nil {
			t.Fatalf("the probe wrote no %s in its sandbox: %v", name, err)
		}
		for _, secret := range []string{keyA, keyB, "FORGE_API_KEYS", "sk-test", "OPENAI_API_KEY"} {
			if strings.Contains(string(got), secret) {
				t.Errorf("%s holds %s:\n%s", name, secret, got)
			}
		}
	}
	if got, _ := os.ReadFile(filepath.Join(work, "db.txt")); !strings.Contains(string(got), "No such file or directory") {
		t.Errorf("the database is visible in the sandbox: %q", got)
	}
	id, _ := os.ReadFile(filepath.Join(work, "id.txt"))
	t.Logf("the probe ran as: %s", strings.TrimSpace(string(id)))
}
