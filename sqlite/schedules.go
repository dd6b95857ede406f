package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var _ forge.ScheduleStore = (*Store)(nil)

const scheduleCols = `tenant, id, agent, cron, every, timezone, input, session_id, catch_up, paused, next_run_at, created_at, updated_at`

func scanSchedule(sc interface{ Scan(...any) error }) (*forge.Schedule, error) {
	var (
		s                      forge.Schedule
		input                  sql.NullString
		session                sql.NullString
		next, created, updated int64
	)
	if err := sc.Scan(&s.Tenant, &s.ID, &s.Agent, &s.Cron, &s.Every, &s.Timezone, &input, &session, &s.CatchUp,
		&s.Paused, &next, &created, &updated); err != nil {
		return nil, err
	}
	if err := decJSON(input, &s.Input); err != nil {
		return nil, err
	}
	s.SessionID = fromNullStr(session)
	s.NextRunAt, s.CreatedAt, s.UpdatedAt = fromNano(next), fromNano(created), fromNano(updated)
	return &s, nil
}

// CreateSchedule inserts s.
func (s *Store) CreateSchedule(ctx context.Context, sc *forge.Schedule) error {
	input, err := encJSON(sc.Input)
	if err != nil {
		return err
	}
	return s.write(ctx, func(x *tx) error {
		_, err := x.exec(`INSERT INTO schedules (`+scheduleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sc.Tenant, sc.ID, sc.Agent, sc.Cron, sc.Every, sc.Timezone, input, strPtr(sc.SessionID), sc.CatchUp,
			sc.Paused, unixNano(sc.NextRunAt), unixNano(sc.CreatedAt), unixNano(sc.UpdatedAt))
		if _, unique := isUnique(err); unique {
			return forge.Errorf(forge.ErrConflict, "schedule %s already exists", sc.ID)
		}
		return dbErr(err)
	})
}

// GetSchedule returns one schedule of tenant.
func (s *Store) GetSchedule(ctx context.Context, tenant, id string) (*forge.Schedule, error) {
	sc, err := scanSchedule(s.queryRow(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE tenant = ? AND id = ?`, tenant, id))
	if err != nil {
		return nil, notFound(err, "schedule %s not found", id)
	}
	return sc, nil
}

// ListSchedules lists tenant's schedules, oldest first; the cursor is the
// last id.
func (s *Store) ListSchedules(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Schedule, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	out, err := s.schedules(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE tenant = ? AND id > ? ORDER BY id LIMIT ?`,
		tenant, opts.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(sc *forge.Schedule) string { return sc.ID })
	return out, next, nil
}

func (s *Store) schedules(ctx context.Context, query string, args ...any) ([]*forge.Schedule, error) {
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []*forge.Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// UpdateSchedule rewrites sc's mutable fields while next_run_at is still
// expectNext.
func (s *Store) UpdateSchedule(ctx context.Context, sc *forge.Schedule, expectNext time.Time) error {
	input, err := encJSON(sc.Input)
	if err != nil {
		return err
	}
	return s.write(ctx, func(x *tx) error {
		var stored int64
		err := x.queryRow(`SELECT next_run_at FROM schedules WHERE tenant = ? AND id = ?`, sc.Tenant, sc.ID).Scan(&stored)
		if err != nil {
			return notFound(err, "schedule %s not found", sc.ID)
		}
		if stored != unixNano(expectNext) {
			return forge.Errorf(forge.ErrConflict, "schedule %s fired meanwhile; read it again", sc.ID)
		}
		_, err = x.exec(`UPDATE schedules SET cron = ?, every = ?, timezone = ?, input = ?, session_id = ?, catch_up = ?,
			paused = ?, next_run_at = ?, updated_at = ? WHERE tenant = ? AND id = ?`,
			sc.Cron, sc.Every, sc.Timezone, input, strPtr(sc.SessionID), sc.CatchUp, sc.Paused,
			unixNano(sc.NextRunAt), unixNano(sc.UpdatedAt), sc.Tenant, sc.ID)
		return dbErr(err)
	})
}

// DeleteSchedule deletes a schedule; its runs go with it (the foreign
// key cascades).
func (s *Store) DeleteSchedule(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(x *tx) error {
		var one int
		err := x.queryRow(`DELETE FROM schedules WHERE tenant = ? AND id = ? RETURNING 1`, tenant, id).Scan(&one)
		return notFound(err, "schedule %s not found", id)
	})
}

// DueSchedules lists every tenant's live schedules whose slot has come.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*forge.Schedule, error) {
	return s.schedules(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE paused = 0 AND next_run_at <= ?
		ORDER BY next_run_at, tenant, id LIMIT ?`, unixNano(now), storeutil.Limit(limit, storeutil.DefaultLimit))
}

// ClaimScheduleSlot moves next_run_at from c.Slot to c.Next and records
// c.Run in one transaction (the single writer serializes claims anyway;
// the compare-and-swap is what makes a second claim of the slot lose).
func (s *Store) ClaimScheduleSlot(ctx context.Context, c *forge.ScheduleClaim) (bool, error) {
	claimed := false
	err := s.write(ctx, func(x *tx) error {
		claimed = false // the writer may run fn again (writer.go)
		res, err := x.exec(`UPDATE schedules SET next_run_at = ? WHERE tenant = ? AND id = ? AND next_run_at = ? AND paused = 0`,
			unixNano(c.Next), c.Tenant, c.ScheduleID, unixNano(c.Slot))
		if err != nil {
			return dbErr(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return dbErr(err)
		}
		if r := c.Run; r != nil {
			_, err = x.exec(`INSERT INTO schedule_runs (tenant, schedule_id, slot, id, fired_at, session_id, turn_id, status, error)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				c.Tenant, c.ScheduleID, unixNano(r.Slot), r.ID, unixNano(r.FiredAt), strPtr(r.SessionID), strPtr(r.TurnID), r.Status, r.Error)
			if _, unique := isUnique(err); unique {
				return forge.Errorf(forge.ErrConflict, "schedule %s already has a run for slot %s", c.ScheduleID, r.Slot.Format(time.RFC3339Nano))
			}
			if err != nil {
				return dbErr(err)
			}
		}
		claimed = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return claimed, nil
}

// UpdateScheduleRun records a run's outcome.
func (s *Store) UpdateScheduleRun(ctx context.Context, r *forge.ScheduleRun) error {
	return s.write(ctx, func(x *tx) error {
		var one int
		err := x.queryRow(`UPDATE schedule_runs SET session_id = ?, turn_id = ?, status = ?, error = ?
			WHERE tenant = ? AND id = ? RETURNING 1`,
			strPtr(r.SessionID), strPtr(r.TurnID), r.Status, r.Error, r.Tenant, r.ID).Scan(&one)
		return notFound(err, "schedule run %s not found", r.ID)
	})
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
	err = s.read(ctx, func(x *tx) error {
		var one int
		if err := x.queryRow(`SELECT 1 FROM schedules WHERE tenant = ? AND id = ?`, tenant, scheduleID).Scan(&one); err != nil {
			return notFound(err, "schedule %s not found", scheduleID)
		}
		rows, err := x.query(`SELECT id, slot, fired_at, session_id, turn_id, status, error FROM schedule_runs
			WHERE tenant = ? AND schedule_id = ? AND slot > ? ORDER BY slot LIMIT ?`,
			tenant, scheduleID, unixNano(after), limit+1)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			r := &forge.ScheduleRun{Tenant: tenant, ScheduleID: scheduleID}
			var (
				slot, fired   int64
				session, turn sql.NullString
			)
			if err := rows.Scan(&r.ID, &slot, &fired, &session, &turn, &r.Status, &r.Error); err != nil {
				return dbErr(err)
			}
			r.Slot, r.FiredAt = fromNano(slot), fromNano(fired)
			r.SessionID, r.TurnID = fromNullStr(session), fromNullStr(turn)
			out = append(out, r)
		}
		return dbErr(rows.Err())
	})
	if err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, storeutil.RunCursor)
	return out, next, nil
}

// StaleRuns lists, across tenants, the runs still pending that were
// fired before before.
func (s *Store) StaleRuns(ctx context.Context, before time.Time, limit int) ([]*forge.ScheduleRun, error) {
	rows, err := s.query(ctx, `SELECT tenant, schedule_id, id, slot, fired_at, session_id, turn_id, status, error
		FROM schedule_runs WHERE status = 'pending' AND fired_at < ? ORDER BY fired_at LIMIT ?`,
		unixNano(before), storeutil.Limit(limit, storeutil.DefaultLimit))
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []*forge.ScheduleRun
	for rows.Next() {
		r := &forge.ScheduleRun{}
		var (
			slot, fired   int64
			session, turn sql.NullString
		)
		if err := rows.Scan(&r.Tenant, &r.ScheduleID, &r.ID, &slot, &fired, &session, &turn, &r.Status, &r.Error); err != nil {
			return nil, dbErr(err)
		}
		r.Slot, r.FiredAt = fromNano(slot), fromNano(fired)
		r.SessionID, r.TurnID = fromNullStr(session), fromNullStr(turn)
		out = append(out, r)
	}
	return out, dbErr(rows.Err())
}
