package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestNodeClients runs the Node tests in e2e/node (the official openai JS
// client, the AI SDK's DefaultChatTransport and generateText, the A2A JS
// SDK's client, the OpenAI Agents SDK and LangChain's ChatOpenAI in their
// default multi-turn, pinned in its package-lock.json) against a real forge serve. Install them with
// `npm ci --prefix e2e/node`; without them the test is skipped, unless
// FORGE_TEST_REQUIRE_SERVICES=1 makes that a failure.
func TestNodeClients(t *testing.T) {
	node, dir := nodeTests(t, filepath.Join("ai", "package.json"))
	s := start(t, t.TempDir()+"/forge.db", openaitest.New(t))
	runNode(t, node, dir, []string{"FORGE_URL=" + s.URL},
		"openai.test.mjs", "aisdk.test.mjs", "chat.test.mjs", "a2a.test.mjs", "agents.test.mjs")
}

// TestNodeMCPClient runs e2e/node/mcp.test.mjs: the official MCP
// TypeScript SDK's client against /mcp of a forge serve with two tenants'
// keys (FORGE_KEY_A, FORGE_KEY_B), so that one tenant's sessions are
// refused to the other.
func TestNodeMCPClient(t *testing.T) {
	node, dir := nodeTests(t, filepath.Join("@modelcontextprotocol", "sdk", "package.json"))
	const keyA, keyB = "fk_node_mcp_tenant_a_000000000000", "fk_node_mcp_tenant_b_000000000000"
	s := startEnv(t, t.TempDir()+"/forge.db", openaitest.New(t), []string{"FORGE_API_KEYS=" + keyA + "=acme," + keyB + "=globex"})
	runNode(t, node, dir, []string{"FORGE_URL=" + s.URL, "FORGE_KEY_A=" + keyA, "FORGE_KEY_B=" + keyB}, "mcp.test.mjs")
}

// nodeTests returns node and e2e/node, where the pinned packages are
// installed (probe is a file of one of them); without them the test is
// skipped, unless FORGE_TEST_REQUIRE_SERVICES=1 makes that a failure.
func nodeTests(t *testing.T, probe string) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	missing := func(why string) {
		if os.Getenv("FORGE_TEST_REQUIRE_SERVICES") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", probe)); err != nil {
		missing("e2e/node/node_modules is not installed: run npm ci --prefix e2e/node")
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	return node, dir
}

// runNode runs node --test on files in dir with env added, and fails the
// test if they fail.
func runNode(t *testing.T, node, dir string, env []string, files ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
}
