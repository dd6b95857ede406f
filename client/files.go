package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/forge-runtime/forge"
)

// UploadOptions tune UploadFile.
type UploadOptions struct {
	// MimeType declares the content's type; empty lets the server tell
	// it from the content (it checks a declared one against it anyway).
	MimeType string
	// Purpose is the OpenAI-style purpose ("user_data", "vision"); empty
	// for none.
	Purpose string
}

// UploadFile stores the bytes r yields as a file named filename (POST
// /v1/files, multipart, streamed: the content is never held in memory).
// Attach it to a message with forge.InputFile{FileID: f.ID}.
func (c *Client) UploadFile(ctx context.Context, filename string, r io.Reader, opts UploadOptions) (*forge.File, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			if opts.Purpose != "" {
				if err := mw.WriteField("purpose", opts.Purpose); err != nil {
					return err
				}
			}
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, escapeQuotes(filename)))
			if opts.MimeType != "" {
				h.Set("Content-Type", opts.MimeType)
			}
			part, err := mw.CreatePart(h)
			if err != nil {
				return err
			}
			if _, err := io.Copy(part, r); err != nil {
				return err
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/files", nil, nil)
	if err != nil {
		pr.CloseWithError(err)
		return nil, err
	}
	req.Body = pr
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.hc.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		return nil, err
	}
	defer resp.Body.Close()
	pr.CloseWithError(io.ErrClosedPipe) // the writer stops if the server answered early
	if resp.StatusCode >= 300 {
		return nil, readAPIError(resp)
	}
	var f forge.File
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		return nil, fmt.Errorf("forge client: decoding POST /v1/files answer: %w", err)
	}
	return &f, nil
}

var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "", "\n", "")

func escapeQuotes(s string) string { return quoteEscaper.Replace(s) }

// GetFile returns a file's metadata.
func (c *Client) GetFile(ctx context.Context, id string) (*forge.File, error) {
	var out forge.File
	if _, err := c.do(ctx, http.MethodGet, "/v1/files/"+seg(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListFiles returns a page of the tenant's files.
func (c *Client) ListFiles(ctx context.Context, opts ListOptions) (*Page[forge.File], error) {
	return list[forge.File](ctx, c, "/v1/files", opts.query(nil))
}

// FileContent returns a file's bytes and their type; the caller closes
// the reader.
func (c *Client) FileContent(ctx context.Context, id string) (io.ReadCloser, string, error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/files/"+seg(id)+"/content", nil, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, "", readAPIError(resp)
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}

// DeleteFile deletes a file; messages that referenced it keep their parts.
func (c *Client) DeleteFile(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/files/"+seg(id), nil, nil, nil, nil)
	return err
}
