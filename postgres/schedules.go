package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var _ forge.ScheduleStore = (*Store)(nil)

const scheduleCols = `tenant, id, agent, cron, every, timezone, input, session_id, catch_up, paused, next_run_at, created_at, updated_at`

func scanSchedule(r pgx.Row) (*forge.Schedule, error) {
	var (
		s                      forge.Schedule
		input                  *string
		next, created, updated time.Time
	)
	if err := r.Scan(&s.Tenant, &s.ID, &s.Agent, &s.Cron, &s.Every, &s.Timezone, &input, &s.SessionID, &s.CatchUp,
		&s.Paused, &next, &created, &updated); err != nil {
		return nil, err
	}
	if err := decJSON(input, &s.Input); err != nil {
		return nil, err
	}
	s.NextRunAt, s.CreatedAt, s.UpdatedAt = utc(next), utc(created), utc(updated)
	return &s, nil
}

func scanSchedules(rows pgx.Rows, out *[]*forge.Schedule) error {
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return err
		}
		*out = append(*out, s)
	}
	return rows.Err()
}

// CreateSchedule inserts s.
func (s *Store) CreateSchedule(ctx context.Context, sc *forge.Schedule) error {
	input, err := encJSON(sc.Input)
	if err != nil {
		return err
	}
	if input == nil {
		empty := "[]"
		input = &empty
	}
	b := batch(sc.Tenant)
	b.Queue(`INSERT INTO schedules (`+scheduleCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		sc.Tenant, sc.ID, sc.Agent, sc.Cron, sc.Every, sc.Timezone, input, sc.SessionID, sc.CatchUp,
		sc.Paused, sc.NextRunAt, sc.CreatedAt, sc.UpdatedAt)
	return s.write(ctx, b)
}

// GetSchedule returns one schedule of tenant.
func (s *Store) GetSchedule(ctx context.Context, tenant, id string) (*forge.Schedule, error) {
	var sc *forge.Schedule
	b := batch(tenant)
	b.Queue(`SELECT `+scheduleCols+` FROM schedules WHERE tenant = $1 AND id = $2`, tenant, id).QueryRow(func(r pgx.Row) error {
		var err error
		sc, err = scanSchedule(r)
		return notFound(err, "schedule %s not found", id)
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return sc, nil
}

// ListSchedules lists tenant's schedules, oldest first; the cursor is the
// last id.
func (s *Store) ListSchedules(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Schedule, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Schedule
	b := batch(tenant)
	b.Queue(`SELECT `+scheduleCols+` FROM schedules WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`, tenant, opts.Cursor, limit+1).
		Query(func(rows pgx.Rows) error { return scanSchedules(rows, &out) })
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(sc *forge.Schedule) string { return sc.ID })
	return out, next, nil
}

// UpdateSchedule rewrites sc's mutable fields while next_run_at is still
// expectNext.
func (s *Store) UpdateSchedule(ctx context.Context, sc *forge.Schedule, expectNext time.Time) error {
	input, err := encJSON(sc.Input)
	if err != nil {
		return err
	}
	if input == nil {
		empty := "[]"
		input = &empty
	}
	b := batch(sc.Tenant)
	b.Queue(`WITH u AS (
			UPDATE schedules SET cron = $3, every = $4, timezone = $5, input = $6, session_id = $7, catch_up = $8,
				paused = $9, next_run_at = $10, updated_at = $11
			WHERE tenant = $1 AND id = $2 AND next_run_at = $12 RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM u), EXISTS (SELECT 1 FROM schedules WHERE tenant = $1 AND id = $2)`,
		sc.Tenant, sc.ID, sc.Cron, sc.Every, sc.Timezone, input, sc.SessionID, sc.CatchUp, sc.Paused,
		sc.NextRunAt, sc.UpdatedAt, expectNext).QueryRow(func(r pgx.Row) error {
		var updated, exists bool
		if err := r.Scan(&updated, &exists); err != nil {
			return err
		}
		switch {
		case !exists:
			return forge.Errorf(forge.ErrNotFound, "schedule %s not found", sc.ID)
		case !updated:
			return forge.Errorf(forge.ErrConflict, "schedule %s fired meanwhile; read it again", sc.ID)
		}
		return nil
	})
	return s.write(ctx, b)
}

// DeleteSchedule deletes a schedule; its runs go with it (the foreign
// key cascades).
func (s *Store) DeleteSchedule(ctx context.Context, tenant, id string) error {
	b := batch(tenant)
	b.Queue(`DELETE FROM schedules WHERE tenant = $1 AND id = $2`, tenant, id).Exec(func(ct pgconnTag) error {
		if ct.RowsAffected() == 0 {
			return forge.Errorf(forge.ErrNotFound, "schedule %s not found", id)
		}
		return nil
	})
	return s.write(ctx, b)
}

// DueSchedules lists every tenant's live schedules whose slot has come:
// their ids through due_schedules (the path across tenants), then the
// rows tenant by tenant through the ordinary policy.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*forge.Schedule, error) {
	var out []*forge.Schedule
	err := s.byRef(ctx, `SELECT tenant, id FROM due_schedules($1, $2)`, func(b *pgx.Batch, tenant string, ids []string) {
		b.Queue(`SELECT `+scheduleCols+` FROM schedules WHERE tenant = $1 AND id = ANY($2) AND NOT paused AND next_run_at <= $3`,
			tenant, ids, now).Query(func(rows pgx.Rows) error { return scanSchedules(rows, &out) })
	}, now, storeutil.Limit(limit, storeutil.DefaultLimit))
	return out, err
}

// ClaimScheduleSlot moves next_run_at from c.Slot to c.Next and records
// c.Run in one statement. Of concurrent claims, the second waits for the
// first's row lock, then finds next_run_at moved and updates nothing.
func (s *Store) ClaimScheduleSlot(ctx context.Context, c *forge.ScheduleClaim) (bool, error) {
	claimed := false
	tag := func(ct pgconnTag) error {
		claimed = ct.RowsAffected() > 0
		return nil
	}
	b := batch(c.Tenant)
	const cas = `UPDATE schedules SET next_run_at = $3 WHERE tenant = $1 AND id = $2 AND next_run_at = $4 AND NOT paused`
	if r := c.Run; r != nil {
		b.Queue(`WITH c AS (`+cas+` RETURNING id)
			INSERT INTO schedule_runs (tenant, schedule_id, slot, id, fired_at, session_id, turn_id, status, error)
			SELECT $1, $2, $5, $6, $7, $8, $9, $10, $11 FROM c`,
			c.Tenant, c.ScheduleID, c.Next, c.Slot, r.Slot, r.ID, r.FiredAt, r.SessionID, r.TurnID, r.Status, r.Error).Exec(tag)
	} else {
		b.Queue(cas, c.Tenant, c.ScheduleID, c.Next, c.Slot).Exec(tag)
	}
	if err := s.write(ctx, b); err != nil {
		return false, err
	}
	return claimed, nil
}

// UpdateScheduleRun records a run's outcome.
func (s *Store) UpdateScheduleRun(ctx context.Context, r *forge.ScheduleRun) error {
	b := batch(r.Tenant)
	b.Queue(`UPDATE schedule_runs SET session_id = $3, turn_id = $4, status = $5, error = $6 WHERE tenant = $1 AND id = $2`,
		r.Tenant, r.ID, r.SessionID, r.TurnID, r.Status, r.Error).Exec(func(ct pgconnTag) error {
		if ct.RowsAffected() == 0 {
			return forge.Errorf(forge.ErrNotFound, "schedule run %s not found", r.ID)
		}
		return nil
	})
	return s.write(ctx, b)
}

// ListScheduleRuns lists a schedule's runs by slot; the cursor is the
// last slot.
func (s *Store) ListScheduleRuns(ctx context.Context, tenant, scheduleID string, opts forge.ListOptions) ([]*forge.ScheduleRun, string, error) {
	after, err := storeutil.ParseRunCursor(opts.Cursor)
	if err != nil {
		return nil, "", err
	}
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.ScheduleRun
	b := batch(tenant)
	b.Queue(`SELECT check_found(EXISTS (SELECT 1 FROM schedules WHERE tenant = $1 AND id = $2), $3)`,
		tenant, scheduleID, "schedule "+scheduleID+" not found")
	b.Queue(`SELECT id, slot, fired_at, session_id, turn_id, status, error FROM schedule_runs
		WHERE tenant = $1 AND schedule_id = $2 AND slot > $3 ORDER BY slot LIMIT $4`, tenant, scheduleID, after, limit+1).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				r := &forge.ScheduleRun{Tenant: tenant, ScheduleID: scheduleID}
				var slot, fired time.Time
				if err := rows.Scan(&r.ID, &slot, &fired, &r.SessionID, &r.TurnID, &r.Status, &r.Error); err != nil {
					return err
				}
				r.Slot, r.FiredAt = utc(slot), utc(fired)
				out = append(out, r)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, storeutil.RunCursor)
	return out, next, nil
}

// StaleRuns lists, across tenants (one definer function, then each
// tenant's rows), the runs still pending that were fired before before.
func (s *Store) StaleRuns(ctx context.Context, before time.Time, limit int) ([]*forge.ScheduleRun, error) {
	var out []*forge.ScheduleRun
	err := s.byRef(ctx, `SELECT tenant, id FROM stale_schedule_runs($1, $2)`, func(b *pgx.Batch, tenant string, ids []string) {
		b.Queue(`SELECT schedule_id, id, slot, fired_at, session_id, turn_id, status, error FROM schedule_runs
			WHERE tenant = $1 AND id = ANY($2) AND status = 'pending' ORDER BY fired_at`, tenant, ids).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					r := &forge.ScheduleRun{Tenant: tenant}
					var slot, fired time.Time
					if err := rows.Scan(&r.ScheduleID, &r.ID, &slot, &fired, &r.SessionID, &r.TurnID, &r.Status, &r.Error); err != nil {
						return err
					}
					r.Slot, r.FiredAt = utc(slot), utc(fired)
					out = append(out, r)
				}
				return rows.Err()
			})
	}, before, storeutil.Limit(limit, storeutil.DefaultLimit))
	return out, err
}
