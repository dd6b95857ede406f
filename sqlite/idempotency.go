package sqlite

import (
	"context"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

const idempotencyColumns = `key, scope, request_hash, status, body, created_at, expires_at`

// PutIdempotency stores r unless the tenant has a record for its scope and
// key still live at r.CreatedAt, and returns the stored record either way:
// of two racing requests with one key, both see the first one's record.
func (s *Store) PutIdempotency(ctx context.Context, tenant string, r *forge.IdempotencyRecord) (*forge.IdempotencyRecord, error) {
	if err := storeutil.CheckIdempotency(r); err != nil {
		return nil, err
	}
	created := storeutil.OrNow(r.CreatedAt, s.now)
	var out *forge.IdempotencyRecord
	err := s.write(ctx, func(x *tx) error {
		if _, err := x.exec(`INSERT INTO idempotency (tenant, scope, key, request_hash, status, body, created_at, expires_at)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
			ON CONFLICT (tenant, scope, key) DO UPDATE SET request_hash = excluded.request_hash,
				status = excluded.status, body = excluded.body, created_at = excluded.created_at,
				expires_at = excluded.expires_at
			WHERE idempotency.expires_at != 0 AND idempotency.expires_at <= excluded.created_at`,
			tenant, r.Scope, r.Key, r.RequestHash, r.Status, r.Body, unixNano(created), expiresNano(r.ExpiresAt)); err != nil {
			return dbErr(err)
		}
		var err error
		out, err = getIdempotency(x.queryRow(`SELECT `+idempotencyColumns+` FROM idempotency
			WHERE tenant = ? AND scope = ? AND key = ?`, tenant, r.Scope, r.Key))
		return err
	})
	return out, err
}

// CompleteIdempotency records the answer of a record that has none yet and
// returns the stored record.
func (s *Store) CompleteIdempotency(ctx context.Context, tenant, scope, key string, status int, body []byte) (*forge.IdempotencyRecord, error) {
	if err := storeutil.CheckCompletion(status); err != nil {
		return nil, err
	}
	var out *forge.IdempotencyRecord
	err := s.write(ctx, func(x *tx) error {
		if _, err := x.exec(`UPDATE idempotency SET status = ?, body = ?
			WHERE tenant = ? AND scope = ? AND key = ? AND status = 0`,
			status, body, tenant, scope, key); err != nil {
			return dbErr(err)
		}
		var err error
		out, err = getIdempotency(x.queryRow(`SELECT `+idempotencyColumns+` FROM idempotency
			WHERE tenant = ? AND scope = ? AND key = ?`, tenant, scope, key))
		return err
	})
	return out, err
}

// GetIdempotency returns the record for scope and key.
func (s *Store) GetIdempotency(ctx context.Context, tenant, scope, key string) (*forge.IdempotencyRecord, error) {
	return getIdempotency(s.queryRow(ctx, `SELECT `+idempotencyColumns+` FROM idempotency
		WHERE tenant = ? AND scope = ? AND key = ?`, tenant, scope, key))
}

func getIdempotency(r row) (*forge.IdempotencyRecord, error) {
	var (
		rec              forge.IdempotencyRecord
		created, expires int64
	)
	if err := r.Scan(&rec.Key, &rec.Scope, &rec.RequestHash, &rec.Status, &rec.Body, &created, &expires); err != nil {
		return nil, notFound(err, "no idempotency record")
	}
	rec.CreatedAt = fromNano(created)
	if expires != 0 {
		rec.ExpiresAt = fromNano(expires)
	}
	return &rec, nil
}

// expiresNano encodes an expiry; 0 is never.
func expiresNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return unixNano(t)
}
