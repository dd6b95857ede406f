package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// Busy sessions (migration 0009): a queued turn is a row of status
// 'queued' with the request it will start with; BeginTurn with Promote
// replaces it with the running turn (promote_queued).

// EnqueueTurn stores a queued turn, in a live session only. The row is a
// root of its own lineage with no messages: should it end without running
// (cancelled), a turn forked from it sees no history.
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
	b := batch(t.Tenant)
	b.Queue(`INSERT INTO turns (tenant, id, session_id, previous_turn_id, agent_id, agent_version, status, input,
			output, required_actions, error, cancel_reason, cancel_message, usage, iterations, last_seq,
			idempotency_key, created_at, ended_at, trigger, lineage, depth, queued_request, overrides)
		SELECT $1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9, $10, $11, $12, $13, 0, 0, $14, $15, NULL, $16, $2, 0, $17, $18
		FROM sessions WHERE tenant = $1 AND id = $3 AND deleted_at IS NULL`,
		t.Tenant, t.ID, t.SessionID, t.PreviousTurnID, t.AgentID, t.AgentVersion, v.input,
		v.output, v.actions, v.errJSON, t.CancelReason, v.cancelMsg, v.usage,
		nullStr(t.IdempotencyKey), t.CreatedAt, v.trigger, string(request), v.overrides).Exec(func(ct pgconnTag) error {
		if ct.RowsAffected() == 0 {
			return forge.Errorf(forge.ErrNotFound, "session %s not found", t.SessionID)
		}
		return nil
	})
	return s.write(ctx, b)
}

// NextQueuedTurn returns the session's oldest queued turn.
func (s *Store) NextQueuedTurn(ctx context.Context, tenant, sessionID string) (*forge.QueuedTurn, error) {
	var q *forge.QueuedTurn
	b := batch(tenant)
	liveSession(b, tenant, sessionID)
	b.Queue(`SELECT `+turnCols+`, t.queued_request FROM turns t
		WHERE t.tenant = $1 AND t.session_id = $2 AND t.status = 'queued' ORDER BY t.created_at, t.id LIMIT 1`,
		tenant, sessionID).QueryRow(func(r pgx.Row) error {
		var req *string
		t, err := scanTurn(scanFunc(func(dst ...any) error { return r.Scan(append(dst, &req)...) }))
		if err != nil {
			return notFound(err, "no turn is queued in session %s", sessionID)
		}
		q = &forge.QueuedTurn{Turn: t}
		if req != nil {
			q.Request = []byte(*req)
		}
		return nil
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return q, nil
}

// scanFunc is a pgx.Row made of a function.
type scanFunc func(dst ...any) error

func (f scanFunc) Scan(dst ...any) error { return f(dst...) }

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
	sc := scope{tenant: t.Tenant, session: t.SessionID, turn: t.ID}
	t.LastSeq = max(t.LastSeq, maxSeq)
	if t.EndedAt == nil {
		now := s.now()
		t.EndedAt = &now
	}
	v, err := encodeTurn(t)
	if err != nil {
		return err
	}
	b := batch(t.Tenant)
	// The outer SELECT sees the row as it was before the UPDATE: its
	// status says why nothing matched.
	b.Queue(`WITH u AS (
			UPDATE turns SET status = $4, error = $5, cancel_reason = $6, cancel_message = $7, ended_at = $8,
				queued_request = NULL, last_seq = $9, first_seq = $10
			WHERE tenant = $1 AND session_id = $2 AND id = $3 AND status = 'queued' RETURNING 1
		)
		SELECT (SELECT count(*) FROM u), (SELECT status FROM turns WHERE tenant = $1 AND session_id = $2 AND id = $3)`,
		t.Tenant, t.SessionID, t.ID, t.Status, v.errJSON, t.CancelReason, v.cancelMsg, t.EndedAt,
		t.LastSeq, firstSeqOf(evs, t.ID)).
		QueryRow(func(r pgx.Row) error {
			var (
				n      int64
				status *string
			)
			if err := r.Scan(&n, &status); err != nil {
				return err
			}
			switch {
			case n > 0:
				return nil
			case status == nil:
				return forge.Errorf(forge.ErrNotFound, "turn %s not found", t.ID)
			}
			return forge.Errorf(forge.ErrTurnEnded, "turn %s is no longer queued (%s)", t.ID, *status)
		})
	queuePacks(b, sc, packs)
	delivered, err := s.queueWebhooks(b, sc, evs)
	if err != nil {
		return err
	}
	if err := s.write(ctx, b); err != nil {
		return err
	}
	delivered()
	if len(packs) > 0 {
		s.pk.Add(eventpack.TurnKey{Tenant: t.Tenant, Session: t.SessionID, Turn: t.ID})
	}
	return nil
}

// QueuedSessions lists the oldest queued turn of each session that has
// one and no running turn, across tenants, through the SECURITY DEFINER
// function queued_sessions (ids only, as RunningTurns does); deleted
// sessions are left out by reading the sessions tenant by tenant.
func (s *Store) QueuedSessions(ctx context.Context) ([]forge.TurnRef, error) {
	var out []forge.TurnRef
	err := s.byRef(ctx, `SELECT tenant, id FROM queued_sessions() ORDER BY tenant`, func(b *pgx.Batch, tenant string, ids []string) {
		b.Queue(`SELECT t.tenant, t.session_id, t.id FROM turns t
			JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.deleted_at IS NULL
			WHERE t.tenant = $1 AND t.id = ANY($2) AND t.status = 'queued' ORDER BY t.session_id`, tenant, ids).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var r forge.TurnRef
					if err := rows.Scan(&r.Tenant, &r.SessionID, &r.TurnID); err != nil {
						return err
					}
					out = append(out, r)
				}
				return rows.Err()
			})
	})
	return out, err
}

// QueuedTurns lists the session's queued turns in the order they run.
func (s *Store) QueuedTurns(ctx context.Context, tenant, sessionID string, limit int) ([]*forge.Turn, error) {
	var out []*forge.Turn
	b := batch(tenant)
	liveSession(b, tenant, sessionID)
	b.Queue(`SELECT `+turnCols+` FROM turns t
		WHERE t.tenant = $1 AND t.session_id = $2 AND t.status = 'queued' ORDER BY t.created_at, t.id LIMIT $3`,
		tenant, sessionID, max(limit, 1)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			t, err := scanTurn(rows)
			if err != nil {
				return err
			}
			t.Tenant = tenant
			out = append(out, t)
		}
		return rows.Err()
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}
