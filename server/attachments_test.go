package server

import (
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/sandbox"
)

// TestAttachmentsAreInTheSandbox: a file attached to a message is
// readable by the session's sandbox tools under attachments/; a symlink
// the agent left as attachments/ does not lead the write outside the
// workspace.
func TestAttachmentsAreInTheSandbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{DB: filepath.Join(dir, "forge.db"), SandboxRoot: filepath.Join(dir, "sandboxes"), Logger: slog.New(slog.DiscardHandler),
		Sandbox: sandbox.Options{UseBwrap: sandbox.BwrapOff}}
	srv, call := startForTest(t, cfg)
	defer srv.Stop(ctx)
	call("POST", "/v1/agents", `{"name":"reader","model":"scripted/x","tools":["read_file"],"model_params":{"script":[`+
		`{"tool_calls":[{"name":"read_file","arguments":{"path":"attachments/notes.txt"}}]},{"text":"read it"},`+
		`{"tool_calls":[{"name":"read_file","arguments":{"path":"attachments/second.txt"}}]},{"text":"read that"}]}}`, nil)
	var ses forge.Session
	call("POST", "/v1/sessions", `{"agent":"reader"}`, &ses)
	data := base64.StdEncoding.EncodeToString([]byte("the order shipped\n"))
	var turn forge.Turn
	call("POST", "/v1/sessions/"+ses.ID+"/turns", `{"input":[{"type":"message","text":"read the notes","files":[`+
		`{"data":"`+data+`","mime_type":"text/plain","filename":"notes.txt"}]}]}`, &turn)
	var msgs struct{ Data []forge.Message }
	call("GET", "/v1/sessions/"+ses.ID+"/messages", "", &msgs)
	if !toolOutputHas(msgs.Data, "the order shipped") {
		t.Fatalf("read_file did not read the attachment: %+v", msgs.Data)
	}

	// The agent replaces attachments/ with a link out of its workspace;
	// the next attachment is not written through it.
	ws := sandboxDir(t, cfg.SandboxRoot, ses.ID)
	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(ws, "attachments")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "attachments")); err != nil {
		t.Fatal(err)
	}
	data2 := base64.StdEncoding.EncodeToString([]byte("second file\n"))
	call("POST", "/v1/sessions/"+ses.ID+"/turns", `{"input":[{"type":"message","text":"and this","files":[`+
		`{"data":"`+data2+`","mime_type":"text/plain","filename":"second.txt"}]}]}`, &turn)
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("an attachment was written outside the workspace: %v", entries)
	}
}

func toolOutputHas(msgs []forge.Message, s string) bool {
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool && p.Output != nil && strings.Contains(*p.Output, s) {
				return true
			}
		}
	}
	return false
}

// sandboxDir finds the session's workspace under root.
func sandboxDir(t *testing.T, root, sessionID string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "attachments" && strings.Contains(p, sessionID) {
			found = filepath.Dir(p)
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no attachments/ under %s for %s", root, sessionID)
	}
	return found
}
