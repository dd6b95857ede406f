package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestCommandsNeedIsolationOrConsent: on a host without bubblewrap, forge
// serve refuses the bash tool (a tool error the model sees, and a startup
// log line) unless started with --unsafe-unsandboxed-commands.
func TestCommandsNeedIsolationOrConsent(t *testing.T) {
	// A PATH holding what the command needs, but no bwrap.
	bin := t.TempDir()
	for _, name := range []string{"bash", "cat", "wc"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"

	s := start(t, db, model)
	if !strings.Contains(s.logs.String(), "commands are disabled") {
		t.Fatalf("no startup line saying commands are disabled:\n%s", s.logs.String())
	}
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"write_file", "bash"}})
	sid := s.session("a")
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "write_file", Args: `{"path":"hello.txt","content":"hi\n"}`}),
		openaitest.ToolCalls(openaitest.Call{Name: "bash", Args: `{"command":"cat /proc/$PPID/environ; wc -l < hello.txt"}`}),
		openaitest.Text("done"),
	)
	if turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("count")); turn["status"] != "done" {
		t.Fatalf("turn %v", turn)
	}
	req, _ := model.LastRequest()
	got := req.Messages[len(req.Messages)-1].Content
	if !strings.Contains(got, "commands are disabled") || !strings.Contains(got, "--unsafe-unsandboxed-commands") || strings.Contains(got, "OPENAI_API_KEY") {
		t.Fatalf("the model saw %q", got)
	}
	s.kill9()

	s2 := start(t, db, model, "--unsafe-unsandboxed-commands")
	if !strings.Contains(s2.logs.String(), "UNSAFE: commands run without process isolation") {
		t.Fatalf("no startup line saying commands are unsafe:\n%s", s2.logs.String())
	}
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "bash", Args: `{"command":"wc -l < hello.txt"}`}),
		openaitest.Text("done"),
	)
	if turn := s2.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("count again")); turn["status"] != "done" {
		t.Fatalf("turn %v", turn)
	}
	req, _ = model.LastRequest()
	if got := strings.TrimSpace(req.Messages[len(req.Messages)-1].Content); got != "1" {
		t.Fatalf("bash with consent saw %q", got)
	}
}
