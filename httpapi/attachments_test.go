package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
)

func fileTurn(text string, files ...map[string]any) map[string]any {
	fs := make([]any, len(files))
	for i, f := range files {
		fs[i] = f
	}
	return map[string]any{"input": []any{map[string]any{"type": "message", "text": text, "files": fs}}}
}

// userFileParts returns the file parts of the session's user messages.
func (s *stack) userFileParts(sid string) []forge.FileData {
	s.t.Helper()
	var page struct{ Data []forge.Message }
	s.call("GET", "/v1/sessions/"+sid+"/messages", nil, 200, &page)
	var out []forge.FileData
	for _, m := range page.Data {
		if m.Role != forge.RoleUser {
			continue
		}
		for _, p := range m.Parts {
			if p.Type == forge.PartFile {
				var d forge.FileData
				if err := json.Unmarshal(p.Data, &d); err != nil {
					s.t.Fatalf("file part data %s: %v", p.Data, err)
				}
				out = append(out, d)
			}
		}
	}
	return out
}

func TestAttachmentsByIDInlineAndDataURL(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	img := testPNG(t, 8, 8)
	var up forge.File
	if a := s.upload("chart.png", "image/png", img, nil); a.status != 201 || json.Unmarshal(a.body, &up) != nil {
		t.Fatalf("upload: %s", a)
	}
	b64 := base64.StdEncoding.EncodeToString(img)
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", fileTurn("What is wrong here?",
		map[string]any{"file_id": up.ID},
		map[string]any{"data": b64, "mime_type": "image/png", "filename": "inline.png"},
		map[string]any{"url": "data:text/csv;base64," + base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n")), "filename": "t.csv"},
	), 200, &turn)
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	parts := s.userFileParts(ses.ID)
	if len(parts) != 3 {
		t.Fatalf("file parts %+v", parts)
	}
	if parts[0].FileID != up.ID || parts[0].Filename != "chart.png" || parts[0].MimeType != "image/png" || parts[0].Bytes != int64(len(img)) {
		t.Fatalf("by id: %+v", parts[0])
	}
	if !strings.HasPrefix(parts[1].FileID, forge.PrefixFile) || parts[1].FileID == up.ID || parts[1].Filename != "inline.png" || parts[1].MimeType != "image/png" {
		t.Fatalf("inline: %+v", parts[1])
	}
	if parts[2].MimeType != "text/csv" || parts[2].Filename != "t.csv" {
		t.Fatalf("data URL: %+v", parts[2])
	}
	// The inline files are files of the tenant; the turn's input names
	// them and holds none of their bytes.
	if n := s.fileCount(); n != 3 {
		t.Fatalf("%d files stored", n)
	}
	var got forge.Turn
	a := s.call("GET", "/v1/sessions/"+ses.ID+"/turns/"+turn.ID, nil, 200, &got)
	if strings.Contains(string(a.body), b64[:40]) || len(got.Input) != 1 || len(got.Input[0].Files) != 3 || got.Input[0].Files[1].FileID != parts[1].FileID {
		t.Fatalf("turn input: %s", a.body)
	}
	// Deleting a file keeps the message that referenced it.
	s.call("DELETE", "/v1/files/"+up.ID, nil, 204, nil)
	if parts := s.userFileParts(ses.ID); len(parts) != 3 || parts[0].FileID != up.ID {
		t.Fatalf("after delete: %+v", parts)
	}
}

func TestAttachmentsHostileStoreNothing(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"ka": "acme", "kb": "globex"} })
	s.key = "kb"
	var theirs forge.File
	if a := s.upload("x.png", "", testPNG(t, 2, 2), nil); a.status != 201 || json.Unmarshal(a.body, &theirs) != nil {
		t.Fatalf("upload: %s", a)
	}
	s.key = "ka"
	s.createAgent("a")
	ses := s.createSession("a")
	png := base64.StdEncoding.EncodeToString(testPNG(t, 2, 2))
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n%%EOF\n"))
	svg := base64.StdEncoding.EncodeToString([]byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`))
	for _, c := range []struct {
		name   string
		file   map[string]any
		status int
		code   string
	}{
		{"invalid base64", map[string]any{"data": "!!!not base64!!!", "mime_type": "image/png"}, 400, "invalid_request"},
		{"data without type", map[string]any{"data": png}, 400, "invalid_request"},
		{"declared type the content contradicts", map[string]any{"data": pdf, "mime_type": "image/png"}, 400, "invalid_request"},
		{"data URL with a lying type", map[string]any{"url": "data:image/png;base64," + pdf}, 400, "invalid_request"},
		{"remote URL", map[string]any{"url": "https://example.com/cat.png"}, 400, "invalid_request"},
		{"metadata service URL", map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}, 400, "invalid_request"},
		{"file URL", map[string]any{"url": "file:///etc/passwd"}, 400, "invalid_request"},
		{"another tenant's file", map[string]any{"file_id": theirs.ID}, 404, "not_found"},
		{"unknown file", map[string]any{"file_id": "file_nope"}, 404, "not_found"},
		{"svg", map[string]any{"data": svg, "mime_type": "image/svg+xml"}, 415, "unsupported_media_type"},
		{"svg undeclared", map[string]any{"url": "data:;base64," + svg}, 415, "unsupported_media_type"},
		{"two sources", map[string]any{"file_id": theirs.ID, "url": "data:image/png;base64," + png}, 400, "invalid_request"},
		{"bomb header", map[string]any{"data": base64.StdEncoding.EncodeToString(bombPNG(100_000, 100_000)), "mime_type": "image/png"}, 400, "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns", body: fileTurn("look", c.file)})
			if a.status != c.status || a.errCode() != c.code {
				t.Fatalf("got %s, want %d %s", a, c.status, c.code)
			}
		})
	}
	// Files on an item that is no message are refused too.
	a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns", body: map[string]any{"input": []any{
		map[string]any{"type": "tool_result", "call_id": "c", "output": "x", "files": []any{map[string]any{"data": png, "mime_type": "image/png"}}}}}})
	if a.status != 400 {
		t.Fatalf("files on a tool_result: %s", a)
	}
	if n := s.fileCount(); n != 0 {
		t.Fatalf("refused turns stored %d files", n)
	}
	var turns struct{ Data []forge.Turn }
	s.call("GET", "/v1/sessions/"+ses.ID+"/turns", nil, 200, &turns)
	if len(turns.Data) != 0 {
		t.Fatalf("refused turns created %d turns", len(turns.Data))
	}
}

// TestAttachmentsOfARefusedTurnStoreNothing: a turn refused after its
// attachments were checked (another turn runs; open calls wait) stores
// none of its inline files.
func TestAttachmentsOfARefusedTurnStoreNothing(t *testing.T) {
	s := newStack(t)
	s.createAgent("slow", scripted.Step{Text: "one two three", DelayMS: 2000})
	ses := s.createSession("slow")
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "hi"}},
		"background": true}, 202, nil)
	png := base64.StdEncoding.EncodeToString(testPNG(t, 2, 2))
	a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns", body: fileTurn("and this", map[string]any{"data": png, "mime_type": "image/png"})})
	if a.status != 409 || a.errCode() != "turn_in_progress" {
		t.Fatalf("second turn: %s", a)
	}
	if n := s.fileCount(); n != 0 {
		t.Fatalf("a refused turn stored %d files", n)
	}

	s.call("POST", "/v1/agents", map[string]any{"name": "asks", "model": "scripted/echo",
		"tools": []any{map[string]any{"name": "ask_user", "client": true}},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "ask_user", Arguments: json.RawMessage(`{"q":"?"}`)}}})}}, 201, nil)
	ses2 := s.createSession("asks")
	s.call("POST", "/v1/sessions/"+ses2.ID+"/turns", msgTurn("hi"), 200, nil)
	a = s.do(req{method: "POST", path: "/v1/sessions/" + ses2.ID + "/turns", body: fileTurn("more", map[string]any{"data": png, "mime_type": "image/png"})})
	if a.status != 409 || a.errCode() != "pending_actions" {
		t.Fatalf("turn over open calls: %s", a)
	}
	if n := s.fileCount(); n != 0 {
		t.Fatalf("a refused turn stored %d files", n)
	}
}

// TestAMessageOfFilesAlone: a message may carry files and no text (a
// screenshot sent as it is); its user message is its file parts alone. A
// message with neither is still refused.
func TestAMessageOfFilesAlone(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	img := base64.StdEncoding.EncodeToString(testPNG(t, 4, 4))
	body := map[string]any{"input": []any{map[string]any{"type": "message", "files": []any{
		map[string]any{"data": img, "mime_type": "image/png", "filename": "shot.png"}}}}}
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", body, 200, &turn)
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	var page struct{ Data []forge.Message }
	s.call("GET", "/v1/sessions/"+ses.ID+"/messages", nil, 200, &page)
	if len(page.Data) == 0 || page.Data[0].Role != forge.RoleUser || len(page.Data[0].Parts) != 1 || page.Data[0].Parts[0].Type != forge.PartFile {
		t.Fatalf("user message %+v", page.Data)
	}
	for _, blank := range []map[string]any{
		{"input": []any{map[string]any{"type": "message", "text": "  "}}},
		{"input": []any{map[string]any{"type": "message", "files": []any{}}}},
	} {
		if a := s.call("POST", "/v1/sessions/"+ses.ID+"/turns", blank, 400, nil); !strings.Contains(string(a.body), "must not be blank") {
			t.Fatalf("blank message: %s", a)
		}
	}
}
