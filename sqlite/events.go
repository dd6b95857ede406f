package sqlite

import (
	"context"
	"database/sql"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// encodeEvents encodes stored events; they all belong to the write's
// session.
func (s *Store) encodeEvents(sc scope, evs []forge.Event) ([][]any, error) {
	now := s.now()
	out := make([][]any, 0, len(evs))
	for _, e := range evs {
		if err := storeutil.CheckEvent(&e); err != nil {
			return nil, err
		}
		created := storeutil.Or(e.CreatedAt, now)
		out = append(out, []any{sc.tenant, sc.session, e.Seq, e.ID, e.Type, strPtr(e.TurnID), strPtr(e.ThreadID),
			unixNano(created), rawText(e.Data)})
	}
	return out, nil
}

var eventInsert = newMultiInsert("event seq", `INSERT INTO events (tenant, session_id, seq, id, type,
	turn_id, thread_id, created_at, data) VALUES `, 9, "")

// insertEvents appends to the log; a seq used twice is ErrConflict (seqs
// are never reused).
func insertEvents(x *tx, rows [][]any) error { return eventInsert.exec(x, rows) }

// ListEvents returns stored events of a live session in seq order.
func (s *Store) ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error) {
	limit := storeutil.Limit(q.Limit, storeutil.DefaultEventLimit)
	before := storeutil.EventsBefore(q.Before)
	var out []forge.Event
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, q.SessionID); err != nil {
			return err
		}
		query := `SELECT seq, id, type, session_id, turn_id, thread_id, created_at, data FROM events
			WHERE tenant = ? AND session_id = ? AND seq > ? AND seq < ? ORDER BY seq LIMIT ?`
		args := []any{tenant, q.SessionID, q.After, before, limit}
		if q.TurnID != "" {
			// Uses events_turn: one turn's events without scanning the session.
			query = `SELECT seq, id, type, session_id, turn_id, thread_id, created_at, data FROM events
				WHERE tenant = ? AND turn_id = ? AND session_id = ? AND seq > ? AND seq < ? ORDER BY seq LIMIT ?`
			args = []any{tenant, q.TurnID, q.SessionID, q.After, before, limit}
		}
		rows, err := x.query(query, args...)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e              forge.Event
				turn, thr, dat sql.NullString
				created        int64
			)
			if err := rows.Scan(&e.Seq, &e.ID, &e.Type, &e.SessionID, &turn, &thr, &created, &dat); err != nil {
				return dbErr(err)
			}
			e.TurnID, e.ThreadID = fromNullStr(turn), fromNullStr(thr)
			e.CreatedAt = fromNano(created)
			e.Data = fromRawText(dat)
			out = append(out, e)
		}
		return dbErr(rows.Err())
	})
	return out, err
}
