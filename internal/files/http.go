package files

import (
	"context"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
)

// multipartSlack is what a multipart body may hold beyond its file: the
// boundaries, part headers and small fields.
const multipartSlack = 64 << 10

// maxFieldBytes bounds a form field other than the file.
const maxFieldBytes = 1 << 10

// Purposes a file may be uploaded with ("" for none): OpenAI's, for
// files given to a model.
var purposes = map[string]bool{"": true, "user_data": true, "vision": true, "assistants": true}

// Upload takes in the file of an upload request and stores it:
// multipart/form-data with a "file" field (and an optional "purpose"), or
// the raw bytes with their Content-Type, ?filename= and ?purpose=. A body
// whose declared length is over the limit is refused before any of it is
// read, one without a declared length as soon as it passes the limit.
func Upload(ctx context.Context, w http.ResponseWriter, r *http.Request, fs forge.FileStore, tenant string, limit int64) (*forge.File, error) {
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	if r.ContentLength > limit+multipartSlack {
		return nil, forge.Errorf(forge.ErrTooLarge, "the file exceeds %d bytes (--max-file-bytes)", limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit+multipartSlack)
	ct := r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if mt != "multipart/form-data" {
		q := r.URL.Query()
		purpose := q.Get("purpose")
		if !purposes[purpose] {
			return nil, badPurpose(purpose)
		}
		if ct == "" {
			return nil, forge.Errorf(forge.ErrInvalid, "send the file as multipart/form-data (a \"file\" field) or as its bytes with their Content-Type")
		}
		return Take(ctx, fs, r.Body, limit, tenant, ct, q.Get("filename"), purpose)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "the multipart body cannot be read: %v", err)
	}
	var (
		sp       *Spooled
		declared string
		name     string
		purpose  string
	)
	defer func() {
		if sp != nil {
			sp.Close()
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			if tooLarge(err) {
				return nil, forge.Errorf(forge.ErrTooLarge, "the file exceeds %d bytes (--max-file-bytes)", limit)
			}
			return nil, forge.Errorf(forge.ErrInvalid, "the multipart body cannot be read: %v", err)
		}
		switch part.FormName() {
		case "file":
			if sp != nil {
				return nil, forge.Errorf(forge.ErrInvalid, "send one \"file\" field per upload")
			}
			declared, name = part.Header.Get("Content-Type"), part.FileName()
			if sp, err = Spool(part, limit); err != nil {
				if tooLarge(err) {
					return nil, forge.Errorf(forge.ErrTooLarge, "the file exceeds %d bytes (--max-file-bytes)", limit)
				}
				return nil, err
			}
		default:
			b, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
			if err != nil {
				return nil, forge.Errorf(forge.ErrInvalid, "the multipart body cannot be read: %v", err)
			}
			if len(b) > maxFieldBytes {
				return nil, forge.Errorf(forge.ErrInvalid, "the form field %q is over %d bytes", part.FormName(), maxFieldBytes)
			}
			if part.FormName() == "purpose" {
				purpose = strings.TrimSpace(string(b))
			}
		}
	}
	if sp == nil {
		return nil, forge.Errorf(forge.ErrInvalid, "the multipart body has no \"file\" field")
	}
	if !purposes[purpose] {
		return nil, badPurpose(purpose)
	}
	f, err := sp.Describe(tenant, declared, name, purpose)
	if err != nil {
		return nil, err
	}
	if err := sp.Store(ctx, fs, f); err != nil {
		return nil, err
	}
	return f, nil
}

func badPurpose(p string) error {
	return forge.Errorf(forge.ErrInvalid, "purpose %q is not accepted: user_data, vision or assistants", p)
}

func tooLarge(err error) bool {
	if e, ok := err.(interface{ Unwrap() error }); ok && tooLarge(e.Unwrap()) {
		return true
	}
	_, ok := err.(*http.MaxBytesError)
	return ok || forge.ErrorCode(err) == "payload_too_large"
}

// ServeContent answers a file's bytes: with their type, as an attachment
// the browser must not sniff nor run.
func ServeContent(ctx context.Context, w http.ResponseWriter, fs forge.FileStore, tenant, id string) error {
	f, err := fs.GetFile(ctx, tenant, id)
	if err != nil {
		return err
	}
	rc, err := fs.FileContent(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer rc.Close()
	ctype := f.MimeType
	if IsText(ctype) {
		ctype += "; charset=utf-8"
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	disposition := mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename})
	if disposition == "" {
		disposition = "attachment"
	}
	h.Set("Content-Disposition", disposition)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	w.WriteHeader(http.StatusOK)
	// Once the answer has begun, a failure can only cut it short (the
	// client sees fewer bytes than Content-Length says).
	_, _ = io.Copy(w, rc)
	return nil
}
