package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// API keys. Tenant-scoped calls go through the tenant policy like every
// other table. The lookups that cannot know the tenant (a request's key,
// whether any key exists) call the SECURITY DEFINER functions
// api_key_by_hash and api_keys_exist. Calls for forge.AllTenants are an
// operator's: they run as the owner (whose policy on api_keys admits every
// row), which only an administrator's URL may become.

// CreateKey makes a key for tenant; only its hash is stored.
func (s *Store) CreateKey(ctx context.Context, tenant, name string) (*forge.APIKey, string, error) {
	k, secret, hash, err := storeutil.NewKey(s.ids, s.now(), tenant, name)
	if err != nil {
		return nil, "", err
	}
	b := batch(tenant)
	b.Queue(`INSERT INTO api_keys (tenant, id, name, key_hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
		k.Tenant, k.ID, k.Name, hash, k.CreatedAt)
	if err := s.write(ctx, b); err != nil {
		return nil, "", err
	}
	return k, secret, nil
}

// keyBatch starts a batch for tenant's keys, or for every tenant's as the
// owner.
func (s *Store) keyBatch(tenant string) (*pgx.Batch, error) {
	if tenant != forge.AllTenants {
		return batch(tenant), nil
	}
	if !s.admin {
		return nil, forge.Errorf(forge.ErrUnauthorized,
			"every tenant's keys can only be listed or revoked with an administrator's database URL: name a tenant")
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('role', $1, true)`, s.roles.owner)
	return b, nil
}

func scanKey(r pgx.Row) (*forge.APIKey, error) {
	var (
		k       forge.APIKey
		created time.Time
		revoked *time.Time
	)
	if err := r.Scan(&k.Tenant, &k.ID, &k.Name, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt = utc(created), utcPtr(revoked)
	return &k, nil
}

// ListKeys lists tenant's keys (every tenant's for forge.AllTenants),
// oldest first; the cursor is the last id.
func (s *Store) ListKeys(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.APIKey, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	b, err := s.keyBatch(tenant)
	if err != nil {
		return nil, "", err
	}
	var out []*forge.APIKey
	b.Queue(`SELECT tenant, id, name, created_at, revoked_at FROM api_keys
		WHERE ($1 = '*' OR tenant = $1) AND id > $2 ORDER BY id LIMIT $3`, tenant, opts.Cursor, limit+1).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				k, err := scanKey(rows)
				if err != nil {
					return err
				}
				out = append(out, k)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(k *forge.APIKey) string { return k.ID })
	return out, next, nil
}

// RevokeKey revokes tenant's key id (any tenant's for forge.AllTenants);
// the first revocation time stays.
func (s *Store) RevokeKey(ctx context.Context, tenant, id string) error {
	b, err := s.keyBatch(tenant)
	if err != nil {
		return err
	}
	b.Queue(`UPDATE api_keys SET revoked_at = coalesce(revoked_at, $3) WHERE ($1 = '*' OR tenant = $1) AND id = $2`,
		tenant, id, s.now()).Exec(func(ct pgconnTag) error {
		if ct.RowsAffected() == 0 {
			return forge.Errorf(forge.ErrNotFound, "key %s not found", id)
		}
		return nil
	})
	return s.write(ctx, b)
}

// KeyByHash returns the live key with that hash, whatever its tenant.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (*forge.APIKey, error) {
	var k forge.APIKey
	b := &pgx.Batch{}
	b.Queue(`SELECT tenant, id, name, created_at FROM api_key_by_hash($1)`, hash).QueryRow(func(r pgx.Row) error {
		var created time.Time
		if err := r.Scan(&k.Tenant, &k.ID, &k.Name, &created); err != nil {
			return notFound(err, "no such key")
		}
		k.CreatedAt = utc(created)
		return nil
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return &k, nil
}

// HasKeys reports whether any live key exists.
func (s *Store) HasKeys(ctx context.Context) (bool, error) {
	var any bool
	b := &pgx.Batch{}
	b.Queue(`SELECT api_keys_exist()`).QueryRow(func(r pgx.Row) error { return r.Scan(&any) })
	if err := s.read(ctx, b); err != nil {
		return false, err
	}
	return any, nil
}
