package cli

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// docExample returns the indented block that follows marker in the
// comments of the Go file path, without the comment markers.
func docExample(t *testing.T, path, marker string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), marker)
	if !ok {
		t.Fatalf("%s has no %q", path, marker)
	}
	var b strings.Builder
	for _, line := range strings.Split(rest, "\n")[1:] {
		if line == "//" && b.Len() == 0 {
			continue
		}
		code, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			break
		}
		b.WriteString(code + "\n")
	}
	return b.String()
}

// TestScriptedDocExample posts the agent of provider/scripted's package
// documentation to a real server and runs a turn with it.
func TestScriptedDocExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	t.Parallel()
	body := docExample(t, "../provider/scripted/scripted.go", "script (the body of POST /v1/agents):")
	url := startServer(t)
	resp, err := http.Post(url+"/v1/agents", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/agents with the documented body: %s\n%s", resp.Status, body)
	}
	c := testClient(t, url)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.CreateTurn(ctx, s.ID, client.TurnRequest{Input: client.Message("read a.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if turn.Status != forge.TurnDone || turn.Output == nil || turn.Output.Text != "The file says hello." {
		t.Errorf("turn %s, output %+v, error %+v", turn.Status, turn.Output, turn.Error)
	}
}
