package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// turnVals are a turn's mutable fields encoded for SQL.
type turnVals struct {
	input, output, actions, errJSON, usage *string
	trigger, overrides                     *string
	cancelMsg                              []byte
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
	v.cancelMsg = optBytes(t.CancelMessage)
	if v.trigger, err = encJSON(t.Trigger); err != nil {
		return v, err
	}
	if v.overrides, err = encJSON(t.Overrides); err != nil {
		return v, err
	}
	return v, nil
}

// BeginTurn inserts a turn with its input messages and events and moves the
// session tip: one batch, one round trip. begin_turn_check locks the
// session row and raises what BeginTurn refuses before anything is
// written (agent_is_current, a stale agent version); the unique index
// turns_one_running is the backstop. It keeps the turn-start cache
// (cache.go) in step: the tip it moved, or, refused, nothing of the
// session and agent it was given.
func (s *Store) BeginTurn(ctx context.Context, bt *forge.BeginTurn) error {
	t, evs, err := storeutil.BeginTurn(bt, s.now)
	if err != nil {
		return err
	}
	v, err := encodeTurn(&t)
	if err != nil {
		return err
	}
	sc := scope{tenant: t.Tenant, session: t.SessionID, turn: t.ID}
	parts := &partRows{}
	msgs, err := s.encodeMessages(bt.Messages, parts)
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
	expect := ""
	if bt.ExpectTip != nil {
		expect = *bt.ExpectTip
	}
	b := batch(t.Tenant)
	if bt.Promote {
		// The queued row gives way to the running turn (migration 0009);
		// a refusal below undoes its deletion with the batch.
		b.Queue(`SELECT promote_queued($1, $2)`, t.SessionID, t.ID)
	}
	b.Queue(`SELECT begin_turn_check($1, $2, $3, $4, $5, $6)`, t.SessionID, t.PreviousTurnID,
		nullStr(t.IdempotencyKey), t.Status == forge.TurnRunning, bt.ExpectTip != nil, expect)
	if c := bt.Claim; c != nil {
		// The turn's seqs are reserved here (the session row is locked).
		b.Queue(`SELECT claim_seqs($1, $2, $3)`, t.SessionID, c.Above, c.Through)
	}
	if bt.AgentName != "" {
		// The agent row may be this replica's cached one (AgentForTurn).
		b.Queue(`SELECT agent_is_current($1, $2, $3)`, bt.AgentName, t.AgentID, t.AgentVersion)
	}
	// lineage and depth (migration 0006): a turn chaining from the
	// session's tip (locked by begin_turn_check, moved below) continues the
	// tip's lineage; a root or a fork begins its own.
	b.Queue(`INSERT INTO turns (tenant, id, session_id, previous_turn_id, agent_id, agent_version, status, input,
			output, required_actions, error, cancel_reason, cancel_message, usage, iterations, last_seq,
			idempotency_key, created_at, ended_at, trigger, first_seq, overrides, lineage, depth)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22,
			coalesce((SELECT p.lineage FROM turns p JOIN sessions s ON s.tenant = p.tenant AND s.id = p.session_id
				WHERE p.tenant = $1 AND p.id = $4 AND p.session_id = $3 AND s.tip_turn_id = p.id), $2),
			coalesce((SELECT p.depth + 1 FROM turns p WHERE p.tenant = $1 AND p.id = $4 AND p.session_id = $3), 0))`,
		t.Tenant, t.ID, t.SessionID, t.PreviousTurnID, t.AgentID, t.AgentVersion, t.Status, v.input,
		v.output, v.actions, v.errJSON, t.CancelReason, v.cancelMsg, v.usage, t.Iterations, t.LastSeq,
		nullStr(t.IdempotencyKey), t.CreatedAt, t.EndedAt, v.trigger, firstSeqOf(evs, t.ID), v.overrides)
	queueMessages(b, insertMessagesSQL, sc, msgs)
	queueParts(b, insertPartsSQL, sc, parts)
	queuePacks(b, sc, packs)
	delivered, err := s.queueWebhooks(b, sc, evs)
	if err != nil {
		return err
	}
	b.Queue(`UPDATE sessions SET tip_turn_id = $3, updated_at = $4 WHERE tenant = $1 AND id = $2`,
		t.Tenant, t.SessionID, t.ID, s.now())
	if bt.Lease != nil && t.Status == forge.TurnRunning {
		b.Queue(`INSERT INTO turn_leases (tenant, turn_id, session_id, owner, expires_at) VALUES ($1, $2, $3, $4, now() + $5)`,
			t.Tenant, t.ID, t.SessionID, bt.Lease.Owner, bt.Lease.TTL)
	}
	if err := s.write(ctx, b); err != nil {
		// A refusal may come from a stale cached row (a tip another
		// replica moved, a deleted session, an agent updated elsewhere):
		// the caller's retry reads it afresh.
		if errors.As(err, new(agentChanged)) {
			s.cache.dropAgent(t.Tenant, bt.AgentName)
		} else {
			s.cache.dropSession(t.Tenant, t.SessionID)
		}
		return err
	}
	s.cache.movedTip(t.Tenant, t.SessionID, t.ID)
	delivered()
	if t.Ended() && len(packs) > 0 {
		s.pk.Add(eventpack.TurnKey{Tenant: t.Tenant, Session: t.SessionID, Turn: t.ID})
	}
	storeutil.Begun(bt, &t)
	return nil
}

// Commit writes one batch of a running turn: one round trip. The UPDATE of
// the turn row is the fence: it only matches while the turn is running,
// its row lock orders racing writers, and fenced() raises when it matched
// nothing, which undoes the whole batch. So once a terminal status is
// committed every later batch for the turn fails with ErrTurnEnded and
// writes nothing.
//
// The terminal write also adds the turn's usage to the session's total, so
// each ended turn is counted once.
func (s *Store) Commit(ctx context.Context, cb *forge.Batch) error {
	t, evs, maxSeq, err := storeutil.Commit(cb, s.now)
	if err != nil {
		return err
	}
	var v turnVals
	if cb.Turn != nil {
		if v, err = encodeTurn(&t); err != nil {
			return err
		}
	}
	sc := scope{tenant: cb.Tenant, session: cb.SessionID, turn: cb.TurnID}
	msgs, err := s.encodeMessages(cb.Messages, nil)
	if err != nil {
		return err
	}
	msgs.dedup()
	parts := &partRows{}
	if err := s.encodeParts(parts, "", cb.Parts); err != nil {
		return err
	}
	parts.dedup()
	if evs, err = s.prepareEvents(evs); err != nil {
		return err
	}
	packs, err := eventpack.Plain(evs, cb.TurnID)
	if err != nil {
		return err
	}
	first := firstSeqOf(evs, cb.TurnID)
	var snap *string
	if cb.Snapshot != nil {
		c := *cb.Snapshot
		c.TurnID = cb.TurnID
		if snap, err = encJSON(&c); err != nil {
			return err
		}
	}

	var last int64
	scanLast := func(r pgx.Row) error { return r.Scan(&last) }
	b := batch(cb.Tenant)
	sessionLocked := false // by an UPDATE of its row queued below
	if cb.Owner != "" {
		// Checked first: a writer that lost the turn's lease writes
		// nothing, and a takeover waits for a batch in flight.
		b.Queue(`SELECT lease_held($1, $2)`, cb.TurnID, cb.Owner)
	}
	if cb.Turn != nil {
		b.Queue(`WITH u AS (
				UPDATE turns SET status = $4, output = $5, required_actions = $6, error = $7, cancel_reason = $8,
					usage = $9, iterations = $10, last_seq = greatest(last_seq, $11, $12), ended_at = $13,
					cancel_message = $14, first_seq = coalesce(first_seq, $15)
				WHERE tenant = $1 AND session_id = $2 AND id = $3 AND status = 'running'
				RETURNING last_seq
			)
			SELECT fenced((SELECT last_seq FROM u), $2, $3)`,
			cb.Tenant, cb.SessionID, cb.TurnID, t.Status, v.output, v.actions, v.errJSON, t.CancelReason,
			v.usage, t.Iterations, t.LastSeq, maxSeq, t.EndedAt, v.cancelMsg, first).QueryRow(scanLast)
		if t.Ended() && t.Usage != (forge.Usage{}) {
			// The fence passed, so this is the turn's one terminal write:
			// its usage joins the session's total in the same transaction.
			u := t.Usage
			b.Queue(`UPDATE sessions SET usage_input_tokens = usage_input_tokens + $3,
					usage_output_tokens = usage_output_tokens + $4, usage_reasoning_tokens = usage_reasoning_tokens + $5,
					usage_cache_read_tokens = usage_cache_read_tokens + $6,
					usage_cache_write_tokens = usage_cache_write_tokens + $7, usage_cost = usage_cost + $8
				WHERE tenant = $1 AND id = $2`,
				cb.Tenant, cb.SessionID, u.InputTokens, u.OutputTokens, u.ReasoningTokens, u.CacheReadTokens,
				u.CacheWriteTokens, u.Cost)
			sessionLocked = true
		}
	} else {
		b.Queue(`WITH u AS (
				UPDATE turns SET last_seq = greatest(last_seq, $4), first_seq = coalesce(first_seq, $5)
				WHERE tenant = $1 AND session_id = $2 AND id = $3 AND status = 'running'
				RETURNING last_seq
			)
			SELECT fenced((SELECT last_seq FROM u), $2, $3)`,
			cb.Tenant, cb.SessionID, cb.TurnID, maxSeq, first).QueryRow(scanLast)
	}
	queueMessages(b, upsertMessagesSQL, sc, msgs)
	queueParts(b, upsertPartsSQL, sc, parts)
	queuePacks(b, sc, packs)
	delivered, err := s.queueWebhooks(b, sc, evs)
	if err != nil {
		return err
	}
	var noneQueued bool
	if cb.Turn != nil && t.Ended() {
		b.Queue(`DELETE FROM turn_leases WHERE tenant = $1 AND turn_id = $2`, cb.Tenant, cb.TurnID)
		// Whether a turn waits (so the engine reads none when none does).
		// The session row is locked first, as the usage above locks it
		// and as a queued turn's promotion does: a turn queued after the
		// look below is promoted once this commits, by its own request
		// (an earlier promotion made this wait, and failed on the running
		// turn; then the look, a statement of its own, sees that turn).
		if !sessionLocked {
			b.Queue(`SELECT FROM sessions WHERE tenant = $1 AND id = $2 FOR NO KEY UPDATE`, cb.Tenant, cb.SessionID)
		}
		b.Queue(`SELECT NOT EXISTS (SELECT FROM turns WHERE tenant = $1 AND session_id = $2 AND status = 'queued')`,
			cb.Tenant, cb.SessionID).QueryRow(func(r pgx.Row) error { return r.Scan(&noneQueued) })
	}
	if snap != nil {
		b.Queue(`INSERT INTO snapshots (tenant, turn_id, session_id, body) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, turn_id) DO UPDATE SET body = excluded.body`,
			cb.Tenant, cb.TurnID, cb.SessionID, *snap)
	}
	write := s.write
	if isCheckpoint(cb) {
		write = func(ctx context.Context, b *pgx.Batch) error { return s.checkpoints.write(ctx, s, b) }
	}
	if err := write(ctx, b); err != nil {
		return err
	}
	delivered()
	if cb.Turn != nil && t.Ended() {
		// Its rows are final: the packer packs its log against them.
		s.pk.Add(eventpack.TurnKey{Tenant: cb.Tenant, Session: cb.SessionID, Turn: cb.TurnID})
		cb.NoneQueued = noneQueued
	}
	storeutil.Committed(cb, &t, last)
	return nil
}

// isCheckpoint reports whether cb only rewrites a running turn's part rows
// (the engine's checkpoint of streaming text): such writes are grouped.
func isCheckpoint(cb *forge.Batch) bool {
	return cb.Turn == nil && cb.Snapshot == nil && len(cb.Events) == 0 && len(cb.Messages) == 0 && len(cb.Parts) > 0
}

const turnCols = `t.tenant, t.id, t.session_id, t.previous_turn_id, t.agent_id, t.agent_version, t.status,
	t.input, t.output, t.required_actions, t.error, t.cancel_reason, t.cancel_message, t.usage, t.iterations,
	t.last_seq, t.idempotency_key, t.created_at, t.ended_at, t.trigger, t.overrides`

func scanTurn(sc pgx.Row) (*forge.Turn, error) {
	var (
		t                               forge.Turn
		input, output, actions, errJSON *string
		usage, key, trig, overrides     *string
		cancelMsg                       *[]byte
		created                         time.Time
		ended                           *time.Time
	)
	if err := sc.Scan(&t.Tenant, &t.ID, &t.SessionID, &t.PreviousTurnID, &t.AgentID, &t.AgentVersion, &t.Status,
		&input, &output, &actions, &errJSON, &t.CancelReason, &cancelMsg, &usage, &t.Iterations,
		&t.LastSeq, &key, &created, &ended, &trig, &overrides); err != nil {
		return nil, err
	}
	t.CancelMessage = fromOptBytes(cancelMsg)
	if key != nil {
		t.IdempotencyKey = *key
	}
	t.CreatedAt = utc(created)
	t.EndedAt = utcPtr(ended)
	for _, f := range []struct {
		s   *string
		dst any
	}{{input, &t.Input}, {output, &t.Output}, {actions, &t.RequiredActions}, {errJSON, &t.Error}, {usage, &t.Usage}, {trig, &t.Trigger}, {overrides, &t.Overrides}} {
		if err := decJSON(f.s, f.dst); err != nil {
			return nil, fmt.Errorf("turn %s: %w", t.ID, err)
		}
	}
	return &t, nil
}

func scanTurns(rows pgx.Rows, out *[]*forge.Turn) error {
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			return err
		}
		*out = append(*out, t)
	}
	return rows.Err()
}

// oneTurn reads one turn of a live session.
func (s *Store) oneTurn(ctx context.Context, tenant, where string, args []any, format string, fargs ...any) (*forge.Turn, error) {
	var t *forge.Turn
	b := batch(tenant)
	b.Queue(`SELECT `+turnCols+` FROM turns t
		JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.deleted_at IS NULL
		WHERE `+where, args...).QueryRow(func(r pgx.Row) error {
		var err error
		t, err = scanTurn(r)
		return notFound(err, format, fargs...)
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return t, nil
}

// GetTurn returns a turn of a live session.
func (s *Store) GetTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error) {
	return s.oneTurn(ctx, tenant, `t.tenant = $1 AND t.session_id = $2 AND t.id = $3`,
		[]any{tenant, sessionID, turnID}, "turn %s not found", turnID)
}

// GetTurnByID returns a turn of a live session by its id alone.
func (s *Store) GetTurnByID(ctx context.Context, tenant, turnID string) (*forge.Turn, error) {
	return s.oneTurn(ctx, tenant, `t.tenant = $1 AND t.id = $2`,
		[]any{tenant, turnID}, "turn %s not found", turnID)
}

// TurnByIdempotencyKey finds the turn created with key in a live session.
func (s *Store) TurnByIdempotencyKey(ctx context.Context, tenant, sessionID, key string) (*forge.Turn, error) {
	if err := storeutil.TurnKey(key); err != nil {
		return nil, err
	}
	return s.oneTurn(ctx, tenant, `t.tenant = $1 AND t.session_id = $2 AND t.idempotency_key = $3`,
		[]any{tenant, sessionID, key}, "no turn with idempotency key %q", key)
}

// ListTurns lists a live session's turns, oldest first.
func (s *Store) ListTurns(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Turn, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Turn
	b := batch(tenant)
	liveSession(b, tenant, sessionID)
	b.Queue(`SELECT `+turnCols+` FROM turns t WHERE t.tenant = $1 AND t.session_id = $2 AND t.id > $3
		ORDER BY t.id LIMIT $4`, tenant, sessionID, opts.Cursor, limit+1).
		Query(func(rows pgx.Rows) error { return scanTurns(rows, &out) })
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(t *forge.Turn) string { return t.ID })
	return out, next, nil
}

// RunningTurns lists every running turn of every tenant, for recovery, in
// two round trips. No query of the runtime role sees across tenants: the
// SECURITY DEFINER function running_turns (owned by the lookup role, whose
// policy admits running turns only) returns the ids of the running turns
// and their tenants, and the turns are then read tenant by tenant through
// the ordinary policy, in one batch.
func (s *Store) RunningTurns(ctx context.Context) ([]*forge.Turn, error) {
	return s.turnsByRef(ctx, `SELECT tenant, id FROM running_turns()`)
}

// turnsByRef reads the turns refs names (see byRef) that are still
// running.
func (s *Store) turnsByRef(ctx context.Context, refs string) ([]*forge.Turn, error) {
	var out []*forge.Turn
	err := s.byRef(ctx, refs, func(b *pgx.Batch, tenant string, ids []string) {
		b.Queue(`SELECT `+turnCols+` FROM turns t WHERE t.tenant = $1 AND t.id = ANY($2) AND t.status = 'running'
			ORDER BY t.session_id`, tenant, ids).Query(func(rows pgx.Rows) error { return scanTurns(rows, &out) })
	})
	return out, err
}

// byRef runs refs, a query of a SECURITY DEFINER function returning
// (tenant, id) across tenants, then the reads queue queues for each
// tenant's ids, tenant by tenant through the ordinary policy: two round
// trips, one when refs returns nothing. args are refs's arguments.
func (s *Store) byRef(ctx context.Context, refs string, queue func(b *pgx.Batch, tenant string, ids []string), args ...any) error {
	type ref struct{ tenant, id string }
	var found []ref
	b := &pgx.Batch{}
	b.Queue(refs, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r ref
			if err := rows.Scan(&r.tenant, &r.id); err != nil {
				return err
			}
			found = append(found, r)
		}
		return rows.Err()
	})
	if err := s.read(ctx, b); err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	b = &pgx.Batch{}
	for i := 0; i < len(found); {
		tenant := found[i].tenant
		var ids []string
		for ; i < len(found) && found[i].tenant == tenant; i++ {
			ids = append(ids, found[i].id)
		}
		b.Queue(setTenant, tenant)
		queue(b, tenant, ids)
	}
	return s.read(ctx, b)
}

// GetSnapshot returns the snapshot written by the turn's last batch that
// carried one.
func (s *Store) GetSnapshot(ctx context.Context, tenant, turnID string) (*forge.Snapshot, error) {
	var body string
	b := batch(tenant)
	b.Queue(snapshotSQL, tenant, turnID).
		QueryRow(func(r pgx.Row) error { return notFound(r.Scan(&body), "no snapshot for turn %s", turnID) })
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return decodeSnapshot(turnID, body)
}

// snapshotSQL reads a turn's snapshot: $1 tenant, $2 turn.
const snapshotSQL = `SELECT body FROM snapshots WHERE tenant = $1 AND turn_id = $2`

func decodeSnapshot(turnID, body string) (*forge.Snapshot, error) {
	var snap forge.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		return nil, fmt.Errorf("postgres: decode snapshot of %s: %w", turnID, err)
	}
	return &snap, nil
}
