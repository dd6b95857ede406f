package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
)

var _ forge.LeaseStore = (*Store)(nil)

// RenewLeases extends the leases owner holds on turns, in one round trip
// (one UPDATE per tenant, each under its tenant's policy).
func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration, turns []forge.TurnRef) ([]string, error) {
	if len(turns) == 0 {
		return nil, nil
	}
	byTenant := map[string][]string{}
	var tenants []string
	for _, r := range turns {
		if _, ok := byTenant[r.Tenant]; !ok {
			tenants = append(tenants, r.Tenant)
		}
		byTenant[r.Tenant] = append(byTenant[r.Tenant], r.TurnID)
	}
	var held []string
	b := &pgx.Batch{}
	for _, tenant := range tenants {
		b.Queue(setTenant, tenant)
		b.Queue(`UPDATE turn_leases SET expires_at = now() + $4 WHERE tenant = $1 AND turn_id = ANY($2) AND owner = $3
			RETURNING turn_id`, tenant, byTenant[tenant], owner, ttl).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var id string
					if err := rows.Scan(&id); err != nil {
						return err
					}
					held = append(held, id)
				}
				return rows.Err()
			})
	}
	if err := s.write(ctx, b); err != nil {
		return nil, err
	}
	return held, nil
}

// ExpiredTurns lists the running turns whose lease expired (or that have
// none), across tenants, in two round trips: expired_turns() (a SECURITY
// DEFINER function, ids only), then the turns tenant by tenant through the
// ordinary policy.
func (s *Store) ExpiredTurns(ctx context.Context) ([]*forge.Turn, error) {
	return s.turnsByRef(ctx, `SELECT tenant, id FROM expired_turns()`)
}

// TakeLease makes owner the holder of a running turn's lease when it has
// expired or there is none: one round trip. A takeover waits for a batch
// of the old owner in flight (lease_held locks the row) and sees it.
func (s *Store) TakeLease(ctx context.Context, ref forge.TurnRef, owner string, ttl time.Duration) (bool, error) {
	var taken bool
	b := batch(ref.Tenant)
	b.Queue(`INSERT INTO turn_leases (tenant, turn_id, session_id, owner, expires_at)
		SELECT $1, $2, $3, $4, now() + $5 WHERE EXISTS (
			SELECT 1 FROM turns WHERE tenant = $1 AND id = $2 AND session_id = $3 AND status = 'running')
		ON CONFLICT (tenant, turn_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
			WHERE turn_leases.expires_at < now()
		RETURNING true`, ref.Tenant, ref.TurnID, ref.SessionID, owner, ttl).
		Query(func(rows pgx.Rows) error {
			taken = rows.Next()
			rows.Close()
			return rows.Err()
		})
	if err := s.write(ctx, b); err != nil {
		return false, err
	}
	return taken, nil
}
