package openai_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

var (
	pngBytes = []byte("\x89PNG\r\n\x1a\nfake image bytes")
	pdfBytes = []byte("%PDF-1.4\n%%EOF\n")
)

// withFiles is a user turn with text, an image and a PDF, their bytes
// filled as the engine fills them.
func withFiles() *forge.ModelRequest {
	return &forge.ModelRequest{Model: "m", Messages: []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{
		{Type: forge.ModelPartText, Text: "What is wrong here?"},
		{Type: forge.ModelPartFile, File: &forge.ModelFile{FileID: "file_1", Filename: "chart.png", MimeType: "image/png", Data: pngBytes}},
		{Type: forge.ModelPartFile, File: &forge.ModelFile{FileID: "file_2", Filename: "report.pdf", MimeType: "application/pdf", Data: pdfBytes}},
		{Type: forge.ModelPartFile, File: &forge.ModelFile{FileID: "file_3", Filename: "lost.png", MimeType: "image/png"}},
	}}}}
}

func dataURL(mt string, b []byte) string {
	return "data:" + mt + ";base64," + base64.StdEncoding.EncodeToString(b)
}

func sameJSON(t *testing.T, got json.RawMessage, want any) {
	t.Helper()
	var g, w any
	wb, _ := json.Marshal(want)
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	_ = json.Unmarshal(wb, &w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("sent\n%s\nwant\n%s", got, wb)
	}
}

// TestChatSendsImagesAndPDFs: Chat Completions gets an image as an
// image_url part holding a data URL and a PDF as a file part (file_data),
// in the order of the message; a file without bytes is named in text.
func TestChatSendsImagesAndPDFs(t *testing.T) {
	srv := openaitest.New(t)
	m := openai.New(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini")
	srv.Enqueue(openaitest.Text("A spike."))
	for _, err := range m.Stream(context.Background(), withFiles()) {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, ok := srv.LastRequest()
	if !ok || len(r.Messages) != 1 {
		t.Fatalf("request %+v", r)
	}
	sameJSON(t, r.Messages[0].RawContent, []any{
		map[string]any{"type": "text", "text": "What is wrong here?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": dataURL("image/png", pngBytes)}},
		map[string]any{"type": "file", "file": map[string]any{"filename": "report.pdf", "file_data": dataURL("application/pdf", pdfBytes)}},
		map[string]any{"type": "text", "text": "[attached file lost.png (image/png)]"},
	})
}

// TestResponsesSendsImagesAndPDFs: the Responses API gets input_image
// (a data URL) and input_file (file_data and filename).
func TestResponsesSendsImagesAndPDFs(t *testing.T) {
	srv := openaitest.New(t)
	m := openai.NewResponses(openai.Config{BaseURL: srv.URL()}).Model("gpt-5-mini")
	srv.Enqueue(openaitest.Text("A spike."))
	for _, err := range m.Stream(context.Background(), withFiles()) {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, ok := srv.LastResponsesRequest()
	if !ok || len(r.Input) != 1 {
		t.Fatalf("request %+v", r)
	}
	sameJSON(t, r.Input[0].RawContent, []any{
		map[string]any{"type": "input_text", "text": "What is wrong here?"},
		map[string]any{"type": "input_image", "detail": "auto", "image_url": dataURL("image/png", pngBytes)},
		map[string]any{"type": "input_file", "filename": "report.pdf", "file_data": dataURL("application/pdf", pdfBytes)},
		map[string]any{"type": "input_text", "text": "[attached file lost.png (image/png)]"},
	})
}
