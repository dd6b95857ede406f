package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/forge-runtime/forge"
)

// Retention (API.md, "Retention and listing"): the sweeper expires idle
// sessions (a soft delete, as DELETE /v1/sessions/{id} does) and later
// purges soft-deleted sessions row by row, in transactions of a bounded
// size, so that the single writer is never held for long.

var _ forge.RetentionStore = (*Store)(nil)

// ExpiredSessions lists direct sessions idle for longer than their TTL.
func (s *Store) ExpiredSessions(ctx context.Context, q forge.ExpiryQuery) ([]forge.IdleSession, error) {
	now := unixNano(q.Now)
	floor, ok, err := s.shortestTTL(ctx, q)
	if err != nil || !ok {
		return nil, err
	}
	// The first bound walks sessions_idle up to the shortest TTL in force;
	// the second is each session's own.
	rows, err := s.query(ctx, `SELECT s.tenant, s.id, s.updated_at FROM sessions s
		LEFT JOIN agents a ON a.tenant = s.tenant AND a.name = s.agent AND a.deleted_at IS NULL
		WHERE s.deleted_at IS NULL AND s.kind = 'direct' AND s.updated_at < ?1
			AND (?3 > 0 OR coalesce(a.session_ttl, ?4) > 0)
			AND s.updated_at < ?2 - CASE WHEN ?3 > 0 THEN ?3 ELSE coalesce(a.session_ttl, ?4) END
			AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.tenant = s.tenant AND t.session_id = s.id
				AND t.status IN ('running', 'queued'))
			AND NOT EXISTS (SELECT 1 FROM schedules c WHERE c.tenant = s.tenant AND c.session_id = s.id)
		ORDER BY s.updated_at LIMIT ?5`,
		now-int64(floor), now, int64(q.OlderThan), int64(q.DefaultTTL), max(q.Limit, 1))
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []forge.IdleSession
	for rows.Next() {
		var r forge.IdleSession
		var updated int64
		if err := rows.Scan(&r.Tenant, &r.ID, &updated); err != nil {
			return nil, dbErr(err)
		}
		r.UpdatedAt = fromNano(updated)
		out = append(out, r)
	}
	return out, dbErr(rows.Err())
}

// shortestTTL is the shortest TTL any session is under; ok is false when
// none is (no default, no agent with a TTL).
func (s *Store) shortestTTL(ctx context.Context, q forge.ExpiryQuery) (time.Duration, bool, error) {
	if q.OlderThan > 0 {
		return q.OlderThan, true, nil
	}
	var agentMin sql.NullInt64
	if err := s.queryRow(ctx, `SELECT min(session_ttl) FROM agents WHERE deleted_at IS NULL AND session_ttl > 0`).
		Scan(&agentMin); err != nil {
		return 0, false, dbErr(err)
	}
	switch {
	case agentMin.Valid && (q.DefaultTTL <= 0 || time.Duration(agentMin.Int64) < q.DefaultTTL):
		return time.Duration(agentMin.Int64), true, nil
	case q.DefaultTTL > 0:
		return q.DefaultTTL, true, nil
	}
	return 0, false, nil
}

func scanRefs(rows *sql.Rows) ([]forge.SessionRef, error) {
	defer rows.Close()
	var out []forge.SessionRef
	for rows.Next() {
		var r forge.SessionRef
		if err := rows.Scan(&r.Tenant, &r.ID); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, r)
	}
	return out, dbErr(rows.Err())
}

// ExpireSession soft-deletes a session that is still idle: a racing turn
// either began first (and the session stays) or finds the session gone.
func (s *Store) ExpireSession(ctx context.Context, tenant, id string, idleBefore time.Time) error {
	return s.softDelete(ctx, tenant, id, `AND updated_at < ? AND NOT EXISTS (SELECT 1 FROM turns WHERE tenant = ? AND session_id = ?
		AND status IN ('running', 'queued'))`, []any{unixNano(idleBefore), tenant, id},
		forge.Errorf(forge.ErrConflict, "session %s is in use again; it is not expired", id))
}

// DeletedSessions lists sessions soft-deleted before before.
func (s *Store) DeletedSessions(ctx context.Context, before time.Time, limit int) ([]forge.SessionRef, error) {
	rows, err := s.query(ctx, `SELECT tenant, id FROM sessions WHERE deleted_at IS NOT NULL AND deleted_at < ?
		ORDER BY deleted_at LIMIT ?`, unixNano(before), max(limit, 1))
	if err != nil {
		return nil, dbErr(err)
	}
	return scanRefs(rows)
}

// purgeSteps delete a soft-deleted session's rows, children before their
// parents (the foreign keys), each step at most n rows of one table.
// ?1 is the tenant, ?2 the session, ?3 the number of rows.
var purgeSteps = []string{
	`DELETE FROM messages WHERE tenant = ?1 AND id IN (SELECT id FROM messages WHERE tenant = ?1 AND session_id = ?2 LIMIT ?3)`,
	`DELETE FROM events WHERE tenant = ?1 AND session_id = ?2 AND seq IN (SELECT seq FROM events
		WHERE tenant = ?1 AND session_id = ?2 LIMIT ?3)`,
	`DELETE FROM event_log WHERE tenant = ?1 AND session_id = ?2 AND first_seq IN (SELECT first_seq FROM event_log
		WHERE tenant = ?1 AND session_id = ?2 LIMIT ?3)`,
	`DELETE FROM participants WHERE rowid IN (SELECT rowid FROM participants WHERE tenant = ?1 AND session_id = ?2 LIMIT ?3)`,
	// Deliveries still pending go out first: the event happened.
	`DELETE FROM webhook_deliveries WHERE rowid IN (SELECT rowid FROM webhook_deliveries
		WHERE tenant = ?1 AND webhook_id IN (SELECT id FROM webhooks WHERE tenant = ?1) AND session_id = ?2
			AND status <> 'pending' LIMIT ?3)`,
	// A session's turns go in one statement: they chain to each other.
	`DELETE FROM turns WHERE tenant = ?1 AND session_id = ?2 AND ?3 > 0`,
}

// PurgeSession hard-deletes about budget rows of a soft-deleted session.
func (s *Store) PurgeSession(ctx context.Context, tenant, id string, budget int) (forge.PurgeResult, error) {
	budget = max(budget, 1)
	var res forge.PurgeResult
	err := s.write(ctx, func(t *tx) error {
		res = forge.PurgeResult{}
		var deleted sql.NullInt64
		err := t.queryRow(`SELECT deleted_at FROM sessions WHERE tenant = ? AND id = ?`, tenant, id).Scan(&deleted)
		if errors.Is(err, sql.ErrNoRows) {
			res.Done = true // purged already
			return nil
		} else if err != nil {
			return dbErr(err)
		}
		if !deleted.Valid {
			return forge.Errorf(forge.ErrInvalid, "session %s is live: only a deleted session is purged", id)
		}
		left := budget
		n, files, err := purgeParts(t, tenant, id, left)
		if err != nil {
			return err
		}
		res.Rows, res.Files, left = n, files, left-n
		for _, step := range purgeSteps {
			if left <= 0 {
				return nil
			}
			r, err := t.exec(step, tenant, id, left)
			if err != nil {
				return dbErr(err)
			}
			n, err := r.RowsAffected()
			if err != nil {
				return dbErr(err)
			}
			res.Rows, left = res.Rows+int(n), left-int(n)
		}
		if left <= 0 {
			return nil // the last step may have had more
		}
		if _, err := t.exec(`DELETE FROM sessions WHERE tenant = ? AND id = ?`, tenant, id); err != nil {
			return dbErr(err)
		}
		res.Rows++
		res.Done = true
		return nil
	})
	return res, err
}

// purgeParts deletes up to n parts of the session's messages, then the
// files that only they referenced (file parts, and the files of tool
// results); it returns the parts and files deleted.
// (CROSS JOIN keeps the session's messages the outer loop: left to itself
// the planner may walk every part of the tenant.)
func purgeParts(t *tx, tenant, session string, n int) (int, int, error) {
	rows, err := t.query(`SELECT p.rowid, CASE WHEN p.type = 'file' THEN json_extract(p.data, '$.file_id') END,
			CASE WHEN p.type = 'tool' AND json_type(p.data, '$.files') = 'array' THEN json_extract(p.data, '$.files') END
		FROM messages m CROSS JOIN parts p ON p.tenant = m.tenant AND p.message_id = m.id
		WHERE m.tenant = ? AND m.session_id = ? LIMIT ?`, tenant, session, n)
	if err != nil {
		return 0, 0, dbErr(err)
	}
	var ids []int64
	fileSet := map[string]bool{}
	for rows.Next() {
		var rowid int64
		var file, toolFiles sql.NullString
		if err := rows.Scan(&rowid, &file, &toolFiles); err != nil {
			rows.Close()
			return 0, 0, dbErr(err)
		}
		ids = append(ids, rowid)
		if file.Valid && file.String != "" {
			fileSet[file.String] = true
		}
		if toolFiles.Valid {
			var fs []struct {
				FileID string `json:"file_id"`
			}
			if json.Unmarshal([]byte(toolFiles.String), &fs) == nil {
				for _, f := range fs {
					if f.FileID != "" {
						fileSet[f.FileID] = true
					}
				}
			}
		}
	}
	if err := rows.Close(); err != nil {
		return 0, 0, dbErr(err)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, dbErr(err)
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	list, _ := json.Marshal(ids)
	if _, err := t.exec(`DELETE FROM parts WHERE rowid IN (SELECT value FROM json_each(?))`, string(list)); err != nil {
		return 0, 0, dbErr(err)
	}
	files := 0
	for f := range fileSet {
		var one int
		// A file part (parts_file) or a tool result (parts_tool_files)
		// that still names it keeps it.
		err := t.queryRow(`SELECT 1 FROM parts WHERE tenant = ? AND type = 'file' AND json_extract(data, '$.file_id') = ?
			UNION ALL
			SELECT 1 FROM parts p, json_each(p.data, '$.files') j
			WHERE p.tenant = ? AND p.type = 'tool' AND json_type(p.data, '$.files') = 'array'
				AND json_extract(j.value, '$.file_id') = ?
			LIMIT 1`, tenant, f, tenant, f).Scan(&one)
		if err == nil {
			continue // still referenced
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, 0, dbErr(err)
		}
		switch err := deleteFile(t, tenant, f); {
		case err == nil:
			files++
		case errors.Is(err, forge.ErrNotFound): // deleted already
		default:
			return 0, 0, err
		}
	}
	return len(ids), files, nil
}

// ReclaimSpace runs an incremental vacuum of up to pages pages, when the
// database was made with auto_vacuum = INCREMENTAL (every database this
// version creates); on others the freed pages stay free for reuse, and
// VACUUM (forge prune --vacuum) converts them.
func (s *Store) ReclaimSpace(ctx context.Context, pages int) (int, error) {
	var freed int
	err := s.write(ctx, func(t *tx) error {
		var mode, before, after int
		if err := t.queryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil {
			return dbErr(err)
		}
		if mode != 2 {
			return nil
		}
		if err := t.queryRow(`PRAGMA freelist_count`).Scan(&before); err != nil {
			return dbErr(err)
		}
		if before == 0 {
			return nil
		}
		if _, err := t.exec(`PRAGMA incremental_vacuum(` + strconv.Itoa(max(pages, 1)) + `)`); err != nil {
			return dbErr(err)
		}
		if err := t.queryRow(`PRAGMA freelist_count`).Scan(&after); err != nil {
			return dbErr(err)
		}
		freed = before - after
		return nil
	})
	return freed, err
}
