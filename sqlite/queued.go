package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// Busy sessions (migration 0013): a queued turn is a row of status
// 'queued' with the request it will start with; BeginTurn with Promote
// replaces it with the running turn.

// EnqueueTurn stores a queued turn. The row is a root of its own lineage
// with no messages: should it end without running (cancelled), a turn
// forked from it sees no history.
func (s *Store) EnqueueTurn(ctx context.Context, t *forge.Turn, request []byte) error {
	if t == nil || t.ID == "" || t.SessionID == "" || t.Status != forge.TurnQueued {
		return forge.Errorf(forge.ErrInvalid, "EnqueueTurn needs a turn of status queued with an id and a session")
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.now()
	}
	v, err := encodeTurn(t)
	if err != nil {
		return err
	}
	return s.write(ctx, func(x *tx) error {
		if err := liveSession(x, t.Tenant, t.SessionID); err != nil {
			return err
		}
		_, err := x.exec(`INSERT INTO turns (tenant, id, session_id, previous_turn_id, agent_id, agent_version,
			status, input, output, required_actions, error, cancel_reason, usage, iterations, last_seq,
			idempotency_key, created_at, ended_at, cancel_message, trigger, lineage, depth, queued_request, overrides)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, NULL, NULL, ?, ?, 0, ?, ?)`,
			t.Tenant, t.ID, t.SessionID, strPtr(t.PreviousTurnID), t.AgentID, t.AgentVersion,
			forge.TurnQueued, v.input, v.output, v.actions, v.errJSON, v.cancel, v.usage,
			nullStr(t.IdempotencyKey), unixNano(t.CreatedAt), v.trigger, t.ID, string(request), v.overrides)
		if err != nil {
			return turnInsertErr(err, t)
		}
		return nil
	})
}

// NextQueuedTurn returns the session's oldest queued turn.
func (s *Store) NextQueuedTurn(ctx context.Context, tenant, sessionID string) (*forge.QueuedTurn, error) {
	var (
		q   forge.QueuedTurn
		req sql.NullString
	)
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, sessionID); err != nil {
			return err
		}
		rows, err := x.query(`SELECT `+turnCols+`, t.queued_request FROM turns t
			WHERE t.tenant = ? AND t.session_id = ? AND t.status = 'queued' ORDER BY t.created_at, t.id LIMIT 1`,
			tenant, sessionID)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return dbErr(err)
			}
			return forge.Errorf(forge.ErrNotFound, "no turn is queued in session %s", sessionID)
		}
		dest := &queuedScan{req: &req}
		if q.Turn, err = scanTurn(dest.wrap(rows)); err != nil {
			return dbErr(err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	q.Request = []byte(req.String)
	return &q, nil
}

// queuedScan scans a turn followed by its queued_request.
type queuedScan struct{ req *sql.NullString }

func (q *queuedScan) wrap(r interface{ Scan(...any) error }) interface{ Scan(...any) error } {
	return scanFunc(func(dest ...any) error { return r.Scan(append(dest, q.req)...) })
}

// EndQueuedTurn ends a queued turn that never ran.
func (s *Store) EndQueuedTurn(ctx context.Context, t *forge.Turn, events []forge.Event) error {
	if t == nil || !t.Ended() {
		return forge.Errorf(forge.ErrInvalid, "EndQueuedTurn needs a terminal status")
	}
	evs, maxSeq := storeutil.StoredEvents(events)
	evs, err := s.prepareEvents(evs)
	if err != nil {
		return err
	}
	packs, err := eventpack.Plain(evs, t.ID)
	if err != nil {
		return err
	}
	first := firstSeqOf(evs, t.ID)
	scope := scope{tenant: t.Tenant, session: t.SessionID, turn: t.ID}
	if t.EndedAt == nil {
		now := s.now()
		t.EndedAt = &now
	}
	t.LastSeq = max(t.LastSeq, maxSeq)
	v, err := encodeTurn(t)
	if err != nil {
		return err
	}
	return s.write(ctx, func(x *tx) error {
		res, err := x.exec(`UPDATE turns SET status = ?, error = ?, cancel_reason = ?, cancel_message = ?,
			ended_at = ?, queued_request = NULL, last_seq = ?, first_seq = ?
			WHERE tenant = ? AND session_id = ? AND id = ? AND status = 'queued'`,
			t.Status, v.errJSON, v.cancel, v.cancelMsg, v.ended, t.LastSeq, first, t.Tenant, t.SessionID, t.ID)
		if err != nil {
			return dbErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return dbErr(err)
		} else if n == 0 {
			var status string
			err := x.queryRow(`SELECT status FROM turns WHERE tenant = ? AND session_id = ? AND id = ?`,
				t.Tenant, t.SessionID, t.ID).Scan(&status)
			if err != nil {
				return notFound(err, "turn %s not found", t.ID)
			}
			return forge.Errorf(forge.ErrTurnEnded, "turn %s is no longer queued (%s)", t.ID, status)
		}
		if err := s.insertLog(x, scope, packs); err != nil {
			return err
		}
		if err := s.queueWebhooks(x, scope, evs); err != nil {
			return err
		}
		if len(packs) > 0 {
			x.after(func() { s.pk.Add(eventpack.TurnKey{Tenant: t.Tenant, Session: t.SessionID, Turn: t.ID}) })
		}
		return nil
	})
}

// QueuedSessions lists the oldest queued turn of each live session that
// has no running turn, across tenants.
func (s *Store) QueuedSessions(ctx context.Context) ([]forge.TurnRef, error) {
	rows, err := s.query(ctx, `SELECT q.tenant, q.session_id, q.id FROM turns q
		JOIN sessions s ON s.tenant = q.tenant AND s.id = q.session_id AND s.deleted_at IS NULL
		WHERE q.status = 'queued'
		AND NOT EXISTS (SELECT 1 FROM turns r WHERE r.tenant = q.tenant AND r.session_id = q.session_id AND r.status = 'running')
		AND NOT EXISTS (SELECT 1 FROM turns o WHERE o.tenant = q.tenant AND o.session_id = q.session_id AND o.status = 'queued'
			AND (o.created_at < q.created_at OR (o.created_at = q.created_at AND o.id < q.id)))
		ORDER BY q.tenant, q.session_id`)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []forge.TurnRef
	for rows.Next() {
		var r forge.TurnRef
		if err := rows.Scan(&r.Tenant, &r.SessionID, &r.TurnID); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, r)
	}
	return out, dbErr(rows.Err())
}

// promoteQueued deletes, in BeginTurn's transaction, the queued row t
// replaces: ErrNotFound when the session is not live, ErrTurnEnded when
// the turn is no longer queued, ErrConflict when an older turn of the
// session still is.
func promoteQueued(x *tx, t *forge.Turn) error {
	var created int64
	err := x.queryRow(`DELETE FROM turns WHERE tenant = ? AND session_id = ? AND id = ? AND status = 'queued'
		RETURNING created_at`, t.Tenant, t.SessionID, t.ID).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		if err := liveSession(x, t.Tenant, t.SessionID); err != nil {
			return err
		}
		return forge.Errorf(forge.ErrTurnEnded, "turn %s is no longer queued", t.ID)
	}
	if err != nil {
		return dbErr(err)
	}
	var older bool
	if err := x.queryRow(`SELECT EXISTS (SELECT 1 FROM turns WHERE tenant = ? AND session_id = ? AND status = 'queued'
		AND (created_at < ? OR (created_at = ? AND id < ?)))`, t.Tenant, t.SessionID, created, created, t.ID).Scan(&older); err != nil {
		return dbErr(err)
	}
	if older {
		return forge.Errorf(forge.ErrConflict, "an older turn of session %s is still queued", t.SessionID)
	}
	return nil
}

// QueuedTurns lists the session's queued turns in the order they run.
func (s *Store) QueuedTurns(ctx context.Context, tenant, sessionID string, limit int) ([]*forge.Turn, error) {
	var out []*forge.Turn
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, sessionID); err != nil {
			return err
		}
		rows, err := x.query(`SELECT `+turnCols+` FROM turns t
			WHERE t.tenant = ? AND t.session_id = ? AND t.status = 'queued' ORDER BY t.created_at, t.id LIMIT ?`,
			tenant, sessionID, max(limit, 1))
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			t, err := scanTurn(rows)
			if err != nil {
				return dbErr(err)
			}
			t.Tenant = tenant
			out = append(out, t)
		}
		return dbErr(rows.Err())
	})
	return out, err
}
