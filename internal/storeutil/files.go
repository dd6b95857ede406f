package storeutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"regexp"
	"time"

	"github.com/forge-runtime/forge"
)

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// NewFile checks f for CreateFile and returns it with its id and time.
func NewFile(f *forge.File, ids forge.IDGen, now time.Time) (forge.File, error) {
	switch {
	case f.Tenant == "":
		return forge.File{}, forge.Errorf(forge.ErrInvalid, "a file needs a tenant")
	case !sha256RE.MatchString(f.SHA256):
		return forge.File{}, forge.Errorf(forge.ErrInvalid, "a file's sha256 is 64 lowercase hex digits, not %q", f.SHA256)
	case f.Bytes < 0:
		return forge.File{}, forge.Errorf(forge.ErrInvalid, "a file's size cannot be negative")
	case f.MimeType == "":
		return forge.File{}, forge.Errorf(forge.ErrInvalid, "a file needs a mime type")
	}
	c := *f
	c.ID = ids.New(forge.PrefixFile)
	// At millisecond precision, which every store keeps.
	c.CreatedAt = now.UTC().Truncate(time.Millisecond)
	return c, nil
}

// Chunks is how many pieces of forge.FileChunkBytes a file of n bytes is
// kept in (at least one, so an empty file has a row too).
func Chunks(n int64) int {
	if n <= 0 {
		return 1
	}
	return int((n + forge.FileChunkBytes - 1) / forge.FileChunkBytes)
}

// WriteChunks reads content a chunk at a time and calls put with each
// chunk's index and bytes, checking that content is f.Bytes long and
// hashes to f.SHA256: ErrInvalid when it does not (after put may have run:
// the caller removes what it put).
func WriteChunks(content io.Reader, f *forge.File, put func(seq int, data []byte) error) error {
	h := sha256.New()
	var total int64
	buf := make([]byte, forge.FileChunkBytes)
	for seq := 0; ; seq++ {
		n, err := io.ReadFull(content, buf)
		if n > 0 || seq == 0 {
			if total+int64(n) > f.Bytes {
				return forge.Errorf(forge.ErrInvalid, "the content is longer than the %d bytes declared", f.Bytes)
			}
			h.Write(buf[:n])
			total += int64(n)
			// A copy (never nil, even empty): put may keep it (a queued
			// statement's argument).
			chunk := make([]byte, n)
			copy(chunk, buf)
			if perr := put(seq, chunk); perr != nil {
				return perr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if total != f.Bytes {
		return forge.Errorf(forge.ErrInvalid, "the content is %d bytes, not the %d declared", total, f.Bytes)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		return forge.Errorf(forge.ErrInvalid, "the content hashes to %s, not the sha256 declared", sum)
	}
	return nil
}

// ChunkReader reads a stored file chunk by chunk: fetch returns chunk seq.
// It holds one chunk at a time.
type ChunkReader struct {
	ctx    context.Context
	chunks int
	fetch  func(ctx context.Context, seq int) ([]byte, error)
	seq    int
	buf    []byte
}

// NewChunkReader returns a reader of chunks chunks fetched with fetch.
func NewChunkReader(ctx context.Context, chunks int, fetch func(ctx context.Context, seq int) ([]byte, error)) *ChunkReader {
	return &ChunkReader{ctx: ctx, chunks: chunks, fetch: fetch}
}

func (r *ChunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.seq >= r.chunks {
			return 0, io.EOF
		}
		b, err := r.fetch(r.ctx, r.seq)
		if err != nil {
			return 0, err
		}
		r.buf, r.seq = b, r.seq+1
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close implements io.Closer.
func (r *ChunkReader) Close() error { r.seq, r.buf = r.chunks, nil; return nil }
