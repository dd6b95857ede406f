package httpapi_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
)

func testPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bombPNG is a PNG signature and a valid header claiming w x h pixels.
func bombPNG(w, h uint32) []byte {
	var ihdr bytes.Buffer
	ihdr.WriteString("IHDR")
	_ = binary.Write(&ihdr, binary.BigEndian, w)
	_ = binary.Write(&ihdr, binary.BigEndian, h)
	ihdr.Write([]byte{8, 6, 0, 0, 0})
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	_ = binary.Write(&b, binary.BigEndian, uint32(13))
	b.Write(ihdr.Bytes())
	_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(ihdr.Bytes()))
	return append(b.Bytes(), make([]byte, 64)...)
}

// multipartBody is a form with a file field of the given declared type
// (none when "") and extra fields.
func multipartBody(t testing.TB, filename, declared string, content []byte, fields map[string]string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	h := make(map[string][]string)
	h["Content-Disposition"] = []string{`form-data; name="file"; filename="` + filename + `"`}
	if declared != "" {
		h["Content-Type"] = []string{declared}
	}
	pw, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = pw.Write(content)
	_ = mw.Close()
	return b.Bytes(), mw.FormDataContentType()
}

func (s *stack) upload(filename, declared string, content []byte, fields map[string]string) answer {
	s.t.Helper()
	body, ct := multipartBody(s.t, filename, declared, content, fields)
	return s.do(req{method: "POST", path: "/v1/files", body: body, header: map[string]string{"Content-Type": ct}})
}

func (s *stack) fileCount() int {
	s.t.Helper()
	var list struct{ Data []forge.File }
	s.call("GET", "/v1/files", nil, 200, &list)
	return len(list.Data)
}

func TestFilesLifecycle(t *testing.T) {
	s := newStack(t)
	img := testPNG(t, 4, 3)
	a := s.upload("../../shot.png", "image/png", img, map[string]string{"purpose": "vision"})
	var f forge.File
	if a.status != 201 || json.Unmarshal(a.body, &f) != nil {
		t.Fatalf("multipart upload: %s", a)
	}
	if !strings.HasPrefix(f.ID, forge.PrefixFile) || f.Filename != "shot.png" || f.MimeType != "image/png" ||
		f.Bytes != int64(len(img)) || f.Width != 4 || f.Height != 3 || f.Purpose != "vision" || len(f.SHA256) != 64 {
		t.Fatalf("stored %+v", f)
	}
	if a.header.Get("Location") != "/v1/files/"+f.ID {
		t.Fatalf("Location %q", a.header.Get("Location"))
	}
	// Raw bytes with their type and name.
	raw := s.do(req{method: "POST", path: "/v1/files?filename=notes.md", body: "# Notes\n\nsee the image",
		header: map[string]string{"Content-Type": "text/markdown"}})
	var md forge.File
	if raw.status != 201 || json.Unmarshal(raw.body, &md) != nil || md.MimeType != "text/markdown" || md.Filename != "notes.md" {
		t.Fatalf("raw upload: %s", raw)
	}
	var got forge.File
	s.call("GET", "/v1/files/"+f.ID, nil, 200, &got)
	if got.ID != f.ID || got.SHA256 != f.SHA256 {
		t.Fatalf("GET %+v", got)
	}
	if n := s.fileCount(); n != 2 {
		t.Fatalf("listed %d files", n)
	}
	c := s.do(req{method: "GET", path: "/v1/files/" + f.ID + "/content"})
	if c.status != 200 || !bytes.Equal(c.body, img) || c.header.Get("Content-Type") != "image/png" ||
		c.header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(c.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("content: %d %v", c.status, c.header)
	}
	// The same bytes again: another file, the same hash.
	var again forge.File
	if a := s.upload("copy.png", "", img, nil); a.status != 201 || json.Unmarshal(a.body, &again) != nil || again.SHA256 != f.SHA256 || again.ID == f.ID {
		t.Fatalf("second upload: %s", a)
	}
	s.call("DELETE", "/v1/files/"+f.ID, nil, 204, nil)
	if a := s.do(req{method: "GET", path: "/v1/files/" + f.ID}); a.status != 404 || a.errCode() != "not_found" {
		t.Fatalf("GET deleted: %s", a)
	}
	if c := s.do(req{method: "GET", path: "/v1/files/" + again.ID + "/content"}); c.status != 200 || !bytes.Equal(c.body, img) {
		t.Fatalf("the copy after deleting the first: %d", c.status)
	}
	if a := s.do(req{method: "DELETE", path: "/v1/files/" + f.ID}); a.status != 404 {
		t.Fatalf("DELETE twice: %s", a)
	}
}

func TestFilesHostileUploadsStoreNothing(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.MaxFileBytes = 1 << 20 })
	exe := append([]byte("MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff"), make([]byte, 200)...)
	zip := append([]byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"), make([]byte, 200)...)
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>`)
	for _, c := range []struct {
		name, filename, declared string
		content                  []byte
		fields                   map[string]string
		status                   int
		code                     string
	}{
		{"declared png, content pdf", "a.png", "image/png", []byte("%PDF-1.4\n%..."), nil, 400, "invalid_request"},
		{"executable", "a.exe", "application/octet-stream", exe, nil, 415, "unsupported_media_type"},
		{"executable declared image", "a.png", "image/png", exe, nil, 400, "invalid_request"},
		{"zip", "a.zip", "application/zip", zip, nil, 415, "unsupported_media_type"},
		{"svg", "a.svg", "image/svg+xml", svg, nil, 415, "unsupported_media_type"},
		{"svg undeclared", "a.svg", "", svg, nil, 415, "unsupported_media_type"},
		{"100k x 100k png", "bomb.png", "image/png", bombPNG(100_000, 100_000), nil, 400, "invalid_request"},
		{"over the limit", "big.pdf", "application/pdf", append([]byte("%PDF-1.4\n"), make([]byte, 1<<20)...), nil, 413, "payload_too_large"},
		{"unknown purpose", "a.png", "image/png", testPNG(t, 1, 1), map[string]string{"purpose": "fine-tune"}, 400, "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := s.upload(c.filename, c.declared, c.content, c.fields)
			if a.status != c.status || a.errCode() != c.code {
				t.Fatalf("got %s, want %d %s", a, c.status, c.code)
			}
		})
	}
	for _, c := range []struct {
		name string
		r    req
		code string
	}{
		{"no file field", req{method: "POST", path: "/v1/files", body: "--x--\r\n", header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}}, "invalid_request"},
		{"broken multipart", req{method: "POST", path: "/v1/files", body: "garbage", header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}}, "invalid_request"},
		{"raw without type", req{method: "POST", path: "/v1/files", body: "hello", header: map[string]string{"Content-Type": ""}}, "invalid_request"},
		{"raw lying type", req{method: "POST", path: "/v1/files", body: "hello", header: map[string]string{"Content-Type": "image/jpeg"}}, "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if a := s.do(c.r); a.status >= 500 || a.errCode() != c.code {
				t.Fatalf("got %s, want %s", a, c.code)
			}
		})
	}
	if n := s.fileCount(); n != 0 {
		t.Fatalf("refused uploads stored %d files", n)
	}
}

// endless yields zeros forever and counts what was read of it.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// TestFilesOversizeRefusedWithoutReadingIt: a 2 GiB body is refused with
// 413 having read a small part of it, whether it declares its length or
// is chunked.
func TestFilesOversizeRefusedWithoutReadingIt(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.MaxFileBytes = 1 << 20 })
	for _, declared := range []bool{true, false} {
		body := &endless{}
		hr, err := http.NewRequest("POST", s.srv.URL+"/v1/files?filename=big.pdf", io.LimitReader(body, 2<<30))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/pdf")
		if declared {
			hr.ContentLength = 2 << 30
		}
		resp, err := s.srv.Client().Do(hr)
		if err != nil {
			// The server may close the connection before the client has
			// finished writing: what counts is how little it read.
			t.Logf("declared=%v: %v", declared, err)
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 413 || !strings.Contains(string(b), "payload_too_large") {
				t.Fatalf("declared=%v: %d %s", declared, resp.StatusCode, b)
			}
		}
		if n := body.read.Load(); n > 16<<20 {
			t.Fatalf("declared=%v: the client sent %d bytes of a 2 GiB body over a 1 MiB limit", declared, n)
		}
	}
	if n := s.fileCount(); n != 0 {
		t.Fatalf("stored %d files", n)
	}
}

func TestFilesOfAnotherTenantAreNotFound(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"ka": "acme", "kb": "globex"} })
	s.key = "ka"
	var f forge.File
	a := s.upload("a.png", "", testPNG(t, 2, 2), nil)
	if a.status != 201 || json.Unmarshal(a.body, &f) != nil {
		t.Fatalf("upload: %s", a)
	}
	s.key = "kb"
	for _, r := range []req{
		{method: "GET", path: "/v1/files/" + f.ID},
		{method: "GET", path: "/v1/files/" + f.ID + "/content"},
		{method: "DELETE", path: "/v1/files/" + f.ID},
	} {
		if a := s.do(r); a.status != 404 || a.errCode() != "not_found" {
			t.Fatalf("%s %s as another tenant: %s", r.method, r.path, a)
		}
	}
	if n := s.fileCount(); n != 0 {
		t.Fatalf("another tenant lists %d files", n)
	}
	s.key = "ka"
	if n := s.fileCount(); n != 1 {
		t.Fatalf("owner lists %d files", n)
	}
}
