package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
)

// Retention (API.md, "Retention and listing"): the lists across tenants
// are SECURITY DEFINER functions returning ids only; expiring and purging
// run with the session's tenant set, through the ordinary policy
// (0013_retention.sql).

var _ forge.RetentionStore = (*Store)(nil)

// ExpiredSessions lists direct sessions idle for longer than their TTL.
func (s *Store) ExpiredSessions(ctx context.Context, q forge.ExpiryQuery) ([]forge.IdleSession, error) {
	floor := q.OlderThan
	if floor <= 0 {
		var agentMin *int64
		b := &pgx.Batch{}
		b.Queue(`SELECT shortest_session_ttl()`).QueryRow(func(r pgx.Row) error { return r.Scan(&agentMin) })
		if err := s.read(ctx, b); err != nil {
			return nil, err
		}
		floor = q.DefaultTTL
		if agentMin != nil && (floor <= 0 || time.Duration(*agentMin) < floor) {
			floor = time.Duration(*agentMin)
		}
		if floor <= 0 {
			return nil, nil // nothing has a TTL
		}
	}
	var out []forge.IdleSession
	b := &pgx.Batch{}
	b.Queue(`SELECT tenant, id, updated_at FROM expired_sessions($1, $2, $3, $4, $5)`,
		q.Now, q.Now.Add(-floor), int64(max(q.OlderThan, 0)), int64(max(q.DefaultTTL, 0)), max(q.Limit, 1)).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var r forge.IdleSession
				if err := rows.Scan(&r.Tenant, &r.ID, &r.UpdatedAt); err != nil {
					return err
				}
				r.UpdatedAt = utc(r.UpdatedAt)
				out = append(out, r)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// DeletedSessions lists sessions soft-deleted before before.
func (s *Store) DeletedSessions(ctx context.Context, before time.Time, limit int) ([]forge.SessionRef, error) {
	return s.refs(ctx, `SELECT tenant, id FROM deleted_sessions($1, $2)`, before, max(limit, 1))
}

func (s *Store) refs(ctx context.Context, query string, args ...any) ([]forge.SessionRef, error) {
	var out []forge.SessionRef
	b := &pgx.Batch{}
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r forge.SessionRef
			if err := rows.Scan(&r.Tenant, &r.ID); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// ExpireSession soft-deletes a session that is still idle; expire_session
// orders it with BeginTurn by the session's row lock.
func (s *Store) ExpireSession(ctx context.Context, tenant, id string, idleBefore time.Time) error {
	b := batch(tenant)
	b.Queue(`SELECT expire_session($1, $2, $3)`, id, idleBefore, s.now())
	return s.write(ctx, b)
}

// PurgeSession hard-deletes about budget rows of a soft-deleted session in
// one transaction (purge_session).
func (s *Store) PurgeSession(ctx context.Context, tenant, id string, budget int) (forge.PurgeResult, error) {
	var res forge.PurgeResult
	b := batch(tenant)
	b.Queue(`SELECT deleted, files, done FROM purge_session($1, $2)`, id, max(budget, 1)).
		QueryRow(func(r pgx.Row) error { return r.Scan(&res.Rows, &res.Files, &res.Done) })
	if err := s.write(ctx, b); err != nil {
		return forge.PurgeResult{}, err
	}
	return res, nil
}

// ReclaimSpace is a no-op: PostgreSQL's autovacuum reuses the space of
// the deleted rows.
func (s *Store) ReclaimSpace(ctx context.Context, pages int) (int, error) { return 0, nil }

// retentionLockKey is the advisory lock that makes one replica sweep at a
// time (an arbitrary constant: "forge retention").
const retentionLockKey = 0x666f7267_65726574

// TryRetentionLock takes the sweep's advisory lock on a connection of its
// own, held until release; ok is false while another replica holds it. A
// replica that dies loses its connection, and with it the lock.
func (s *Store) TryRetentionLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, dbErr(err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(retentionLockKey)).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, false, dbErr(err)
	}
	return func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(retentionLockKey))
		conn.Release()
	}, true, nil
}
