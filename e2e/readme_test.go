package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestReadmeTryingIt runs the shell block of README.md's "Trying it" (the
// curl commands a newcomer pastes first) against a real forge serve, so a
// change to the API that breaks them breaks this test. Only the
// interactive `forge chat` line is left out.
func TestReadmeTryingIt(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Trying it\n")
	if !ok {
		t.Fatal(`README.md has no "## Trying it" section`)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	block, _, closed := strings.Cut(block, "\n```")
	if !ok || !closed {
		t.Fatal(`README.md's "Trying it" has no sh block`)
	}
	s := start(t, t.TempDir()+"/forge.db", openaitest.New(t))
	host := strings.TrimPrefix(s.URL, "http://")
	var script []string
	for _, line := range strings.Split(block, "\n") {
		if strings.HasPrefix(line, "./forge chat") {
			continue
		}
		script = append(script, strings.ReplaceAll(line, "localhost:8080", host))
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, out)
	}
	for _, want := range []string{`"text":"echo: hi"`, "event: turn.done", "echo: stream please"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the README's commands printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), `"error":{`) {
		t.Fatalf("a README command was refused:\n%s", out)
	}
}
