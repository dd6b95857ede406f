package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

const idempotencyColumns = `key, scope, request_hash, status, body, created_at, expires_at`

// PutIdempotency stores r unless the tenant has a record for its scope and
// key still live at r.CreatedAt, and returns the stored record either way:
// of two racing requests with one key, both see the first one's record. The
// INSERT waits for a racing one to commit; the SELECT after it, a statement
// of its own, sees whichever row won.
func (s *Store) PutIdempotency(ctx context.Context, tenant string, r *forge.IdempotencyRecord) (*forge.IdempotencyRecord, error) {
	if err := storeutil.CheckIdempotency(r); err != nil {
		return nil, err
	}
	created := storeutil.OrNow(r.CreatedAt, s.now)
	var out *forge.IdempotencyRecord
	b := batch(tenant)
	b.Queue(`INSERT INTO idempotency AS i (tenant, scope, key, request_hash, status, body, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (tenant, scope, key) DO UPDATE SET request_hash = excluded.request_hash,
			status = excluded.status, body = excluded.body, created_at = excluded.created_at,
			expires_at = excluded.expires_at
		WHERE i.expires_at IS NOT NULL AND i.expires_at <= excluded.created_at`,
		tenant, r.Scope, r.Key, r.RequestHash, r.Status, r.Body, created, expiresAt(r.ExpiresAt))
	getIdempotency(b, tenant, r.Scope, r.Key, &out)
	if err := s.write(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// CompleteIdempotency records the answer of a record that has none yet and
// returns the stored record.
func (s *Store) CompleteIdempotency(ctx context.Context, tenant, scope, key string, status int, body []byte) (*forge.IdempotencyRecord, error) {
	if err := storeutil.CheckCompletion(status); err != nil {
		return nil, err
	}
	var out *forge.IdempotencyRecord
	b := batch(tenant)
	b.Queue(`UPDATE idempotency SET status = $1, body = $2
		WHERE tenant = $3 AND scope = $4 AND key = $5 AND status = 0`, status, body, tenant, scope, key)
	getIdempotency(b, tenant, scope, key, &out)
	if err := s.write(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// GetIdempotency returns the record for scope and key.
func (s *Store) GetIdempotency(ctx context.Context, tenant, scope, key string) (*forge.IdempotencyRecord, error) {
	var out *forge.IdempotencyRecord
	b := batch(tenant)
	getIdempotency(b, tenant, scope, key, &out)
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

func getIdempotency(b *pgx.Batch, tenant, scope, key string, out **forge.IdempotencyRecord) {
	b.Queue(`SELECT `+idempotencyColumns+` FROM idempotency WHERE tenant = $1 AND scope = $2 AND key = $3`,
		tenant, scope, key).QueryRow(func(r pgx.Row) error {
		var (
			rec     forge.IdempotencyRecord
			created time.Time
			expires *time.Time
		)
		if err := r.Scan(&rec.Key, &rec.Scope, &rec.RequestHash, &rec.Status, &rec.Body, &created, &expires); err != nil {
			return notFound(err, "no idempotency record")
		}
		rec.CreatedAt = utc(created)
		if expires != nil {
			rec.ExpiresAt = utc(*expires)
		}
		*out = &rec
		return nil
	})
}

// expiresAt encodes an expiry; NULL is never.
func expiresAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
