package forge

import (
	"context"
	"io"
	"time"
)

// File is a tenant's stored file: its metadata. The bytes are kept once
// per tenant and content hash (content-addressed), however many files
// (uploads, inline attachments) have them.
type File struct {
	ID       string `json:"id"`
	Tenant   string `json:"-"`
	Filename string `json:"filename"`
	// MimeType is the type sniffed from the content, never the client's
	// word alone (internal/filetype).
	MimeType string `json:"mime_type"`
	Bytes    int64  `json:"bytes"`
	// SHA256 is the content's hash, lowercase hex.
	SHA256  string `json:"sha256"`
	Purpose string `json:"purpose,omitempty"`
	// Width and Height are an image's dimensions, read from its header.
	Width     int       `json:"width,omitempty"`
	Height    int       `json:"height,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// FileChunkBytes is the size of the pieces a store keeps a file's bytes
// in: no write or read holds more than this of one file in memory.
const FileChunkBytes = 1 << 20

// FileStore keeps tenants' files. Content is addressed by its hash per
// tenant: a second file with the same bytes stores no second copy, and
// the bytes go when the last file having them is deleted. A tenant never
// sees another's files (ErrNotFound). An S3-compatible backend would
// implement this interface (metadata in the database, bytes elsewhere)
// with nothing above it changing.
type FileStore interface {
	// CreateFile stores f with the bytes content yields, which must be
	// f.Bytes long and hash to f.SHA256 (ErrInvalid otherwise, and nothing
	// is stored). When the tenant already holds those bytes, content is
	// not read. It sets f.ID and f.CreatedAt.
	CreateFile(ctx context.Context, f *File, content io.Reader) error
	// GetFile returns a file's metadata.
	GetFile(ctx context.Context, tenant, id string) (*File, error)
	// ListFiles lists a tenant's files, oldest first.
	ListFiles(ctx context.Context, tenant string, opts ListOptions) ([]*File, string, error)
	// FileContent returns a reader of a file's bytes, read a chunk at a
	// time; the caller closes it.
	FileContent(ctx context.Context, tenant, id string) (io.ReadCloser, error)
	// DeleteFile deletes a file; its bytes go unless another file of the
	// tenant has them. Messages that referenced it keep their parts.
	DeleteFile(ctx context.Context, tenant, id string) error
}

// FileData is the Data of a file part: the attachment a message carries.
type FileData struct {
	FileID   string `json:"file_id"`
	Filename string `json:"filename"`
	MimeType string `json:"mime_type"`
	Bytes    int64  `json:"bytes"`
}

// InputFile is an attachment of a message input item: a stored file named
// by FileID, or checked inline content (Pending) that the engine stores
// as a file when the turn begins. The engine fills the other fields from
// the file; a turn's stored input holds those, never the bytes.
type InputFile struct {
	FileID   string `json:"file_id"`
	Filename string `json:"filename,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	// Pending is inline content, checked and not stored yet.
	Pending PendingFile `json:"-"`
}

// PendingFile is inline content the server checked (type, size, image
// dimensions) but has not stored.
type PendingFile interface {
	// File is the metadata the file will have (no id yet).
	File() File
	// Store stores the content as a new file of fs and returns it; it may
	// be called again after the file it made was deleted.
	Store(ctx context.Context, fs FileStore) (*File, error)
}
