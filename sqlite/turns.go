package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// turnVals are a turn's mutable fields encoded for SQL, computed before the
// write transaction so the write lock is held as briefly as possible.
type turnVals struct {
	output, actions, errJSON, usage, input any
	cancel, ended, cancelMsg               any
	trigger, overrides                     any
}

func encodeTurn(t *forge.Turn) (turnVals, error) {
	var v turnVals
	var err error
	if v.input, err = encJSON(t.Input); err != nil {
		return v, err
	}
	if v.output, err = encJSON(t.Output); err != nil {
		return v, err
	}
	if v.actions, err = encJSON(t.RequiredActions); err != nil {
		return v, err
	}
	if v.errJSON, err = encJSON(t.Error); err != nil {
		return v, err
	}
	if v.usage, err = encJSON(t.Usage); err != nil {
		return v, err
	}
	v.cancel = strPtr(t.CancelReason)
	v.cancelMsg = strPtr(t.CancelMessage)
	if v.trigger, err = encJSON(t.Trigger); err != nil {
		return v, err
	}
	if v.overrides, err = encJSON(t.Overrides); err != nil {
		return v, err
	}
	v.ended = nullTime(t.EndedAt)
	return v, nil
}

// BeginTurn inserts a turn with its input messages and events and moves the
// session tip, in one transaction.
func (s *Store) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	t, evs, err := storeutil.BeginTurn(b, s.now)
	if err != nil {
		return err
	}
	v, err := encodeTurn(&t)
	if err != nil {
		return err
	}
	scope := scope{tenant: t.Tenant, session: t.SessionID, turn: t.ID}
	msgs, parts, err := s.encodeMessages(scope, b.Messages, true)
	if err != nil {
		return err
	}
	if evs, err = s.prepareEvents(evs); err != nil {
		return err
	}
	// The turn's events wait for its end to be packed against its rows.
	packs, err := eventpack.Plain(evs, t.ID)
	if err != nil {
		return err
	}
	first := firstSeqOf(evs, t.ID)
	err = s.write(ctx, func(x *tx) error {
		// The checks ride on the writes: the unique indexes of turns refuse
		// a second running turn, a used idempotency key or turn id; the
		// session's UPDATE matches only a live session at the expected
		// tip; a previous turn that is that tip is a turn of the session.
		// Only when a write fails, or the previous turn is not the
		// expected tip, does a read (beginCheck) find out which error it
		// is, in the order they rank: session, previous turn, key, then
		// the running turn (which wins over a moved tip: it is what moved
		// it) and the tip.
		// lineage and depth (migration 0010): a turn chaining from the
		// session's tip, read before the UPDATE below moves it, continues
		// the tip's lineage; a root or a fork begins its own.
		if b.AgentName != "" {
			if err := agentIsCurrent(x, t.Tenant, b.AgentName, t.AgentID, t.AgentVersion); err != nil {
				return err
			}
		}
		if b.Promote {
			// The queued row gives way to the running turn (migration
			// 0013); a refusal below rolls its deletion back.
			if err := promoteQueued(x, &t); err != nil {
				return err
			}
		}
		_, err := x.exec(`INSERT INTO turns (tenant, id, session_id, previous_turn_id, agent_id, agent_version,
			status, input, output, required_actions, error, cancel_reason, usage, iterations, last_seq,
			idempotency_key, created_at, ended_at, cancel_message, trigger, first_seq, overrides, lineage, depth)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,
				coalesce((SELECT p.lineage FROM turns p JOIN sessions s ON s.tenant = p.tenant AND s.id = p.session_id
					WHERE p.tenant = ?1 AND p.id = ?4 AND p.session_id = ?3 AND s.tip_turn_id = p.id), ?2),
				coalesce((SELECT p.depth + 1 FROM turns p WHERE p.tenant = ?1 AND p.id = ?4 AND p.session_id = ?3), 0))`,
			t.Tenant, t.ID, t.SessionID, strPtr(t.PreviousTurnID), t.AgentID, t.AgentVersion,
			t.Status, v.input, v.output, v.actions, v.errJSON, v.cancel, v.usage, t.Iterations, t.LastSeq,
			nullStr(t.IdempotencyKey), unixNano(t.CreatedAt), v.ended, v.cancelMsg, v.trigger, first, v.overrides)
		if err != nil {
			if _, cerr := beginCheck(x, &t, false); cerr != nil {
				return cerr
			}
			return turnInsertErr(err, &t)
		}
		updated := unixNano(s.now())
		var res sql.Result
		if b.ExpectTip == nil {
			res, err = x.exec(`UPDATE sessions SET tip_turn_id = ?, updated_at = ?
				WHERE tenant = ? AND id = ? AND deleted_at IS NULL`, t.ID, updated, t.Tenant, t.SessionID)
		} else {
			res, err = x.exec(`UPDATE sessions SET tip_turn_id = ?, updated_at = ?
				WHERE tenant = ? AND id = ? AND deleted_at IS NULL AND coalesce(tip_turn_id, '') = ?`,
				t.ID, updated, t.Tenant, t.SessionID, *b.ExpectTip)
		}
		if err != nil {
			return dbErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return dbErr(err)
		} else if n == 0 {
			tip, cerr := beginCheck(x, &t, true)
			if cerr != nil {
				return cerr
			}
			return forge.Errorf(forge.ErrConflict, "session %s tip moved to %q", t.SessionID, tip)
		}
		if t.PreviousTurnID != nil && (b.ExpectTip == nil || *b.ExpectTip != *t.PreviousTurnID) {
			if _, cerr := beginCheck(x, &t, true); cerr != nil {
				return cerr
			}
		}
		if c := b.Claim; c != nil {
			res, err := x.exec(`UPDATE sessions SET seq_reserved = ? WHERE tenant = ? AND id = ? AND seq_reserved = ?`,
				c.Through, t.Tenant, t.SessionID, c.Above)
			if err != nil {
				return dbErr(err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return dbErr(err)
			} else if n == 0 {
				return fmt.Errorf("%w: session %s", forge.ErrSeqClaimLost, t.SessionID)
			}
		}
		if err := insertMessages(x, msgs, parts); err != nil {
			return err
		}
		if err := s.insertLog(x, scope, packs); err != nil {
			return err
		}
		if err := s.queueWebhooks(x, scope, evs); err != nil {
			return err
		}
		if t.Ended() && len(packs) > 0 {
			x.after(func() { s.pk.Add(eventpack.TurnKey{Tenant: t.Tenant, Session: t.SessionID, Turn: t.ID}) })
		}
		// The session's cached row, if any, takes the same change.
		x.after(func() {
			s.rc.updateSession(t.Tenant, t.SessionID, func(vals []any) bool {
				vals[sessionTipCol], vals[sessionUpdatedCol] = t.ID, updated
				return true
			})
		})
		return nil
	})
	if err != nil {
		return err
	}
	storeutil.Begun(b, &t)
	return nil
}

// firstSeqOf is the lowest seq of turn's events in evs (in seq order), or
// nil.
func firstSeqOf(evs []forge.Event, turn string) any {
	for _, e := range evs {
		if e.TurnID != nil && *e.TurnID == turn {
			return e.Seq
		}
	}
	return nil
}

// beginCheck reads, inside BeginTurn's transaction, what may refuse the
// turn t before its own writes do: a session that is not there (or
// deleted), a previous turn that is not one of its turns, an idempotency
// key already used (a NULL ?3 or ?4 matches no turn) by another turn than
// t, once inserted. It returns the session's tip and the first of these
// errors.
func beginCheck(x *tx, t *forge.Turn, inserted bool) (tip string, err error) {
	var (
		tipCol        sql.NullString
		prevOK, keyed bool
		self          any // nil: t is not in the table
	)
	if inserted {
		self = t.ID
	}
	err = x.queryRow(`SELECT tip_turn_id,
			EXISTS (SELECT 1 FROM turns WHERE tenant = ?1 AND session_id = ?2 AND id = ?3),
			EXISTS (SELECT 1 FROM turns WHERE tenant = ?1 AND session_id = ?2 AND idempotency_key = ?4
				AND (?5 IS NULL OR id <> ?5))
		FROM sessions WHERE tenant = ?1 AND id = ?2 AND deleted_at IS NULL`,
		t.Tenant, t.SessionID, strPtr(t.PreviousTurnID), nullStr(t.IdempotencyKey), self).Scan(&tipCol, &prevOK, &keyed)
	if err != nil {
		return "", notFound(err, "session %s not found", t.SessionID)
	}
	if t.PreviousTurnID != nil && !prevOK {
		// A chain never leaves its session: ListMessages walks it.
		return "", forge.Errorf(forge.ErrNotFound, "previous turn %s not found in session %s", *t.PreviousTurnID, t.SessionID)
	}
	if keyed {
		return "", forge.Errorf(forge.ErrConflict, "idempotency key %q was already used in session %s", t.IdempotencyKey, t.SessionID)
	}
	return tipCol.String, nil
}

// turnInsertErr maps the unique indexes of turns to their errors.
func turnInsertErr(err error, t *forge.Turn) error {
	msg, ok := isUnique(err)
	switch {
	case !ok:
		return dbErr(err)
	case strings.Contains(msg, "idempotency_key"):
		return forge.Errorf(forge.ErrConflict, "idempotency key %q was already used in session %s", t.IdempotencyKey, t.SessionID)
	case strings.Contains(msg, "turns.session_id"):
		return forge.Errorf(forge.ErrTurnInProgress, "session %s already has a running turn", t.SessionID)
	default:
		return forge.Errorf(forge.ErrConflict, "turn %s already exists", t.ID)
	}
}

// Commit writes one batch of a running turn. The UPDATE of the turn row is
// the fence: it only matches while the turn is running, and the write
// transaction holds the database lock until commit, so once a terminal
// status is committed every later batch for the turn fails with
// ErrTurnEnded and writes nothing.
//
// The terminal write also adds the turn's usage to the session's total, so
// each ended turn is counted once.
func (s *Store) Commit(ctx context.Context, b *forge.Batch) error {
	t, evs, maxSeq, err := storeutil.Commit(b, s.now)
	if err != nil {
		return err
	}
	var v turnVals
	if b.Turn != nil {
		if v, err = encodeTurn(&t); err != nil {
			return err
		}
	}
	scope := scope{tenant: b.Tenant, session: b.SessionID, turn: b.TurnID}
	msgs, _, err := s.encodeMessages(scope, b.Messages, false)
	if err != nil {
		return err
	}
	parts, err := s.encodeParts(scope, "", b.Parts)
	if err != nil {
		return err
	}
	if evs, err = s.prepareEvents(evs); err != nil {
		return err
	}
	packs, err := eventpack.Plain(evs, b.TurnID)
	if err != nil {
		return err
	}
	first := firstSeqOf(evs, b.TurnID)
	var snap any
	if b.Snapshot != nil {
		if snap, err = encodeSnapshot(b.Snapshot); err != nil {
			return err
		}
	}
	var last int64
	var noneQueued bool
	err = s.write(ctx, func(x *tx) error {
		noneQueued = false
		var (
			err      error
			vals     []any
			firstSeq any // the turn's first_seq, after this write
		)
		if b.Turn != nil {
			// The whole row comes back: an ended turn goes to the row cache.
			vals, err = returning(x.queryRow(`UPDATE turns SET status = ?, output = ?, required_actions = ?, error = ?,
				cancel_reason = ?, usage = ?, iterations = ?, last_seq = max(last_seq, ?, ?), ended_at = ?,
				cancel_message = ?, snapshot = coalesce(?, snapshot), first_seq = coalesce(first_seq, ?)
				WHERE tenant = ? AND session_id = ? AND id = ? AND status = 'running' RETURNING `+turnColsBare+`, first_seq`,
				t.Status, v.output, v.actions, v.errJSON, v.cancel, v.usage, t.Iterations, t.LastSeq, maxSeq,
				v.ended, v.cancelMsg, snap, first, b.Tenant, b.SessionID, b.TurnID))
			if err == nil {
				firstSeq, vals = vals[turnColCount], vals[:turnColCount]
				err = valuesRow(vals[turnLastSeqCol : turnLastSeqCol+1]).Scan(&last)
			}
			if err == nil && t.Ended() {
				x.after(func() { s.rc.putTurn(b.Tenant, b.SessionID, b.TurnID, vals) })
			}
		} else {
			err = x.queryRow(`UPDATE turns SET last_seq = max(last_seq, ?), snapshot = coalesce(?, snapshot),
				first_seq = coalesce(first_seq, ?)
				WHERE tenant = ? AND session_id = ? AND id = ? AND status = 'running' RETURNING last_seq`,
				maxSeq, snap, first, b.Tenant, b.SessionID, b.TurnID).Scan(&last)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return fenceErr(x, b)
		}
		if err != nil {
			return dbErr(err)
		}
		if b.Turn != nil && t.Ended() {
			// The fence matched, so this is the turn's one terminal write:
			// its usage joins the session's total in the same transaction
			// (rolled back with it, and redone if fn runs again).
			if err := addSessionUsage(x, s, b.Tenant, b.SessionID, t.Usage); err != nil {
				return err
			}
			// Whether a turn waits (so the engine reads none when none
			// does): the transaction is the database's only writer.
			if err := x.queryRow(`SELECT NOT EXISTS (SELECT 1 FROM turns WHERE tenant = ? AND session_id = ? AND status = 'queued')`,
				b.Tenant, b.SessionID).Scan(&noneQueued); err != nil {
				return dbErr(err)
			}
		}
		if err := upsertMessages(x, msgs); err != nil {
			return err
		}
		if err := upsertParts(x, parts); err != nil {
			return err
		}
		if err := s.insertLog(x, scope, packs); err != nil {
			return err
		}
		if err := s.queueWebhooks(x, scope, evs); err != nil {
			return err
		}
		if b.Turn != nil && t.Ended() && firstSeq != nil {
			// Its rows are final: the packer packs its log against them.
			x.after(func() { s.pk.Add(eventpack.TurnKey{Tenant: b.Tenant, Session: b.SessionID, Turn: b.TurnID}) })
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.NoneQueued = noneQueued
	storeutil.Committed(b, &t, last)
	return nil
}

// addSessionUsage adds u to the session's usage total. The cached row of
// the session, if any, takes the same sums (without a RETURNING clause,
// which costs a single-row UPDATE several times its own work).
func addSessionUsage(x *tx, s *Store, tenant, sessionID string, u forge.Usage) error {
	if u == (forge.Usage{}) {
		return nil
	}
	res, err := x.exec(`UPDATE sessions SET usage_input_tokens = usage_input_tokens + ?,
		usage_output_tokens = usage_output_tokens + ?, usage_reasoning_tokens = usage_reasoning_tokens + ?,
		usage_cache_read_tokens = usage_cache_read_tokens + ?, usage_cache_write_tokens = usage_cache_write_tokens + ?,
		usage_cost = usage_cost + ? WHERE tenant = ? AND id = ?`,
		u.InputTokens, u.OutputTokens, u.ReasoningTokens, u.CacheReadTokens, u.CacheWriteTokens, u.Cost,
		tenant, sessionID)
	if err != nil {
		return dbErr(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return dbErr(err) // no such session: nothing to add to, as before
	}
	x.after(func() {
		s.rc.updateSession(tenant, sessionID, func(vals []any) bool { return addUsage(vals[sessionUsageCol:], u) })
	})
	return nil
}

// addUsage adds u to the usage columns of a cached session row (usageCols,
// as the driver returns them), as SQLite's sums do; false if a value is
// not of the type the columns hold.
func addUsage(vals []any, u forge.Usage) bool {
	for i, d := range []int64{u.InputTokens, u.OutputTokens, u.ReasoningTokens, u.CacheReadTokens, u.CacheWriteTokens} {
		n, ok := vals[i].(int64)
		if !ok {
			return false
		}
		vals[i] = n + d
	}
	c, ok := vals[5].(float64)
	if !ok {
		return false
	}
	vals[5] = c + u.Cost
	return true
}

// fenceErr explains why the fencing UPDATE matched no row.
func fenceErr(x *tx, b *forge.Batch) error {
	var status string
	err := x.queryRow(`SELECT status FROM turns WHERE tenant = ? AND session_id = ? AND id = ?`,
		b.Tenant, b.SessionID, b.TurnID).Scan(&status)
	if err != nil {
		return notFound(err, "turn %s not found", b.TurnID)
	}
	return forge.Errorf(forge.ErrTurnEnded, "turn %s already ended (%s)", b.TurnID, status)
}

const turnCols = `t.tenant, t.id, t.session_id, t.previous_turn_id, t.agent_id, t.agent_version, t.status,
	t.input, t.output, t.required_actions, t.error, t.cancel_reason, t.usage, t.iterations, t.last_seq,
	t.idempotency_key, t.created_at, t.ended_at, t.cancel_message, t.trigger, t.overrides`

var (
	// turnColsBare is turnCols without the table alias (for RETURNING).
	turnColsBare   = strings.ReplaceAll(turnCols, "t.", "")
	turnColCount   = colCount(turnCols)
	turnLastSeqCol = colIndex(turnCols, "t.last_seq")
)

func scanTurn(sc interface{ Scan(...any) error }) (*forge.Turn, error) {
	var (
		t                                     forge.Turn
		prev, input, output, actions, errJSON sql.NullString
		cancel, usage, key, cancelMsg, trig   sql.NullString
		overrides                             sql.NullString
		created                               int64
		ended                                 sql.NullInt64
	)
	if err := sc.Scan(&t.Tenant, &t.ID, &t.SessionID, &prev, &t.AgentID, &t.AgentVersion, &t.Status,
		&input, &output, &actions, &errJSON, &cancel, &usage, &t.Iterations, &t.LastSeq,
		&key, &created, &ended, &cancelMsg, &trig, &overrides); err != nil {
		return nil, err
	}
	t.PreviousTurnID = fromNullStr(prev)
	t.CancelReason = fromNullStr(cancel)
	t.CancelMessage = fromNullStr(cancelMsg)
	t.IdempotencyKey = key.String
	t.CreatedAt = fromNano(created)
	t.EndedAt = fromNullNano(ended)
	for _, f := range []struct {
		s   sql.NullString
		dst any
	}{{input, &t.Input}, {output, &t.Output}, {actions, &t.RequiredActions}, {errJSON, &t.Error}, {usage, &t.Usage}, {trig, &t.Trigger}, {overrides, &t.Overrides}} {
		if err := decJSON(f.s, f.dst); err != nil {
			return nil, fmt.Errorf("turn %s: %w", t.ID, err)
		}
	}
	return &t, nil
}

// GetTurn returns a turn of a live session (an ended one from the row
// cache when it holds it: its row never changes again).
func (s *Store) GetTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error) {
	if vals, ok := s.rc.turn(tenant, sessionID, turnID); ok {
		return scanTurn(valuesRow(vals))
	}
	epoch := s.rc.begin()
	vals, err := s.queryValues(ctx, turnColCount, `SELECT `+turnCols+` FROM turns t
		JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.deleted_at IS NULL
		WHERE t.tenant = ? AND t.session_id = ? AND t.id = ?`, tenant, sessionID, turnID)
	if err != nil {
		return nil, notFound(err, "turn %s not found", turnID)
	}
	t, err := scanTurn(valuesRow(vals))
	if err != nil {
		return nil, dbErr(err)
	}
	if t.Ended() {
		s.rc.fillTurn(epoch, tenant, sessionID, turnID, vals)
	}
	return t, nil
}

// GetTurnByID returns a turn of a live session by its id alone.
func (s *Store) GetTurnByID(ctx context.Context, tenant, turnID string) (*forge.Turn, error) {
	if vals, ok := s.rc.turnByID(tenant, turnID); ok {
		return scanTurn(valuesRow(vals))
	}
	epoch := s.rc.begin()
	vals, err := s.queryValues(ctx, turnColCount, `SELECT `+turnCols+` FROM turns t
		JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.deleted_at IS NULL
		WHERE t.tenant = ? AND t.id = ?`, tenant, turnID)
	if err != nil {
		return nil, notFound(err, "turn %s not found", turnID)
	}
	t, err := scanTurn(valuesRow(vals))
	if err != nil {
		return nil, dbErr(err)
	}
	if t.Ended() {
		s.rc.fillTurn(epoch, tenant, t.SessionID, turnID, vals)
	}
	return t, nil
}

// TurnByIdempotencyKey finds the turn created with key in a live session.
func (s *Store) TurnByIdempotencyKey(ctx context.Context, tenant, sessionID, key string) (*forge.Turn, error) {
	if err := storeutil.TurnKey(key); err != nil {
		return nil, err
	}
	t, err := scanTurn(s.queryRow(ctx, `SELECT `+turnCols+` FROM turns t
		JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.deleted_at IS NULL
		WHERE t.tenant = ? AND t.session_id = ? AND t.idempotency_key = ?`, tenant, sessionID, key))
	if err != nil {
		return nil, notFound(err, "no turn with idempotency key %q", key)
	}
	return t, nil
}

// ListTurns lists a live session's turns, oldest first.
func (s *Store) ListTurns(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Turn, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Turn
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, sessionID); err != nil {
			return err
		}
		rows, err := x.query(`SELECT `+turnCols+` FROM turns t WHERE t.tenant = ? AND t.session_id = ? AND t.id > ?
			ORDER BY t.id LIMIT ?`, tenant, sessionID, opts.Cursor, limit+1)
		if err != nil {
			return dbErr(err)
		}
		out, err = scanTurns(rows)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(t *forge.Turn) string { return t.ID })
	return out, next, nil
}

// RunningTurns lists every running turn of every tenant, for recovery.
func (s *Store) RunningTurns(ctx context.Context) ([]*forge.Turn, error) {
	// Matches the partial index turns_one_running, so only running turns
	// are visited however long the history is.
	rows, err := s.query(ctx, `SELECT `+turnCols+` FROM turns t WHERE t.status = 'running' ORDER BY t.tenant, t.session_id`)
	if err != nil {
		return nil, dbErr(err)
	}
	return scanTurns(rows)
}

func scanTurns(rows rowIter) ([]*forge.Turn, error) {
	defer rows.Close()
	var out []*forge.Turn
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, t)
	}
	return out, dbErr(rows.Err())
}

// encodeSnapshot is the JSON of a snapshot without its turn id, which is
// its row's (rows written before kept it; it is set from the row on read
// either way).
func encodeSnapshot(snap *forge.Snapshot) (any, error) {
	c := *snap
	c.TurnID = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	// The turn id is the first field.
	return "{" + strings.TrimPrefix(string(b), `{"turn_id":"",`), nil
}

// GetSnapshot returns the snapshot written by the turn's last batch that
// carried one.
func (s *Store) GetSnapshot(ctx context.Context, tenant, turnID string) (*forge.Snapshot, error) {
	var body string
	err := s.queryRow(ctx, `SELECT snapshot FROM turns WHERE tenant = ? AND id = ? AND snapshot IS NOT NULL`,
		tenant, turnID).Scan(&body)
	if err != nil {
		return nil, notFound(err, "no snapshot for turn %s", turnID)
	}
	var snap forge.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		return nil, fmt.Errorf("sqlite: decode snapshot of %s: %w", turnID, err)
	}
	snap.TurnID = turnID
	return &snap, nil
}
