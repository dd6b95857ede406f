package files

import (
	"encoding/base64"
	"errors"
	"io"
	"net/url"
	"strings"

	"github.com/forge-runtime/forge"
)

// MaxAttachments is the most files one message may carry.
const MaxAttachments = 20

// Attachment is one file of a message as a client sent it: exactly one
// of FileID, Data (base64, with MimeType and Filename) or URL (a data:
// URL; remote URLs are never fetched).
type Attachment struct {
	FileID   string
	Data     *string
	MimeType string
	Filename string
	URL      string
}

// Resolve turns the attachments of a message into the engine's input
// files: a file_id as it is (the engine looks it up), inline content
// decoded, spooled and checked now, before anything is stored. The
// returned closer removes what was spooled; call it once the turn began
// or was refused. param names the field in errors ("input[0].files").
func Resolve(atts []Attachment, tenant string, limit int64, param string) ([]forge.InputFile, func(), error) {
	var pending []*Pending
	closeAll := func() {
		for _, p := range pending {
			p.Close()
		}
	}
	if len(atts) > MaxAttachments {
		return nil, closeAll, forge.Errorf(forge.ErrInvalid, "%s holds %d files; a message takes at most %d", param, len(atts), MaxAttachments)
	}
	out := make([]forge.InputFile, 0, len(atts))
	for i, a := range atts {
		field := param + "[" + itoa(i) + "]"
		n := 0
		for _, set := range []bool{a.FileID != "", a.Data != nil, a.URL != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			closeAll()
			return nil, func() {}, forge.Errorf(forge.ErrInvalid, "%s takes exactly one of file_id, data (base64, with mime_type) or url (a data: URL)", field)
		}
		if a.FileID != "" {
			if a.MimeType != "" || a.Filename != "" {
				closeAll()
				return nil, func() {}, forge.Errorf(forge.ErrInvalid, "%s: mime_type and filename come from the stored file, not with file_id", field)
			}
			out = append(out, forge.InputFile{FileID: a.FileID})
			continue
		}
		var (
			body     io.Reader
			declared = a.MimeType
		)
		if a.Data != nil {
			if a.MimeType == "" {
				closeAll()
				return nil, func() {}, forge.Errorf(forge.ErrInvalid, "%s.mime_type is required with data", field)
			}
			body = base64.NewDecoder(base64.StdEncoding, strings.NewReader(*a.Data))
		} else {
			mt, r, err := ParseDataURL(a.URL)
			if err != nil {
				closeAll()
				return nil, func() {}, forge.Errorf(forge.ErrInvalid, "%s.url: %v", field, err)
			}
			if a.MimeType != "" && baseType(a.MimeType) != baseType(mt) {
				closeAll()
				return nil, func() {}, forge.Errorf(forge.ErrInvalid, "%s: mime_type %s and the data: URL's type %s differ", field, a.MimeType, mt)
			}
			declared, body = mt, r
		}
		p, err := NewPending(body, limit, tenant, declared, a.Filename)
		if err != nil {
			closeAll()
			var ce base64.CorruptInputError
			if errors.As(err, &ce) {
				return nil, func() {}, forge.Errorf(forge.ErrInvalid, "%s: the data is not valid base64 (at byte %d)", field, int64(ce))
			}
			if forge.ErrorSentinel(err) != nil {
				return nil, func() {}, forge.Errorf(forge.ErrorSentinel(err), "%s: %v", field, err)
			}
			return nil, func() {}, err
		}
		pending = append(pending, p)
		f := p.File()
		out = append(out, forge.InputFile{Filename: f.Filename, MimeType: f.MimeType, Bytes: f.Bytes, Pending: p})
	}
	return out, closeAll, nil
}

// ParseDataURL returns the media type and a reader of the bytes of a
// data: URL ("data:image/png;base64,...", or percent-encoded text). Any
// other URL is refused: Forge fetches nothing a client names (no request
// to a remote host or a metadata service on a client's behalf).
func ParseDataURL(raw string) (string, io.Reader, error) {
	rest, ok := cutPrefixFold(raw, "data:")
	if !ok {
		if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
			return "", nil, errors.New("only data: URLs are accepted: Forge does not fetch " + u.Scheme + " URLs (upload the file with POST /v1/files, or send its bytes)")
		}
		return "", nil, errors.New("not a data: URL")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", nil, errors.New("a data: URL needs a comma before its data")
	}
	isBase64 := false
	if m, ok := cutSuffixFold(meta, ";base64"); ok {
		meta, isBase64 = m, true
	}
	mt := meta
	if i := strings.IndexByte(meta, ';'); i >= 0 {
		mt = meta[:i]
	}
	// No type ("data:;base64,..."): the content says (not RFC 2397's
	// text/plain default, which would contradict an image).
	if isBase64 {
		return mt, base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)), nil
	}
	text, err := url.PathUnescape(data)
	if err != nil {
		return "", nil, errors.New("the data: URL's data is not percent-encoded correctly")
	}
	return mt, strings.NewReader(text), nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

func cutSuffixFold(s, suffix string) (string, bool) {
	if len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix) {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
