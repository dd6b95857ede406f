package sqlite

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// CreateSession inserts s. The caller normally sets ID and timestamps; an
// empty ID or zero time is filled in (and written back to s). s.Usage is
// stored as the starting total (normally zero).
func (s *Store) CreateSession(ctx context.Context, ses *forge.Session) error {
	c, err := storeutil.NewSession(ses, s.ids, s.now)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(t *tx) error { return insertSession(t, &c) })
	if err != nil {
		return err
	}
	*ses = c
	return nil
}

// insertSession inserts a session row (CreateSession, a forum join, a
// monologue swap).
func insertSession(t *tx, c *forge.Session) error {
	settings, err := encJSON(c.Guards)
	if err != nil {
		return err
	}
	u := &c.Usage
	_, err = t.exec(`INSERT INTO sessions (tenant, id, kind, agent, title, main_thread_id, metadata,
		tip_turn_id, `+usageCols+`, created_at, updated_at, settings)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Tenant, c.ID, c.Kind, c.Agent, c.Title, c.MainThreadID, rawText(c.Metadata),
		strPtr(c.TipTurnID), u.InputTokens, u.OutputTokens, u.ReasoningTokens, u.CacheReadTokens,
		u.CacheWriteTokens, u.Cost, unixNano(c.CreatedAt), unixNano(c.UpdatedAt), settings)
	if _, ok := isUnique(err); ok {
		return forge.Errorf(forge.ErrConflict, "session %s already exists", c.ID)
	}
	return dbErr(err)
}

// usageCols are the columns of a session's usage total, in the order of
// forge.Usage's fields.
const usageCols = `usage_input_tokens, usage_output_tokens, usage_reasoning_tokens, usage_cache_read_tokens,
	usage_cache_write_tokens, usage_cost`

const sessionCols = `id, kind, agent, title, main_thread_id, metadata, tip_turn_id, ` + usageCols + `,
	created_at, updated_at, settings`

func scanSession(sc interface{ Scan(...any) error }, tenant string) (*forge.Session, error) {
	var (
		ses              forge.Session
		meta, tip, set   sql.NullString
		created, updated int64
	)
	u := &ses.Usage
	if err := sc.Scan(&ses.ID, &ses.Kind, &ses.Agent, &ses.Title, &ses.MainThreadID, &meta, &tip,
		&u.InputTokens, &u.OutputTokens, &u.ReasoningTokens, &u.CacheReadTokens, &u.CacheWriteTokens, &u.Cost,
		&created, &updated, &set); err != nil {
		return nil, err
	}
	ses.Tenant = tenant
	ses.Metadata = fromRawText(meta)
	ses.TipTurnID = fromNullStr(tip)
	if err := decJSON(set, &ses.Guards); err != nil {
		return nil, err
	}
	ses.CreatedAt, ses.UpdatedAt = fromNano(created), fromNano(updated)
	return &ses, nil
}

// sessionColCount is the number of sessionCols; the others are the
// indexes of columns the writes change.
var (
	sessionColCount   = colCount(sessionCols)
	sessionTipCol     = colIndex(sessionCols, "tip_turn_id")
	sessionUpdatedCol = colIndex(sessionCols, "updated_at")
	sessionUsageCol   = colIndex(sessionCols, "usage_input_tokens")
)

// SessionForTurn is GetSession: this Store owns its file and its row
// cache is written through, so what it returns is never stale.
func (s *Store) SessionForTurn(ctx context.Context, tenant, id string) (*forge.Session, error) {
	return s.GetSession(ctx, tenant, id)
}

// SessionWithTip is GetSession and GetTurn of the tip: local reads.
func (s *Store) SessionWithTip(ctx context.Context, tenant, id string) (*forge.Session, *forge.Turn, error) {
	return storeutil.SessionWithTip(ctx, s, tenant, id)
}

// GetSession returns a live session (from the row cache when it holds it).
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*forge.Session, error) {
	if vals, ok := s.rc.session(tenant, id); ok {
		return scanSession(valuesRow(vals), tenant)
	}
	epoch := s.rc.begin()
	vals, err := s.queryValues(ctx, sessionColCount, `SELECT `+sessionCols+` FROM sessions
		WHERE tenant = ? AND id = ? AND deleted_at IS NULL`, tenant, id)
	if err != nil {
		return nil, notFound(err, "session %s not found", id)
	}
	ses, err := scanSession(valuesRow(vals), tenant)
	if err != nil {
		return nil, dbErr(err)
	}
	s.rc.fillSession(epoch, tenant, id, vals)
	return ses, nil
}

// ListSessions lists live sessions matching q by last update, then id;
// the cursor is the last session's update time and id.
func (s *Store) ListSessions(ctx context.Context, tenant string, q forge.SessionQuery) ([]*forge.Session, string, error) {
	if err := storeutil.CheckSessionQuery(q); err != nil {
		return nil, "", err
	}
	cur, after, err := storeutil.ParseSessionCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	limit := storeutil.Limit(q.Limit, storeutil.DefaultLimit)
	var b strings.Builder
	args := []any{tenant}
	b.WriteString(`SELECT ` + sessionCols + ` FROM sessions WHERE tenant = ? AND deleted_at IS NULL`)
	cond := func(sql string, a ...any) {
		b.WriteString(" AND " + sql)
		args = append(args, a...)
	}
	if q.Agent != "" {
		cond(`agent = ?`, q.Agent)
	}
	if q.Kind != "" {
		cond(`kind = ?`, q.Kind)
	}
	switch q.Status {
	case forge.SessionRunning:
		cond(`EXISTS (SELECT 1 FROM turns t WHERE t.tenant = sessions.tenant AND t.session_id = sessions.id AND t.status = 'running')`)
	case forge.SessionIdle:
		cond(`NOT EXISTS (SELECT 1 FROM turns t WHERE t.tenant = sessions.tenant AND t.session_id = sessions.id AND t.status = 'running')`)
	}
	for _, k := range slices.Sorted(maps.Keys(q.Metadata)) {
		// A string value compares as itself, a number or boolean as its
		// JSON text; the key is checked plain (CheckSessionQuery).
		cond(`CASE json_type(metadata, '$."'||?||'"') WHEN 'text' THEN json_extract(metadata, '$."'||?||'"')
			WHEN 'true' THEN 'true' WHEN 'false' THEN 'false'
			ELSE CAST(json_extract(metadata, '$."'||?||'"') AS TEXT) END = ?`, k, k, k, q.Metadata[k])
	}
	if !q.UpdatedAfter.IsZero() {
		cond(`updated_at > ?`, unixNano(q.UpdatedAfter))
	}
	if !q.UpdatedBefore.IsZero() {
		cond(`updated_at < ?`, unixNano(q.UpdatedBefore))
	}
	dir := "DESC"
	if q.Ascending {
		dir = "ASC"
	}
	if after {
		op := "<"
		if q.Ascending {
			op = ">"
		}
		cond(`(updated_at, id) `+op+` (?, ?)`, cur.UpdatedAt, cur.ID)
	}
	b.WriteString(` ORDER BY updated_at ` + dir + `, id ` + dir + ` LIMIT ?`)
	args = append(args, limit+1)
	rows, err := s.query(ctx, b.String(), args...)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var out []*forge.Session
	for rows.Next() {
		ses, err := scanSession(rows, tenant)
		if err != nil {
			return nil, "", dbErr(err)
		}
		out = append(out, ses)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	out, next := storeutil.Page(out, limit, storeutil.SessionCursorOf)
	return out, next, nil
}

// DeleteSession soft-deletes a session: it disappears from reads, its rows
// stay (a turn still running in it can still be ended by recovery).
func (s *Store) DeleteSession(ctx context.Context, tenant, id string) error {
	return s.softDelete(ctx, tenant, id,
		`AND NOT EXISTS (SELECT 1 FROM turns WHERE tenant = ? AND session_id = ? AND status = 'running')`, []any{tenant, id},
		forge.Errorf(forge.ErrTurnInProgress, "session %s has a running turn; cancel it before deleting the session", id))
}

// softDelete sets a live session's deleted_at when cond (more of the
// WHERE clause, its arguments args) holds, and returns refused when only
// cond does not (ErrNotFound when there is no live session). The writer
// runs one transaction at a time: no turn begins between the check and
// the delete.
func (s *Store) softDelete(ctx context.Context, tenant, id, cond string, args []any, refused error) error {
	return s.write(ctx, func(t *tx) error {
		res, err := t.exec(`UPDATE sessions SET deleted_at = ? WHERE tenant = ? AND id = ? AND deleted_at IS NULL `+cond,
			append([]any{unixNano(s.now()), tenant, id}, args...)...)
		if err != nil {
			return dbErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return dbErr(err)
		} else if n == 0 {
			if err := liveSession(t, tenant, id); err != nil {
				return err
			}
			return refused
		}
		t.after(func() { s.rc.dropSession(tenant, id) })
		return nil
	})
}

// ReserveSeqs raises the session's reserved seq bound by n. It also works on
// a soft-deleted session, so that recovery can still write the closing
// events of a turn that was running when its session was deleted.
func (s *Store) ReserveSeqs(ctx context.Context, tenant, sessionID string, n int64) (int64, error) {
	if err := storeutil.CheckReserve(n); err != nil {
		return 0, err
	}
	var bound int64
	err := s.write(ctx, func(t *tx) error {
		err := t.queryRow(`UPDATE sessions SET seq_reserved = seq_reserved + ? WHERE tenant = ? AND id = ?
			RETURNING seq_reserved`, n, tenant, sessionID).Scan(&bound)
		return notFound(err, "session %s not found", sessionID)
	})
	return bound, err
}

// liveSession checks that a session exists for tenant and is not deleted.
func liveSession(t *tx, tenant, id string) error {
	var one int
	err := t.queryRow(`SELECT 1 FROM sessions WHERE tenant = ? AND id = ? AND deleted_at IS NULL`, tenant, id).Scan(&one)
	return notFound(err, "session %s not found", id)
}
