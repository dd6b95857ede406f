package sqlite

import (
	"context"

	"github.com/forge-runtime/forge"
)

// PutIdempotency stores r unless the tenant already has a record for its
// scope and key, and returns the stored record either way: of two racing
// requests with one key, both see the first answer.
func (s *Store) PutIdempotency(ctx context.Context, tenant string, r *forge.IdempotencyRecord) (*forge.IdempotencyRecord, error) {
	if r == nil || r.Key == "" {
		return nil, forge.Errorf(forge.ErrInvalid, "idempotency key is required")
	}
	created := orNow(r.CreatedAt, s.now)
	var out *forge.IdempotencyRecord
	err := s.write(ctx, func(x *tx) error {
		if _, err := x.exec(`INSERT INTO idempotency (tenant, scope, key, status, body, created_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, scope, key) DO NOTHING`,
			tenant, r.Scope, r.Key, r.Status, r.Body, unixNano(created)); err != nil {
			return dbErr(err)
		}
		var err error
		out, err = getIdempotency(x.queryRow(`SELECT key, scope, status, body, created_at FROM idempotency
			WHERE tenant = ? AND scope = ? AND key = ?`, tenant, r.Scope, r.Key))
		return err
	})
	return out, err
}

// GetIdempotency returns the record for scope and key.
func (s *Store) GetIdempotency(ctx context.Context, tenant, scope, key string) (*forge.IdempotencyRecord, error) {
	return getIdempotency(s.queryRow(ctx, `SELECT key, scope, status, body, created_at FROM idempotency
		WHERE tenant = ? AND scope = ? AND key = ?`, tenant, scope, key))
}

func getIdempotency(r row) (*forge.IdempotencyRecord, error) {
	var (
		rec     forge.IdempotencyRecord
		created int64
	)
	if err := r.Scan(&rec.Key, &rec.Scope, &rec.Status, &rec.Body, &created); err != nil {
		return nil, notFound(err, "no idempotency record")
	}
	rec.CreatedAt = fromNano(created)
	return &rec, nil
}
