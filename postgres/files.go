package postgres

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var _ forge.FileStore = (*Store)(nil)

// CreateFile stores f. Each chunk is its own transaction (no statement
// holds a whole file; a chunk is idempotent: the same tenant, hash and
// index always hold the same bytes); the blob and file rows follow in one
// transaction that upserts the blob row first, which waits for a
// DeleteFile holding it, and then checks that every chunk is there.
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
		b := batch(c.Tenant)
		b.Queue(`INSERT INTO file_blobs (tenant, sha256, bytes, chunks, created_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant, sha256) DO UPDATE SET chunks = excluded.chunks`,
			c.Tenant, c.SHA256, c.Bytes, chunks, c.CreatedAt)
		b.Queue(`SELECT file_chunks_present($1, $2)`, c.SHA256, chunks)
		b.Queue(`INSERT INTO files (tenant, id, filename, mime_type, bytes, sha256, purpose, width, height, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			c.Tenant, c.ID, c.Filename, c.MimeType, c.Bytes, c.SHA256, c.Purpose, c.Width, c.Height, c.CreatedAt)
		err = s.write(ctx, b)
		if errors.Is(err, forge.ErrConflict) && attempt == 0 {
			continue
		}
		if err != nil {
			return err
		}
		*f = c
		return nil
	}
}

func (s *Store) blobChunks(ctx context.Context, tenant, sum string) (int, error) {
	var n int
	b := batch(tenant)
	b.Queue(`SELECT count(*) FROM file_chunks WHERE tenant = $1 AND sha256 = $2`, tenant, sum).
		QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
	if err := s.read(ctx, b); err != nil {
		return 0, err
	}
	return n, nil
}

// putChunks writes content's chunks; on content that is not what c
// declares, it removes the chunks no blob row claims.
func (s *Store) putChunks(ctx context.Context, c *forge.File, content io.Reader) error {
	err := storeutil.WriteChunks(content, c, func(seq int, data []byte) error {
		b := batch(c.Tenant)
		b.Queue(`INSERT INTO file_chunks (tenant, sha256, seq, data) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
			c.Tenant, c.SHA256, seq, data)
		return s.write(ctx, b)
	})
	if err != nil {
		b := batch(c.Tenant)
		b.Queue(`DELETE FROM file_chunks WHERE tenant = $1 AND sha256 = $2
			AND NOT EXISTS (SELECT 1 FROM file_blobs WHERE tenant = $1 AND sha256 = $2)`, c.Tenant, c.SHA256)
		_ = s.write(context.WithoutCancel(ctx), b)
	}
	return err
}

const fileCols = `tenant, id, filename, mime_type, bytes, sha256, purpose, width, height, created_at`

func scanFile(r pgx.Row) (*forge.File, error) {
	var (
		f       forge.File
		created time.Time
	)
	if err := r.Scan(&f.Tenant, &f.ID, &f.Filename, &f.MimeType, &f.Bytes, &f.SHA256, &f.Purpose, &f.Width, &f.Height, &created); err != nil {
		return nil, err
	}
	f.CreatedAt = utc(created)
	return &f, nil
}

// GetFile returns a file's metadata.
func (s *Store) GetFile(ctx context.Context, tenant, id string) (*forge.File, error) {
	var f *forge.File
	b := batch(tenant)
	b.Queue(`SELECT `+fileCols+` FROM files WHERE tenant = $1 AND id = $2`, tenant, id).QueryRow(func(r pgx.Row) error {
		var err error
		f, err = scanFile(r)
		return notFound(err, "file %s not found", id)
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return f, nil
}

// ListFiles lists a tenant's files, oldest first; the cursor is the last id.
func (s *Store) ListFiles(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.File, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.File
	b := batch(tenant)
	b.Queue(`SELECT `+fileCols+` FROM files WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`, tenant, opts.Cursor, limit+1).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				f, err := scanFile(rows)
				if err != nil {
					return err
				}
				out = append(out, f)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
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
		var data []byte
		b := batch(tenant)
		b.Queue(`SELECT data FROM file_chunks WHERE tenant = $1 AND sha256 = $2 AND seq = $3`, tenant, f.SHA256, seq).
			QueryRow(func(r pgx.Row) error { return notFound(r.Scan(&data), "file %s: its content is gone", id) })
		if err := s.read(ctx, b); err != nil {
			return nil, err
		}
		return data, nil
	}), nil
}

// DeleteFile deletes a file, and its blob when no other file has it. The
// blob row is locked first, so a CreateFile of the same bytes either
// commits before (and the blob stays) or sees its chunks gone and writes
// them again.
func (s *Store) DeleteFile(ctx context.Context, tenant, id string) error {
	f, err := s.GetFile(ctx, tenant, id)
	if err != nil {
		return err
	}
	b := batch(tenant)
	b.Queue(`SELECT 1 FROM file_blobs WHERE tenant = $1 AND sha256 = $2 FOR UPDATE`, tenant, f.SHA256)
	b.Queue(`DELETE FROM files WHERE tenant = $1 AND id = $2`, tenant, id).Exec(func(ct pgconnTag) error {
		if ct.RowsAffected() == 0 {
			return forge.Errorf(forge.ErrNotFound, "file %s not found", id)
		}
		return nil
	})
	gone := `NOT EXISTS (SELECT 1 FROM files WHERE tenant = $1 AND sha256 = $2)`
	b.Queue(`DELETE FROM file_chunks WHERE tenant = $1 AND sha256 = $2 AND `+gone, tenant, f.SHA256)
	b.Queue(`DELETE FROM file_blobs WHERE tenant = $1 AND sha256 = $2 AND `+gone, tenant, f.SHA256)
	return s.write(ctx, b)
}
