package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// recorder is a model that answers "ok" and keeps every request.
type recorder struct {
	mu   sync.Mutex // guards the following
	reqs []*forge.ModelRequest
}

func (r *recorder) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	r.mu.Lock()
	c := req.Clone()
	for i := range c.Messages {
		for j := range c.Messages[i].Parts {
			if f := c.Messages[i].Parts[j].File; f != nil {
				cf := *f
				cf.Data = bytes.Clone(f.Data)
				c.Messages[i].Parts[j].File = &cf
			}
		}
	}
	r.reqs = append(r.reqs, c)
	r.mu.Unlock()
	return func(yield func(forge.ModelEvent, error) bool) {
		_ = yield(forge.ModelEvent{Type: forge.TextStart}, nil) &&
			yield(forge.ModelEvent{Type: forge.TextDelta, Delta: "ok"}, nil) &&
			yield(forge.ModelEvent{Type: forge.TextEnd}, nil) &&
			yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{Reason: forge.FinishStop}}, nil)
	}
}

// lastUser is the user message of the last request.
func (r *recorder) lastUser(t *testing.T) []forge.ModelPart {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("no model call")
	}
	msgs := r.reqs[len(r.reqs)-1].Messages
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == forge.RoleUser {
			return msgs[i].Parts
		}
	}
	t.Fatal("no user message")
	return nil
}

// recorderModels resolves rec/<id> to the recorder; rec/text takes text
// only, other ids are unknown (every kind is accepted).
type recorderModels struct{ rec *recorder }

func (m recorderModels) Resolve(name string) (forge.Model, string, error) {
	return m.rec, strings.TrimPrefix(name, "rec/"), nil
}

func (m recorderModels) InputModalities(name string) ([]string, bool) {
	if name == "rec/text" {
		return []string{"text"}, true
	}
	return nil, false
}

var _ engine.InputModalities = recorderModels{}

// TestModelGetsFileContent: the model gets an image's and a PDF's bytes
// as file parts, a text file as text headed by its name, and, once a
// file is deleted, a note that it was removed; a model that takes only
// text refuses an image (unsupported_content) before anything is stored.
func TestModelGetsFileContent(t *testing.T) {
	rec := &recorder{}
	s := newStackEngine(t, t.TempDir()+"/forge.db", func(c *engine.Config) { c.Models = recorderModels{rec} })
	s.call("POST", "/v1/agents", map[string]any{"name": "any", "model": "rec/any"}, 201, nil)
	s.call("POST", "/v1/agents", map[string]any{"name": "text", "model": "rec/text"}, 201, nil)
	img := testPNG(t, 3, 3)
	pdf := []byte("%PDF-1.4\n%%EOF\n")
	var f forge.File
	a := s.upload("chart.png", "image/png", img, nil)
	if a.status != 201 || json.Unmarshal(a.body, &f) != nil {
		t.Fatalf("upload: %s", a)
	}

	// A text-only model: an image is refused, nothing stored; a text file
	// is text.
	txt := s.createSession("text")
	a = s.do(req{method: "POST", path: "/v1/sessions/" + txt.ID + "/turns", body: fileTurn("look",
		map[string]any{"data": base64.StdEncoding.EncodeToString(img), "mime_type": "image/png", "filename": "b.png"})})
	if a.status != 400 || a.errCode() != "unsupported_content" {
		t.Fatalf("image to a text model: %s", a)
	}
	a = s.do(req{method: "POST", path: "/v1/sessions/" + txt.ID + "/turns", body: fileTurn("look", map[string]any{"file_id": f.ID})})
	if a.status != 400 || a.errCode() != "unsupported_content" {
		t.Fatalf("stored image to a text model: %s", a)
	}
	if n := s.fileCount(); n != 1 {
		t.Fatalf("refused turns stored files: %d", n)
	}
	s.call("POST", "/v1/sessions/"+txt.ID+"/turns", fileTurn("summarize",
		map[string]any{"url": "data:text/markdown;base64," + base64.StdEncoding.EncodeToString([]byte("# Plan\nship it")), "filename": "plan.md"}), 200, nil)
	parts := rec.lastUser(t)
	if len(parts) != 2 || parts[1].Type != forge.ModelPartText || parts[1].Text != "File: plan.md\n\n# Plan\nship it" {
		t.Fatalf("text file sent as %+v", parts)
	}

	// A model the server knows nothing about takes images and PDFs.
	anyS := s.createSession("any")
	s.call("POST", "/v1/sessions/"+anyS.ID+"/turns", fileTurn("compare", map[string]any{"file_id": f.ID},
		map[string]any{"data": base64.StdEncoding.EncodeToString(pdf), "mime_type": "application/pdf", "filename": "r.pdf"}), 200, nil)
	parts = rec.lastUser(t)
	if len(parts) != 3 || parts[1].Type != forge.ModelPartFile || !bytes.Equal(parts[1].File.Data, img) || parts[1].File.MimeType != "image/png" ||
		parts[2].File == nil || !bytes.Equal(parts[2].File.Data, pdf) || parts[2].File.Filename != "r.pdf" {
		t.Fatalf("files sent as %+v", parts)
	}

	// Deleted: the next turn's model sees that it was removed.
	s.call("DELETE", "/v1/files/"+f.ID, nil, 204, nil)
	s.call("POST", "/v1/sessions/"+anyS.ID+"/turns", msgTurn("and now?"), 200, nil)
	rec.mu.Lock()
	first := rec.reqs[len(rec.reqs)-1].Messages[0].Parts
	rec.mu.Unlock()
	if len(first) != 3 || first[1].Type != forge.ModelPartText || !strings.Contains(first[1].Text, "chart.png") || !strings.Contains(first[1].Text, "removed") ||
		first[2].File == nil || !bytes.Equal(first[2].File.Data, pdf) {
		t.Fatalf("after deletion the history is sent as %+v", first)
	}
}
