package a2a_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/a2a"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
)

// TestA2AFileParts: a file part's bytes become an attachment of the
// message (stored, typed from its content); a data: URI too; a remote URI
// is refused, as is invalid base64, and a refused message stores nothing.
func TestA2AFileParts(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, a2a.Protocol{})
	if status, b := s.Do("POST", "/v1/agents", `{"name":"echo","model":"scripted/echo"}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	notes := base64.StdEncoding.EncodeToString([]byte("order 42 ships on Friday\n"))
	a := call(t, s, "ka", "echo", "message/send", sendParts("", "",
		map[string]any{"kind": "text", "text": "read this"},
		map[string]any{"kind": "file", "file": map[string]any{"name": "notes.txt", "mimeType": "text/plain", "bytes": notes}},
		map[string]any{"kind": "file", "file": map[string]any{"name": "more.txt", "uri": "data:text/plain;base64," + notes}}))
	if a.Error != nil || a.Result == nil || a.Result.Status.State != "completed" {
		t.Fatalf("send with files: %+v %+v", a.Error, a.Result)
	}
	status, body := s.Do("GET", "/v1/sessions/"+a.Result.ContextID+"/messages", "", "Authorization", "Bearer ka")
	if status != 200 || strings.Count(body, `"type":"file"`) != 2 || !strings.Contains(body, `"filename":"notes.txt"`) ||
		!strings.Contains(body, `"mime_type":"text/plain`) {
		t.Fatalf("the session's messages: %d %s", status, body)
	}
	_, before := s.Do("GET", "/v1/sessions", "", "Authorization", "Bearer ka")
	for _, file := range []map[string]any{
		{"uri": "https://example.com/notes.txt"},
		{"uri": "http://169.254.169.254/latest/meta-data"},
		{"bytes": "not base64 !!", "mimeType": "text/plain"},
		{"bytes": notes, "uri": "data:text/plain;base64," + notes},
	} {
		a := call(t, s, "ka", "echo", "message/send", sendParts("", "",
			map[string]any{"kind": "text", "text": "x"}, map[string]any{"kind": "file", "file": file}))
		if a.Error == nil || a.Error.Code != -32602 {
			t.Errorf("file %v: %+v, want -32602", file, a.Error)
		}
	}
	if _, after := s.Do("GET", "/v1/sessions", "", "Authorization", "Bearer ka"); after != before {
		t.Fatalf("refused messages stored sessions:\n%s\n%s", before, after)
	}
}
