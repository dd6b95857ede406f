package openairesp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

func smallPNG(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 5, 7))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestOpenAIFilesWithTheSDK: openai-go's client.Files uploads, reads,
// lists and deletes files of the same store as /v1/files.
func TestOpenAIFilesWithTheSDK(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, openairesp.Protocol{})
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1"), option.WithAPIKey("ka"), option.WithMaxRetries(0))
	img := smallPNG(t)
	f, err := client.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(bytes.NewReader(img), "chart.png", "image/png"),
		Purpose: openai.FilePurposeVision,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.ID, "file_") || f.Bytes != int64(len(img)) || f.Filename != "chart.png" || f.Purpose != "vision" || f.Status != "processed" {
		t.Fatalf("created %+v", f)
	}
	// The same file through Forge's API.
	if status, body := s.Do("GET", "/v1/files/"+f.ID, "", "Authorization", "Bearer ka"); status != 200 ||
		!strings.Contains(body, `"mime_type":"image/png"`) || !strings.Contains(body, `"width":5`) {
		t.Fatalf("GET /v1/files: %d %s", status, body)
	}
	got, err := client.Files.Get(ctx, f.ID)
	if err != nil || got.ID != f.ID {
		t.Fatalf("Get: %+v %v", got, err)
	}
	resp, err := client.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	content, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(content, img) || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("Content: %d bytes, %v", len(content), resp.Header)
	}
	page, err := client.Files.List(ctx, openai.FileListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != f.ID {
		t.Fatalf("List: %+v %v", page, err)
	}
	// Another tenant does not see it.
	other := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1"), option.WithAPIKey("kb"), option.WithMaxRetries(0))
	var apiErr *openai.Error
	if _, err := other.Files.Get(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("another tenant's Get: %v", err)
	}
	if _, err := other.Files.Delete(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("another tenant's Delete: %v", err)
	}
	// A lying type and an unaccepted purpose are refused in OpenAI's shape.
	_, err = client.Files.New(ctx, openai.FileNewParams{
		File: openai.File(strings.NewReader("MZ\x90\x00 not an image"), "x.png", "image/png"), Purpose: openai.FilePurposeUserData,
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" {
		t.Fatalf("lying type: %v", err)
	}
	_, err = client.Files.New(ctx, openai.FileNewParams{
		File: openai.File(bytes.NewReader(img), "x.png", "image/png"), Purpose: openai.FilePurposeFineTune,
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("fine-tune purpose: %v", err)
	}
	del, err := client.Files.Delete(ctx, f.ID)
	if err != nil || !del.Deleted {
		t.Fatalf("Delete: %+v %v", del, err)
	}
	if _, err := client.Files.Get(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("Get after Delete: %v", err)
	}
}

// TestResponsesTakeImagesAndFiles: input_image (a data URL or a file_id)
// and input_file (file_data or a file_id) become file parts of the user
// message; remote URLs and lying types are refused with nothing stored.
func TestResponsesTakeImagesAndFiles(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	if status, body := s.Do("POST", "/v1/agents", `{"name":"bot","model":"scripted/echo"}`); status != 201 {
		t.Fatalf("agent: %d %s", status, body)
	}
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	img := smallPNG(t)
	up, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(img), "a.png", "image/png"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)
	pdf := "data:application/pdf;base64," + base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n%%EOF\n"))
	body := `{"model":"bot","input":[{"role":"user","content":[{"type":"input_text","text":"compare"},` +
		`{"type":"input_image","image_url":"` + dataURL + `"},{"type":"input_image","file_id":"` + up.ID + `"},` +
		`{"type":"input_file","filename":"r.pdf","file_data":"` + pdf + `"},{"type":"input_file","file_id":"` + up.ID + `"}]}]}`
	status, out := s.Do("POST", "/openai/v1/responses", body)
	if status != 200 {
		t.Fatalf("create: %d %s", status, out)
	}
	var resp struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	_ = json.Unmarshal([]byte(out), &resp)
	_, msgs := s.Do("GET", "/v1/sessions/"+resp.Conversation.ID+"/messages", "")
	if strings.Count(msgs, `"type":"file"`) != 4 || !strings.Contains(msgs, `"filename":"r.pdf"`) || !strings.Contains(msgs, `"mime_type":"application/pdf"`) ||
		strings.Count(msgs, `"file_id":"`+up.ID+`"`) != 2 {
		t.Fatalf("messages: %s", msgs)
	}
	_, list := s.Do("GET", "/v1/files", "")
	before := strings.Count(list, `"id":"file_`)
	for _, part := range []string{
		`{"type":"input_image","image_url":"https://example.com/x.png"}`,
		`{"type":"input_image","image_url":"http://169.254.169.254/latest/meta-data/"}`,
		`{"type":"input_file","file_url":"https://example.com/x.pdf"}`,
		`{"type":"input_image","image_url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString([]byte("%PDF-1.4")) + `"}`,
		`{"type":"input_file","file_data":"%%%not base64"}`,
		`{"type":"input_image","file_id":"file_missing"}`,
	} {
		status, out := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":[{"role":"user","content":[{"type":"input_text","text":"x"},`+part+`]}]}`)
		if status < 400 || status >= 500 {
			t.Fatalf("%s: %d %s", part, status, out)
		}
	}
	_, list = s.Do("GET", "/v1/files", "")
	if after := strings.Count(list, `"id":"file_`); after != before {
		t.Fatalf("refused requests stored files: %d then %d", before, after)
	}
}
