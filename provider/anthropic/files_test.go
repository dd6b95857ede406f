package anthropic_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
)

// TestMessagesSendImagesAndDocuments: the Messages API gets an image as
// an image block and a PDF as a document block, each with base64 bytes,
// in the order of the message; a file without bytes is named in text.
func TestMessagesSendImagesAndDocuments(t *testing.T) {
	srv := anthropictest.New(t)
	m := anthropic.New(anthropic.Config{APIKey: "sk-ant-test", BaseURL: srv.URL()}).Model("claude-sonnet-4-5")
	srv.Enqueue(anthropictest.Text("A spike."))
	png := []byte("\x89PNG\r\n\x1a\nfake image bytes")
	pdf := []byte("%PDF-1.4\n%%EOF\n")
	req := &forge.ModelRequest{Model: "claude-sonnet-4-5", Messages: []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{
		{Type: forge.ModelPartText, Text: "What is wrong here?"},
		{Type: forge.ModelPartFile, File: &forge.ModelFile{FileID: "file_1", Filename: "chart.png", MimeType: "image/png", Data: png}},
		{Type: forge.ModelPartFile, File: &forge.ModelFile{FileID: "file_2", Filename: "report.pdf", MimeType: "application/pdf", Data: pdf}},
		{Type: forge.ModelPartFile, File: &forge.ModelFile{FileID: "file_3", Filename: "lost.png", MimeType: "image/png"}},
	}}}}
	for _, err := range m.Stream(context.Background(), req) {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, ok := srv.LastRequest()
	if !ok || len(r.Messages) != 1 {
		t.Fatalf("request %+v", r)
	}
	want := []any{
		map[string]any{"type": "text", "text": "What is wrong here?"},
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": base64.StdEncoding.EncodeToString(png)}},
		map[string]any{"type": "document", "title": "report.pdf", "source": map[string]any{"type": "base64", "media_type": "application/pdf", "data": base64.StdEncoding.EncodeToString(pdf)}},
		map[string]any{"type": "text", "text": "[attached file lost.png (image/png)]"},
	}
	var got, w any
	wb, _ := json.Marshal(want)
	_ = json.Unmarshal(wb, &w)
	if err := json.Unmarshal(r.Messages[0].RawContent, &got); err != nil {
		t.Fatal(err)
	}
	// The last block may carry the provider's cache_control marker.
	if blocks, ok := got.([]any); ok {
		for _, b := range blocks {
			delete(b.(map[string]any), "cache_control")
		}
	}
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("sent\n%s\nwant\n%s", r.Messages[0].RawContent, wb)
	}
}
