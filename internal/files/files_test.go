package files

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

// PNG returns a real w x h PNG.
func pngOf(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngHeader is a PNG signature and a valid IHDR claiming w x h, and no
// pixels: what a decompression bomb starts with.
func pngHeader(w, h uint32) []byte {
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
	return b.Bytes()
}

// webpVP8X is the start of an extended WebP of w x h.
func webpVP8X(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00")
	put24 := func(v int) { b = append(b, byte(v), byte(v>>8), byte(v>>16)) }
	put24(w - 1)
	put24(h - 1)
	return b
}

func describe(t *testing.T, content []byte, declared, name string) (*forge.File, error) {
	t.Helper()
	sp, err := Spool(bytes.NewReader(content), 1<<20)
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	return sp.Describe("acme", declared, name, "")
}

func TestDescribeTakesTheTypeFromTheContent(t *testing.T) {
	pngBytes := pngOf(t, 3, 2)
	for _, c := range []struct {
		name, declared, filename string
		content                  []byte
		want                     string
		w, h                     int
	}{
		{"png undeclared", "", "a.png", pngBytes, PNG, 3, 2},
		{"png declared", "image/png", "", pngBytes, PNG, 3, 2},
		{"png as octet-stream", "application/octet-stream", "x", pngBytes, PNG, 3, 2},
		{"webp", "image/webp", "a.webp", webpVP8X(640, 480), WebP, 640, 480},
		{"pdf", "application/pdf", "a.pdf", []byte("%PDF-1.7\n..."), PDF, 0, 0},
		{"text", "", "notes", []byte("hello"), Text, 0, 0},
		{"markdown by name", "", "README.md", []byte("# Title\n"), Markdown, 0, 0},
		{"markdown declared", "text/markdown; charset=utf-8", "x", []byte("# Title\n"), Markdown, 0, 0},
		{"csv by name", "", "t.csv", []byte("a,b\n1,2\n"), CSV, 0, 0},
		{"json declared", "application/json", "x", []byte(`{"a": [1, 2]}`), JSON, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := describe(t, c.content, c.declared, c.filename)
			if err != nil {
				t.Fatal(err)
			}
			if f.MimeType != c.want || f.Width != c.w || f.Height != c.h || f.Bytes != int64(len(c.content)) {
				t.Fatalf("got %s %dx%d %d bytes, want %s %dx%d", f.MimeType, f.Width, f.Height, f.Bytes, c.want, c.w, c.h)
			}
			if f.Filename == "" {
				t.Fatal("no file name")
			}
		})
	}
}

func TestDescribeRefusesHostileFiles(t *testing.T) {
	exe := append([]byte("MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff"), make([]byte, 64)...)
	zip := append([]byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"), make([]byte, 32)...)
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`)
	for _, c := range []struct {
		name, declared string
		content        []byte
		want           error
	}{
		{"exe", "", exe, forge.ErrUnsupportedMediaType},
		{"exe declared png", "image/png", exe, forge.ErrInvalid},
		{"zip", "application/zip", zip, forge.ErrUnsupportedMediaType},
		{"zip undeclared", "", zip, forge.ErrUnsupportedMediaType},
		{"svg", "image/svg+xml", svg, forge.ErrUnsupportedMediaType},
		{"svg undeclared", "", svg, forge.ErrUnsupportedMediaType},
		{"svg declared text", "text/plain", svg, forge.ErrInvalid},
		{"svg with xml prolog", "", []byte(`<?xml version="1.0"?><svg></svg>`), forge.ErrUnsupportedMediaType},
		{"html", "", []byte("<html><script>x</script></html>"), forge.ErrUnsupportedMediaType},
		{"pdf declared png", "image/png", []byte("%PDF-1.4 ..."), forge.ErrInvalid},
		{"png declared jpeg", "image/jpeg", pngOf(t, 1, 1), forge.ErrInvalid},
		{"text declared pdf", "application/pdf", []byte("hello"), forge.ErrInvalid},
		{"100k x 100k png header", "image/png", pngHeader(100_000, 100_000), forge.ErrInvalid},
		{"50001 x 1000 png header", "", pngHeader(50_001, 1000), forge.ErrInvalid},
		{"huge webp header", "", webpVP8X(1<<24, 1<<24), forge.ErrInvalid},
		{"truncated png", "", pngOf(t, 2, 2)[:20], forge.ErrInvalid},
		{"invalid json", "application/json", []byte(`{"a": `), forge.ErrInvalid},
		{"two json values", "application/json", []byte(`{} {}`), forge.ErrInvalid},
		{"not utf-8 past the start", "", append(bytes.Repeat([]byte("a"), 1000), 0xff, 0xfe), forge.ErrInvalid},
		{"utf-16", "", []byte("\xff\xfeh\x00i\x00"), forge.ErrUnsupportedMediaType},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := describe(t, c.content, c.declared, "f")
			if !errors.Is(err, c.want) {
				t.Fatalf("got %+v, %v; want %v", f, err, c.want)
			}
		})
	}
}

func TestSpoolRefusesOverTheLimitReadingOneBytePast(t *testing.T) {
	r := &countingReader{n: 10 << 20}
	_, err := Spool(r, 1<<20)
	if !errors.Is(err, forge.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	// io.Copy reads in 32 KiB pieces: at most one piece past the limit.
	if r.read > 1<<20+32<<10 {
		t.Fatalf("read %d bytes of a 10 MiB body to refuse it over 1 MiB", r.read)
	}
	sp, err := Spool(&countingReader{n: 1 << 20}, 1<<20)
	if err != nil {
		t.Fatalf("a body of exactly the limit: %v", err)
	}
	sp.Close()
}

type countingReader struct{ n, read int }

func (r *countingReader) Read(p []byte) (int, error) {
	if r.read >= r.n {
		return 0, io.EOF
	}
	n := min(len(p), r.n-r.read)
	r.read += n
	return n, nil
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"../../etc/passwd":       "passwd",
		`C:\Users\a\b.png`:       "b.png",
		"a\x00b\nc.txt":          "abc.txt",
		"..":                     "",
		strings.Repeat("é", 200): strings.Repeat("é", 127),
	} {
		if got := CleanName(in); got != want {
			t.Errorf("CleanName(%q) = %q, want %q", in, got, want)
		}
	}
}

// failingBody gives some bytes, then the error a malformed chunked body or
// a dropped connection gives.
type failingBody struct{ sent bool }

func (b *failingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "hello"), nil
	}
	return 0, errors.New("invalid byte in chunk length")
}

// TestUnreadableBodyIsTheClients: a body that fails to read is a 400
// (invalid_request) naming the cause, not an internal error.
func TestUnreadableBodyIsTheClients(t *testing.T) {
	_, err := Spool(&failingBody{}, 1<<20)
	if !errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), "invalid byte in chunk length") {
		t.Fatalf("Spool of an unreadable body: %v", err)
	}
}
