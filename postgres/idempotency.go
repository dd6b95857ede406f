package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
)

// PutIdempotency stores r unless the tenant already has a record for its
// scope and key, and returns the stored record either way: of two racing
// requests with one key, both see the first answer. The INSERT waits for a
// racing one to commit; the SELECT after it, a statement of its own, sees
// whichever row won.
func (s *Store) PutIdempotency(ctx context.Context, tenant string, r *forge.IdempotencyRecord) (*forge.IdempotencyRecord, error) {
	if r == nil || r.Key == "" {
		return nil, forge.Errorf(forge.ErrInvalid, "idempotency key is required")
	}
	created := orNow(r.CreatedAt, s.now)
	var out *forge.IdempotencyRecord
	b := batch(tenant)
	b.Queue(`INSERT INTO idempotency (tenant, scope, key, status, body, created_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (tenant, scope, key) DO NOTHING`, tenant, r.Scope, r.Key, r.Status, r.Body, created)
	getIdempotency(b, tenant, r.Scope, r.Key, &out)
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
	b.Queue(`SELECT key, scope, status, body, created_at FROM idempotency WHERE tenant = $1 AND scope = $2 AND key = $3`,
		tenant, scope, key).QueryRow(func(r pgx.Row) error {
		var (
			rec     forge.IdempotencyRecord
			created time.Time
		)
		if err := r.Scan(&rec.Key, &rec.Scope, &rec.Status, &rec.Body, &created); err != nil {
			return notFound(err, "no idempotency record")
		}
		rec.CreatedAt = utc(created)
		*out = &rec
		return nil
	})
}
