package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// ListEvents returns stored events of a live session in seq order.
func (s *Store) ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error) {
	limit := storeutil.Limit(q.Limit, storeutil.DefaultEventLimit)
	before := storeutil.EventsBefore(q.Before)
	var out []forge.Event
	b := batch(tenant)
	liveSession(b, tenant, q.SessionID)
	query := `SELECT seq, id, type, session_id, turn_id, thread_id, created_at, data FROM events
		WHERE tenant = $1 AND session_id = $2 AND seq > $3 AND seq < $4 ORDER BY seq LIMIT $5`
	args := []any{tenant, q.SessionID, q.After, before, limit}
	if q.TurnID != "" {
		// Uses events_turn: one turn's events without scanning the session.
		query = `SELECT seq, id, type, session_id, turn_id, thread_id, created_at, data FROM events
			WHERE tenant = $1 AND turn_id = $6 AND session_id = $2 AND seq > $3 AND seq < $4 ORDER BY seq LIMIT $5`
		args = append(args, q.TurnID)
	}
	b.Queue(query, args...).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					e       forge.Event
					created time.Time
					data    *string
				)
				if err := rows.Scan(&e.Seq, &e.ID, &e.Type, &e.SessionID, &e.TurnID, &e.ThreadID, &created, &data); err != nil {
					return err
				}
				e.CreatedAt = utc(created)
				e.Data = fromRawText(data)
				out = append(out, e)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}
