// Package files takes files in (API.md, "Files and attachments"): it
// spools an upload to a temporary file while hashing it, up to a size
// limit, takes its type from the content rather than the client's word,
// reads an image's dimensions from its header (never decoding it), and
// stores it in a forge.FileStore. The HTTP API, the OpenAI facade and
// inline attachments in turns all take files in through here.
package files

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // image.DecodeConfig of the accepted image types
	_ "image/jpeg"
	_ "image/png"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// DefaultMaxBytes is the default limit of one file (--max-file-bytes).
const DefaultMaxBytes = 20 << 20

// MaxPixels is the most pixels an image's header may declare: above it
// the image is refused unread (a decompression bomb is a small file).
const MaxPixels = 50_000_000

// Accepted types (API.md).
const (
	PNG      = "image/png"
	JPEG     = "image/jpeg"
	GIF      = "image/gif"
	WebP     = "image/webp"
	PDF      = "application/pdf"
	Text     = "text/plain"
	Markdown = "text/markdown"
	CSV      = "text/csv"
	JSON     = "application/json"
)

var accepted = map[string]bool{PNG: true, JPEG: true, GIF: true, WebP: true, PDF: true,
	Text: true, Markdown: true, CSV: true, JSON: true}

// Accepted reports whether Forge takes files of media type mt.
func Accepted(mt string) bool { return accepted[mt] }

// IsImage reports whether mt is an accepted image type.
func IsImage(mt string) bool { return strings.HasPrefix(mt, "image/") && accepted[mt] }

// IsText reports whether mt is an accepted text type (sent to a model as
// text).
func IsText(mt string) bool { return mt == Text || mt == Markdown || mt == CSV || mt == JSON }

// Kind is the modality a type is given to a model as: "image", "pdf" or
// "text" (forge.ModelInfo.InputModalities).
func Kind(mt string) string {
	switch {
	case IsImage(mt):
		return "image"
	case mt == PDF:
		return "pdf"
	}
	return "text"
}

// byExtension is the text type a file name says, where the content alone
// cannot tell one text from another.
var byExtension = map[string]string{".md": Markdown, ".markdown": Markdown, ".csv": CSV, ".json": JSON, ".txt": Text}

// sniffLen is how much of the start of a file its type is told from.
const sniffLen = 512

// Sniff returns the media type of content that starts with head, without
// parameters: net/http's sniffing, plus WebP and SVG, which it does not
// tell apart (SVG reads as text or XML there, and is not accepted here: a
// script in an image).
func Sniff(head []byte) string {
	if len(head) > sniffLen {
		head = head[:sniffLen]
	}
	if len(head) >= 12 && string(head[:4]) == "RIFF" && string(head[8:12]) == "WEBP" {
		return WebP
	}
	trimmed := bytes.TrimLeft(head, "\t\n\r \xef\xbb\xbf")
	lower := bytes.ToLower(trimmed[:min(len(trimmed), 256)])
	if bytes.HasPrefix(lower, []byte("<svg")) || bytes.Contains(lower, []byte("<svg")) && bytes.HasPrefix(lower, []byte("<?xml")) ||
		bytes.HasPrefix(lower, []byte("<!doctype svg")) {
		return "image/svg+xml"
	}
	mt, params, err := mime.ParseMediaType(http.DetectContentType(head))
	if err != nil {
		return "application/octet-stream"
	}
	if mt == Text && !strings.EqualFold(params["charset"], "utf-8") {
		return "text/plain; charset=" + params["charset"] // UTF-16 and others: not taken
	}
	return mt
}

// Spooled is an upload held in a temporary file: its size, hash and first
// bytes, read once as it arrived.
type Spooled struct {
	file  *os.File
	size  int64
	sum   string
	head  []byte
	limit int64
}

// Spool reads r to its end into a temporary file, hashing it as it goes,
// and refuses with forge.ErrTooLarge a body over limit bytes (reading no
// more than one byte past it). The caller closes the result.
func Spool(r io.Reader, limit int64) (*Spooled, error) {
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	f, err := os.CreateTemp("", "forge-upload-*")
	if err != nil {
		return nil, fmt.Errorf("files: spool: %w", err)
	}
	s := &Spooled{file: f, limit: limit}
	h := sha256.New()
	head := &headWriter{max: sniffLen}
	body := &bodyReader{r: io.LimitReader(r, limit+1)}
	n, err := io.Copy(io.MultiWriter(f, h, head), body)
	if err == nil && n > limit {
		err = forge.Errorf(forge.ErrTooLarge, "the file exceeds %d bytes (--max-file-bytes)", limit)
	}
	if err != nil {
		s.Close()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, forge.Errorf(forge.ErrTooLarge, "the file exceeds %d bytes (--max-file-bytes)", limit)
		}
		if body.err != nil && errors.Is(err, body.err) && forge.ErrorSentinel(err) == nil {
			// The client's body, not our disk: a malformed chunk, a
			// dropped connection, the body's read timeout.
			return nil, forge.Errorf(forge.ErrInvalid, "the request body cannot be read: %v", err)
		}
		return nil, err
	}
	s.size, s.sum, s.head = n, hex.EncodeToString(h.Sum(nil)), head.b
	return s, nil
}

type headWriter struct {
	b   []byte
	max int
}

func (w *headWriter) Write(p []byte) (int, error) {
	if room := w.max - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Close removes the temporary file.
func (s *Spooled) Close() {
	if s.file != nil {
		_ = s.file.Close()
		_ = os.Remove(s.file.Name())
		s.file = nil
	}
}

// Size is the upload's length in bytes.
func (s *Spooled) Size() int64 { return s.size }

// SHA256 is the upload's hash, lowercase hex.
func (s *Spooled) SHA256() string { return s.sum }

func (s *Spooled) reader() (io.Reader, error) {
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("files: rewind: %w", err)
	}
	return bufio.NewReaderSize(s.file, 64<<10), nil
}

// Describe checks the upload against what the client declared (a media
// type, "" for none, and a file name) and returns the file to store: its
// type taken from the content, its name cleaned, an image's dimensions.
// A declared type the content contradicts is forge.ErrInvalid; content of
// a type Forge does not take (or a declared one it does not take) is
// forge.ErrUnsupportedMediaType.
func (s *Spooled) Describe(tenant, declared, filename, purpose string) (*forge.File, error) {
	declared = baseType(declared)
	name := CleanName(filename)
	mt, err := s.resolveType(declared, name)
	if err != nil {
		return nil, err
	}
	f := &forge.File{Tenant: tenant, Filename: name, MimeType: mt, Bytes: s.size, SHA256: s.sum, Purpose: purpose}
	if f.Filename == "" {
		f.Filename = "file" + extension(mt)
	}
	switch {
	case IsImage(mt):
		if err := s.imageSize(f); err != nil {
			return nil, err
		}
	case IsText(mt):
		if err := s.checkText(mt); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func baseType(t string) string {
	if t == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(t)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(t))
	}
	return mt
}

// resolveType is the file's type: what the content says, a text type
// narrowed by the declared type or the name's extension.
func (s *Spooled) resolveType(declared, name string) (string, error) {
	sniffed := Sniff(s.head)
	generic := declared == "" || declared == "application/octet-stream"
	if !generic && !accepted[declared] {
		return "", forge.Errorf(forge.ErrUnsupportedMediaType,
			"files of type %s are not accepted (images: png, jpeg, gif, webp; application/pdf; text: plain, markdown, csv, json)", declared)
	}
	if sniffed == Text {
		// The content is UTF-8 text: which text, the declaration or the
		// name tells.
		switch {
		case !generic && IsText(declared):
			return declared, nil
		case !generic:
			return "", forge.Errorf(forge.ErrInvalid, "the file is declared %s but its content is text", declared)
		}
		if t, ok := byExtension[strings.ToLower(path.Ext(name))]; ok {
			return t, nil
		}
		return Text, nil
	}
	if !accepted[sniffed] {
		if !generic {
			return "", forge.Errorf(forge.ErrInvalid, "the file is declared %s but its content is %s", declared, sniffed)
		}
		return "", forge.Errorf(forge.ErrUnsupportedMediaType,
			"the content is %s, which is not accepted (images: png, jpeg, gif, webp; application/pdf; text: plain, markdown, csv, json)", sniffed)
	}
	if !generic && declared != sniffed {
		return "", forge.Errorf(forge.ErrInvalid, "the file is declared %s but its content is %s", declared, sniffed)
	}
	return sniffed, nil
}

// imageSize reads the image's dimensions from its header and refuses one
// over MaxPixels before anything decodes it.
func (s *Spooled) imageSize(f *forge.File) error {
	r, err := s.reader()
	if err != nil {
		return err
	}
	var w, h int
	if f.MimeType == WebP {
		w, h, err = webpSize(r)
	} else {
		var cfg image.Config
		cfg, _, err = image.DecodeConfig(r)
		w, h = cfg.Width, cfg.Height
	}
	if err != nil {
		return forge.Errorf(forge.ErrInvalid, "the file is not a valid %s image: its header cannot be read", f.MimeType)
	}
	if w <= 0 || h <= 0 {
		return forge.Errorf(forge.ErrInvalid, "the image's header declares %dx%d pixels", w, h)
	}
	if int64(w)*int64(h) > MaxPixels {
		return forge.Errorf(forge.ErrInvalid, "the image's header declares %dx%d pixels, over the %d megapixels accepted", w, h, MaxPixels/1_000_000)
	}
	f.Width, f.Height = w, h
	return nil
}

// webpSize reads a WebP's canvas size from its first chunk (VP8, VP8L or
// VP8X; the standard library has no WebP decoder).
func webpSize(r io.Reader) (int, int, error) {
	var b [30]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, 0, err
	}
	le24 := func(p []byte) int { return int(p[0]) | int(p[1])<<8 | int(p[2])<<16 }
	switch string(b[12:16]) {
	case "VP8X": // extended: canvas size minus one, 24 bits each
		return le24(b[24:27]) + 1, le24(b[27:30]) + 1, nil
	case "VP8L": // lossless: signature 0x2f, then 14 bits each, minus one
		if b[20] != 0x2f {
			return 0, 0, errors.New("bad VP8L signature")
		}
		bits := uint32(b[21]) | uint32(b[22])<<8 | uint32(b[23])<<16 | uint32(b[24])<<24
		return int(bits&0x3fff) + 1, int(bits>>14&0x3fff) + 1, nil
	case "VP8 ": // lossy: a key frame's start code, then 14 bits each
		if b[23] != 0x9d || b[24] != 0x01 || b[25] != 0x2a {
			return 0, 0, errors.New("bad VP8 start code")
		}
		return int(uint16(b[26])|uint16(b[27])<<8) & 0x3fff, int(uint16(b[28])|uint16(b[29])<<8) & 0x3fff, nil
	}
	return 0, 0, errors.New("unknown WebP chunk")
}

// checkText refuses text that is not UTF-8 throughout (sniffing saw only
// its start), or JSON that does not parse.
func (s *Spooled) checkText(mt string) error {
	r, err := s.reader()
	if err != nil {
		return err
	}
	if mt == JSON {
		dec := json.NewDecoder(r)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return forge.Errorf(forge.ErrInvalid, "the file is declared application/json but does not parse: %v", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return forge.Errorf(forge.ErrInvalid, "the file is declared application/json but holds more than one JSON value")
		}
		if r, err = s.reader(); err != nil {
			return err
		}
	}
	br := r.(*bufio.Reader)
	for {
		c, size, err := br.ReadRune()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("files: read: %w", err)
		}
		if c == utf8.RuneError && size == 1 {
			return forge.Errorf(forge.ErrInvalid, "the file is declared text but is not UTF-8 throughout")
		}
	}
}

// Store stores the upload described by f (from Describe).
func (s *Spooled) Store(ctx context.Context, fs forge.FileStore, f *forge.File) error {
	r, err := s.reader()
	if err != nil {
		return err
	}
	return fs.CreateFile(ctx, f, r)
}

// maxNameLen bounds a stored file name (bytes).
const maxNameLen = 255

// CleanName returns the last element of a client's file name, without
// control characters and at most maxNameLen bytes: a name, never a path.
func CleanName(name string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	if name == "." || name == ".." {
		return ""
	}
	for len(name) > maxNameLen {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}

// Extension is the file name extension of an accepted type (".txt" for
// the others).
func Extension(mt string) string { return extension(mt) }

func extension(mt string) string {
	switch mt {
	case PNG:
		return ".png"
	case JPEG:
		return ".jpg"
	case GIF:
		return ".gif"
	case WebP:
		return ".webp"
	case PDF:
		return ".pdf"
	case Markdown:
		return ".md"
	case CSV:
		return ".csv"
	case JSON:
		return ".json"
	}
	return ".txt"
}

// Take spools r and describes and stores it in one call: the whole of
// taking a file in. Nothing is stored when any check fails.
func Take(ctx context.Context, fs forge.FileStore, r io.Reader, limit int64, tenant, declared, filename, purpose string) (*forge.File, error) {
	sp, err := Spool(r, limit)
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	f, err := sp.Describe(tenant, declared, filename, purpose)
	if err != nil {
		return nil, err
	}
	if err := sp.Store(ctx, fs, f); err != nil {
		return nil, err
	}
	return f, nil
}

// Pending is checked inline content (forge.PendingFile): a spooled file
// and its description, stored when the turn it is attached to begins.
type Pending struct {
	sp *Spooled
	f  forge.File
}

var _ forge.PendingFile = (*Pending)(nil)

// NewPending spools content and checks it as Describe does; the caller
// closes it once the turn began (or was refused).
func NewPending(r io.Reader, limit int64, tenant, declared, filename string) (*Pending, error) {
	sp, err := Spool(r, limit)
	if err != nil {
		return nil, err
	}
	f, err := sp.Describe(tenant, declared, filename, "user_data")
	if err != nil {
		sp.Close()
		return nil, err
	}
	return &Pending{sp: sp, f: *f}, nil
}

// File implements forge.PendingFile.
func (p *Pending) File() forge.File { return p.f }

// Store implements forge.PendingFile.
func (p *Pending) Store(ctx context.Context, fs forge.FileStore) (*forge.File, error) {
	f := p.f
	if err := p.sp.Store(ctx, fs, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Close removes the spooled content.
func (p *Pending) Close() { p.sp.Close() }

// bodyReader remembers the error its reader gave, so a failed copy can
// tell the client's body from the spool file.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}
