package postgres

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	var none int64 // a new session has reserved no seq
	c.SeqReserved = &none
	*ses = c
	// As GetSession would read it back (the database keeps microseconds).
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.Truncate(time.Microsecond), c.UpdatedAt.Truncate(time.Microsecond)
	s.cache.putSession(&c, 0)
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
	created_at, updated_at, settings, seq_reserved`

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
		&created, &updated, &settings, &ses.SeqReserved); err != nil {
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

// queueGetSession queues the read of a live session into *ses (ErrNotFound
// when there is none).
func queueGetSession(b *pgx.Batch, tenant, id string, ses **forge.Session) {
	b.Queue(`SELECT `+sessionCols+` FROM sessions WHERE tenant = $1 AND id = $2 AND deleted_at IS NULL`, tenant, id).
		QueryRow(func(r pgx.Row) error {
			var err error
			*ses, err = scanSession(r, tenant)
			return notFound(err, "session %s not found", id)
		})
}

// GetSession returns a live session, read from the database (and kept for
// SessionForTurn: the freshest row there is).
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*forge.Session, error) {
	var ses *forge.Session
	epoch := s.cache.begin()
	b := batch(tenant)
	queueGetSession(b, tenant, id, &ses)
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	s.cache.putSession(ses, epoch)
	return ses, nil
}

// SessionWithTip reads a live session and its tip turn in one round trip
// (a turn begun on a replica that did not write the session last).
func (s *Store) SessionWithTip(ctx context.Context, tenant, id string) (*forge.Session, *forge.Turn, error) {
	var (
		ses *forge.Session
		tip *forge.Turn
	)
	epoch := s.cache.begin()
	b := batch(tenant)
	queueGetSession(b, tenant, id, &ses)
	b.Queue(`SELECT `+turnCols+` FROM turns t
		JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.tip_turn_id = t.id AND s.deleted_at IS NULL
		WHERE s.tenant = $1 AND s.id = $2`, tenant, id).Query(func(rows pgx.Rows) error {
		if rows.Next() {
			var err error
			if tip, err = scanTurn(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := s.read(ctx, b); err != nil {
		return nil, nil, err
	}
	s.cache.putSession(ses, epoch)
	if ses.TipTurnID == nil {
		return ses, nil, nil
	}
	if tip == nil || tip.ID != *ses.TipTurnID {
		// The tip moved between the two statements (each reads what was
		// committed when it began): the session's own tip, alone.
		t, err := s.GetTurn(ctx, tenant, id, *ses.TipTurnID)
		if err != nil {
			return nil, nil, err
		}
		tip = t
	}
	return ses, tip, nil
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
	var sb strings.Builder
	args := []any{tenant}
	sb.WriteString(`SELECT ` + sessionCols + ` FROM sessions WHERE tenant = $1 AND deleted_at IS NULL`)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Agent != "" {
		sb.WriteString(` AND agent = ` + arg(q.Agent))
	}
	if q.Kind != "" {
		sb.WriteString(` AND kind = ` + arg(q.Kind))
	}
	running := `EXISTS (SELECT 1 FROM turns t WHERE t.tenant = sessions.tenant AND t.session_id = sessions.id AND t.status = 'running')`
	switch q.Status {
	case forge.SessionRunning:
		sb.WriteString(` AND ` + running)
	case forge.SessionIdle:
		sb.WriteString(` AND NOT ` + running)
	}
	for _, k := range slices.Sorted(maps.Keys(q.Metadata)) {
		sb.WriteString(` AND (metadata::jsonb) ->> ` + arg(k) + ` = ` + arg(q.Metadata[k]))
	}
	if !q.UpdatedAfter.IsZero() {
		sb.WriteString(` AND updated_at > ` + arg(q.UpdatedAfter))
	}
	if !q.UpdatedBefore.IsZero() {
		sb.WriteString(` AND updated_at < ` + arg(q.UpdatedBefore))
	}
	dir, op := "DESC", "<"
	if q.Ascending {
		dir, op = "ASC", ">"
	}
	if after {
		sb.WriteString(` AND (updated_at, id) ` + op + ` (` + arg(time.Unix(0, cur.UpdatedAt).UTC()) + `, ` + arg(cur.ID) + `)`)
	}
	sb.WriteString(` ORDER BY updated_at ` + dir + `, id ` + dir + ` LIMIT ` + arg(limit+1))
	var out []*forge.Session
	b := batch(tenant)
	b.Queue(sb.String(), args...).Query(func(rows pgx.Rows) error {
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
	out, next := storeutil.Page(out, limit, storeutil.SessionCursorOf)
	return out, next, nil
}

// DeleteSession soft-deletes a session: it disappears from reads, its rows
// stay (a turn still running in it can still be ended by recovery).
func (s *Store) DeleteSession(ctx context.Context, tenant, id string) error {
	// delete_session refuses while a turn runs, ordered with BeginTurn by
	// the session's row lock (0004_delete_session.sql).
	b := batch(tenant)
	b.Queue(`SELECT delete_session($1, $2)`, id, s.now())
	err := s.write(ctx, b)
	s.cache.dropSession(tenant, id)
	return err
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
