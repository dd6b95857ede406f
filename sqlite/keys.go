package sqlite

import (
	"context"
	"database/sql"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var _ forge.KeyStore = (*Store)(nil)

// CreateKey makes a key for tenant; only its hash is stored.
func (s *Store) CreateKey(ctx context.Context, tenant, name string) (*forge.APIKey, string, error) {
	k, secret, hash, err := storeutil.NewKey(s.ids, s.now(), tenant, name)
	if err != nil {
		return nil, "", err
	}
	err = s.write(ctx, func(x *tx) error {
		_, err := x.exec(`INSERT INTO api_keys (tenant, id, name, key_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
			k.Tenant, k.ID, k.Name, hash, unixNano(k.CreatedAt))
		return dbErr(err)
	})
	if err != nil {
		return nil, "", err
	}
	return k, secret, nil
}

const keyCols = `tenant, id, name, created_at, revoked_at`

func scanKey(sc interface{ Scan(...any) error }) (*forge.APIKey, error) {
	var (
		k       forge.APIKey
		created int64
		revoked sql.NullInt64
	)
	if err := sc.Scan(&k.Tenant, &k.ID, &k.Name, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt = fromNano(created), fromNullNano(revoked)
	return &k, nil
}

// ListKeys lists tenant's keys (every tenant's for forge.AllTenants),
// oldest first; the cursor is the last id.
func (s *Store) ListKeys(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.APIKey, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	rows, err := s.query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE (?1 = '*' OR tenant = ?1) AND id > ?2
		ORDER BY id LIMIT ?3`, tenant, opts.Cursor, limit+1)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var out []*forge.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, "", dbErr(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	out, next := storeutil.Page(out, limit, func(k *forge.APIKey) string { return k.ID })
	return out, next, nil
}

// RevokeKey revokes tenant's key id (any tenant's for forge.AllTenants);
// the first revocation time stays.
func (s *Store) RevokeKey(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(x *tx) error {
		var one int
		err := x.queryRow(`UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?1)
			WHERE (?2 = '*' OR tenant = ?2) AND id = ?3 RETURNING 1`, unixNano(s.now()), tenant, id).Scan(&one)
		return notFound(err, "key %s not found", id)
	})
}

// KeyByHash returns the live key with that hash, whatever its tenant.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (*forge.APIKey, error) {
	k, err := scanKey(s.queryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL`, hash))
	if err != nil {
		return nil, notFound(err, "no such key")
	}
	return k, nil
}

// HasKeys reports whether any live key exists.
func (s *Store) HasKeys(ctx context.Context) (bool, error) {
	var any bool
	if err := s.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE revoked_at IS NULL)`).Scan(&any); err != nil {
		return false, dbErr(err)
	}
	return any, nil
}
