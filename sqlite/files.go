package sqlite

import (
	"context"
	"errors"
	"io"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var _ forge.FileStore = (*Store)(nil)

// errChunksGone makes CreateFile write a blob's chunks again: they went
// (a DeleteFile of the last file having them) after it found them.
var errChunksGone = errors.New("sqlite: the blob's chunks went meanwhile")

// CreateFile stores f. Each chunk is its own write (the writer never holds
// a whole file, and a chunk is idempotent: the same tenant, hash and
// index always hold the same bytes); the blob and file rows follow in one
// write that checks every chunk is there.
func (s *Store) CreateFile(ctx context.Context, f *forge.File, content io.Reader) error {
	c, err := storeutil.NewFile(f, s.ids, s.now())
	if err != nil {
		return err
	}
	chunks := storeutil.Chunks(c.Bytes)
	for attempt := 0; ; attempt++ {
		have, err := s.blobChunks(ctx, c.Tenant, c.SHA256)
		if err != nil {
			return err
		}
		if have != chunks {
			if attempt > 0 {
				return forge.Errorf(forge.ErrConflict, "the file's content changed while it was stored; retry")
			}
			if err := s.putChunks(ctx, &c, content); err != nil {
				return err
			}
		}
		err = s.write(ctx, func(x *tx) error {
			var n int
			if err := x.queryRow(`SELECT count(*) FROM file_chunks WHERE tenant = ? AND sha256 = ?`, c.Tenant, c.SHA256).Scan(&n); err != nil {
				return dbErr(err)
			}
			if n != chunks {
				return errChunksGone
			}
			if _, err := x.exec(`INSERT INTO file_blobs (tenant, sha256, bytes, chunks, created_at) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT DO NOTHING`, c.Tenant, c.SHA256, c.Bytes, chunks, unixNano(c.CreatedAt)); err != nil {
				return dbErr(err)
			}
			_, err := x.exec(`INSERT INTO files (tenant, id, filename, mime_type, bytes, sha256, purpose, width, height, created_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, c.Tenant, c.ID, c.Filename, c.MimeType, c.Bytes, c.SHA256, c.Purpose,
				c.Width, c.Height, unixNano(c.CreatedAt))
			return dbErr(err)
		})
		if errors.Is(err, errChunksGone) && attempt == 0 {
			continue
		}
		if err != nil {
			return err
		}
		*f = c
		return nil
	}
}

// blobChunks counts the chunks stored for a tenant's hash.
func (s *Store) blobChunks(ctx context.Context, tenant, sum string) (int, error) {
	var n int
	if err := s.queryRow(ctx, `SELECT count(*) FROM file_chunks WHERE tenant = ? AND sha256 = ?`, tenant, sum).Scan(&n); err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}

// putChunks writes content's chunks; on content that is not what c
// declares, it removes the chunks no blob row claims.
func (s *Store) putChunks(ctx context.Context, c *forge.File, content io.Reader) error {
	err := storeutil.WriteChunks(content, c, func(seq int, data []byte) error {
		return s.write(ctx, func(x *tx) error {
			_, err := x.exec(`INSERT INTO file_chunks (tenant, sha256, seq, data) VALUES (?, ?, ?, coalesce(?, x'')) ON CONFLICT DO NOTHING`,
				c.Tenant, c.SHA256, seq, data)
			return dbErr(err)
		})
	})
	if err != nil {
		_ = s.write(context.WithoutCancel(ctx), func(x *tx) error {
			_, err := x.exec(`DELETE FROM file_chunks WHERE tenant = ?1 AND sha256 = ?2
				AND NOT EXISTS (SELECT 1 FROM file_blobs WHERE tenant = ?1 AND sha256 = ?2)`, c.Tenant, c.SHA256)
			return dbErr(err)
		})
	}
	return err
}

const fileCols = `tenant, id, filename, mime_type, bytes, sha256, purpose, width, height, created_at`

func scanFile(sc interface{ Scan(...any) error }) (*forge.File, error) {
	var (
		f       forge.File
		created int64
	)
	if err := sc.Scan(&f.Tenant, &f.ID, &f.Filename, &f.MimeType, &f.Bytes, &f.SHA256, &f.Purpose, &f.Width, &f.Height, &created); err != nil {
		return nil, err
	}
	f.CreatedAt = fromNano(created)
	return &f, nil
}

// GetFile returns a file's metadata.
func (s *Store) GetFile(ctx context.Context, tenant, id string) (*forge.File, error) {
	f, err := scanFile(s.queryRow(ctx, `SELECT `+fileCols+` FROM files WHERE tenant = ? AND id = ?`, tenant, id))
	if err != nil {
		return nil, notFound(err, "file %s not found", id)
	}
	return f, nil
}

// ListFiles lists a tenant's files, oldest first; the cursor is the last id.
func (s *Store) ListFiles(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.File, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	rows, err := s.query(ctx, `SELECT `+fileCols+` FROM files WHERE tenant = ? AND id > ? ORDER BY id LIMIT ?`,
		tenant, opts.Cursor, limit+1)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var out []*forge.File
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, "", dbErr(err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	out, next := storeutil.Page(out, limit, func(f *forge.File) string { return f.ID })
	return out, next, nil
}

// FileContent reads a file's chunks one query at a time.
func (s *Store) FileContent(ctx context.Context, tenant, id string) (io.ReadCloser, error) {
	f, err := s.GetFile(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return storeutil.NewChunkReader(ctx, storeutil.Chunks(f.Bytes), func(ctx context.Context, seq int) ([]byte, error) {
		var b []byte
		err := s.queryRow(ctx, `SELECT data FROM file_chunks WHERE tenant = ? AND sha256 = ? AND seq = ?`, tenant, f.SHA256, seq).Scan(&b)
		if err != nil {
			return nil, notFound(err, "file %s: its content is gone", id)
		}
		return b, nil
	}), nil
}

// DeleteFile deletes a file, and its blob when no other file has it.
func (s *Store) DeleteFile(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(x *tx) error { return deleteFile(x, tenant, id) })
}

// deleteFile deletes a file in x, and its bytes when no other file of the
// tenant has them.
func deleteFile(x *tx, tenant, id string) error {
	var sum string
	err := x.queryRow(`DELETE FROM files WHERE tenant = ? AND id = ? RETURNING sha256`, tenant, id).Scan(&sum)
	if err != nil {
		return notFound(err, "file %s not found", id)
	}
	var others int
	if err := x.queryRow(`SELECT count(*) FROM files WHERE tenant = ? AND sha256 = ?`, tenant, sum).Scan(&others); err != nil {
		return dbErr(err)
	}
	if others > 0 {
		return nil
	}
	if _, err := x.exec(`DELETE FROM file_blobs WHERE tenant = ? AND sha256 = ?`, tenant, sum); err != nil {
		return dbErr(err)
	}
	_, err = x.exec(`DELETE FROM file_chunks WHERE tenant = ? AND sha256 = ?`, tenant, sum)
	return dbErr(err)
}
