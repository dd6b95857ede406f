package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
)

// TestForumPostCarriesFiles: a forum post may carry files (by id or
// inline, checked like a turn's attachments); the message lists them, the
// agents' monologue copies reference the same stored files, so the model
// gets them; a remote URL or another tenant's file id is refused and
// nothing is posted or stored.
func TestForumPostCarriesFiles(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"ka": "acme", "kb": "globex"} })
	s.key = "kb"
	var theirs forge.File
	a := s.do(req{method: "POST", path: "/v1/files?filename=b.txt", body: []byte("globex only\n"), header: map[string]string{"Content-Type": "text/plain"}})
	if a.status != 201 || json.Unmarshal(a.body, &theirs) != nil {
		t.Fatalf("upload: %s", a)
	}

	s.key = "ka"
	s.call("POST", "/v1/agents", map[string]any{"name": "reader", "model": "scripted/echo"}, 201, nil)
	var f struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &f)
	members := "/v1/forums/" + f.ID + "/members"
	s.call("POST", members, map[string]any{"actor": map[string]any{"type": "human", "id": "alice"}}, 201, nil)
	s.call("POST", members, map[string]any{"actor": map[string]any{"type": "agent", "agent": "reader"}}, 201, nil)
	msgs := "/v1/forums/" + f.ID + "/messages"

	for name, file := range map[string]map[string]any{
		"remote":         {"url": "http://169.254.169.254/latest"},
		"another tenant": {"file_id": theirs.ID},
		"lying type":     {"data": base64.StdEncoding.EncodeToString([]byte("not a png")), "mime_type": "image/png", "filename": "x.png"},
	} {
		a := s.do(req{method: "POST", path: msgs, body: map[string]any{"author": "alice", "text": "@reader look", "files": []any{file}}})
		if a.status != 400 && a.status != 404 {
			t.Fatalf("%s: %s", name, a)
		}
	}
	var list struct{ Data []forge.ForumMessage }
	s.call("GET", msgs, nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("refused posts left %d messages", len(list.Data))
	}

	var m forge.ForumMessage
	s.call("POST", msgs, map[string]any{"author": "alice", "text": "@reader what does it say?", "files": []any{
		map[string]any{"data": base64.StdEncoding.EncodeToString([]byte("the order shipped\n")), "mime_type": "text/plain", "filename": "notes.txt"},
	}}, 201, &m)
	if len(m.Files) != 1 || m.Files[0].Filename != "notes.txt" || !strings.HasPrefix(m.Files[0].FileID, forge.PrefixFile) {
		t.Fatalf("posted %+v", m)
	}
	var files struct{ Data []forge.File }
	s.call("GET", "/v1/files", nil, 200, &files)
	if len(files.Data) != 1 {
		t.Fatalf("%d files stored, want 1 (refused posts store nothing)", len(files.Data))
	}
	// The agent's reply: echo repeats what its model got, the file
	// included.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.call("GET", msgs, nil, 200, &list)
		if n := len(list.Data); n > 1 && list.Data[n-1].Kind == forge.ForumKindReply {
			if !strings.Contains(list.Data[n-1].Text, "the order shipped") {
				t.Fatalf("the reply %q does not show the file's text", list.Data[n-1].Text)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reply: %+v", list.Data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
