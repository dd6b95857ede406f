package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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
	b := batch(c.Tenant)
	if err := queueSession(b, &c); err != nil {
		return err
	}
	if err := s.write(ctx, b); err != nil {
		if errors.Is(err, forge.ErrConflict) {
			return forge.Errorf(forge.ErrConflict, "session %s already exists", c.ID)
		}
		return err
	}
	*ses = c
	return nil
}

// queueSession queues the insert of a session row (CreateSession, a forum
// join, a monologue swap).
func queueSession(b *pgx.Batch, c *forge.Session) error {
	settings, err := encJSON(c.Guards)
	if err != nil {
		return err
	}
	u := &c.Usage
	b.Queue(`INSERT INTO sessions (tenant, id, kind, agent, title, main_thread_id, metadata, tip_turn_id, `+usageCols+`,
			created_at, updated_at, settings)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`,
		c.Tenant, c.ID, c.Kind, c.Agent, textBytes(c.Title), c.MainThreadID, rawText(c.Metadata), c.TipTurnID,
		u.InputTokens, u.OutputTokens, u.ReasoningTokens, u.CacheReadTokens, u.CacheWriteTokens, u.Cost,
		c.CreatedAt, c.UpdatedAt, settings)
	return nil
}

// usageCols are the columns of a session's usage total, in the order of
// forge.Usage's fields.
const usageCols = `usage_input_tokens, usage_output_tokens, usage_reasoning_tokens, usage_cache_read_tokens,
	usage_cache_write_tokens, usage_cost`

const sessionCols = `id, kind, agent, title, main_thread_id, metadata, tip_turn_id, ` + usageCols + `,
	created_at, updated_at, settings`

func scanSession(sc pgx.Row, tenant string) (*forge.Session, error) {
	var (
		ses              forge.Session
		title            []byte
		meta, settings   *string
		created, updated time.Time
	)
	u := &ses.Usage
	if err := sc.Scan(&ses.ID, &ses.Kind, &ses.Agent, &title, &ses.MainThreadID, &meta, &ses.TipTurnID,
		&u.InputTokens, &u.OutputTokens, &u.ReasoningTokens, &u.CacheReadTokens, &u.CacheWriteTokens, &u.Cost,
		&created, &updated, &settings); err != nil {
		return nil, err
	}
	ses.Tenant = tenant
	ses.Title = string(title)
	ses.Metadata = fromRawText(meta)
	if err := decJSON(settings, &ses.Guards); err != nil {
		return nil, err
	}
	ses.CreatedAt, ses.UpdatedAt = utc(created), utc(updated)
	return &ses, nil
}

// GetSession returns a live session.
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*forge.Session, error) {
	var ses *forge.Session
	b := batch(tenant)
	b.Queue(`SELECT `+sessionCols+` FROM sessions WHERE tenant = $1 AND id = $2 AND deleted_at IS NULL`, tenant, id).
		QueryRow(func(r pgx.Row) error {
			var err error
			ses, err = scanSession(r, tenant)
			return notFound(err, "session %s not found", id)
		})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return ses, nil
}

// ListSessions lists live sessions, oldest first. The cursor is the last id.
func (s *Store) ListSessions(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Session, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Session
	b := batch(tenant)
	b.Queue(`SELECT `+sessionCols+` FROM sessions
		WHERE tenant = $1 AND id > $2 AND deleted_at IS NULL ORDER BY id LIMIT $3`, tenant, opts.Cursor, limit+1).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				ses, err := scanSession(rows, tenant)
				if err != nil {
					return err
				}
				out = append(out, ses)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(s *forge.Session) string { return s.ID })
	return out, next, nil
}

// DeleteSession soft-deletes a session: it disappears from reads, its rows
// stay (a turn still running in it can still be ended by recovery).
func (s *Store) DeleteSession(ctx context.Context, tenant, id string) error {
	// delete_session refuses while a turn runs, ordered with BeginTurn by
	// the session's row lock (0004_delete_session.sql).
	b := batch(tenant)
	b.Queue(`SELECT delete_session($1, $2)`, id, s.now())
	return s.write(ctx, b)
}

// ReserveSeqs raises the session's reserved seq bound by n: one UPDATE,
// whose row lock orders concurrent reservations. It also works on a
// soft-deleted session, so that recovery can still write the closing
// events of a turn that was running when its session was deleted.
func (s *Store) ReserveSeqs(ctx context.Context, tenant, sessionID string, n int64) (int64, error) {
	if err := storeutil.CheckReserve(n); err != nil {
		return 0, err
	}
	var bound int64
	b := batch(tenant)
	b.Queue(`UPDATE sessions SET seq_reserved = seq_reserved + $3 WHERE tenant = $1 AND id = $2
		RETURNING seq_reserved`, tenant, sessionID, n).QueryRow(func(r pgx.Row) error {
		return notFound(r.Scan(&bound), "session %s not found", sessionID)
	})
	if err := s.write(ctx, b); err != nil {
		return 0, err
	}
	return bound, nil
}

// liveSession queues a check that the session exists for the batch's
// tenant and is not deleted.
func liveSession(b *pgx.Batch, tenant, id string) {
	b.Queue(`SELECT EXISTS (SELECT FROM sessions WHERE tenant = $1 AND id = $2 AND deleted_at IS NULL)`, tenant, id).
		QueryRow(func(r pgx.Row) error {
			var ok bool
			if err := r.Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return forge.Errorf(forge.ErrNotFound, "session %s not found", id)
			}
			return nil
		})
}
