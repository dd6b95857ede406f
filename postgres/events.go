package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// The event log is stored in packs (internal/eventpack), as in the SQLite
// store: each row of event_log holds a run of a session's events. A
// write's events go in packs without rows, in the write's round trip; a
// running turn's are marked with its id (its rows still change) and, once
// the turn has ended, the Store's packer packs them again against the
// turn's rows, in two round trips of its own (read, then swap). Events
// outside turns stay packed without rows: their rows would have to be
// read back first. Rows of the log written before (events) stay where
// they are and are read beside the packs.

// dictCacheBytes bounds the dictionaries kept for replays of recently
// packed turns.
const dictCacheBytes = 16 << 20

// prepareEvents checks a write's stored events and returns them in seq
// order with their times filled in. A seq twice is ErrConflict.
func (s *Store) prepareEvents(evs []forge.Event) ([]forge.Event, error) {
	for i := range evs {
		if err := storeutil.CheckEvent(&evs[i]); err != nil {
			return nil, err
		}
	}
	return eventpack.Prepare(evs, s.now())
}

// plainLog packs a write's events without rows; those of the running turn
// open, when set, wait for its end.
func (s *Store) plainLog(evs []forge.Event, open string) ([]eventpack.Pack, error) {
	evs, err := s.prepareEvents(evs)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	return eventpack.Plain(evs, open)
}

// packArrays are packs as the columns of an unnest.
type packArrays struct {
	first, last []int64
	turn        []*string
	body        [][]byte
}

func arraysOf(packs []eventpack.Pack) packArrays {
	var a packArrays
	for _, p := range packs {
		a.first = append(a.first, p.First)
		a.last = append(a.last, p.Last)
		var open *string
		if p.Open != "" {
			open = &p.Open
		}
		a.turn = append(a.turn, open)
		a.body = append(a.body, p.Body)
	}
	return a
}

// packsSQL inserts packs ($3..$6) after event_log_above checked that the
// first ($7) is above the log ($8: whether to write at all).
const packsSQL = `INSERT INTO event_log (tenant, session_id, first_seq, last_seq, turn_id, body)
	SELECT $1, $2, u.f, u.l, u.t, u.b FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::bytea[]) AS u(f, l, t, b)
	WHERE CASE WHEN $8::boolean THEN event_log_above($2, $7) ELSE false END`

// queuePacks appends packs to the write's batch; a seq at or below the
// log's last is ErrConflict.
func queuePacks(b *pgx.Batch, sc scope, packs []eventpack.Pack) {
	if len(packs) == 0 {
		return
	}
	a := arraysOf(packs)
	b.Queue(packsSQL, sc.tenant, sc.session, a.first, a.last, a.turn, a.body, packs[0].First, true)
}

// firstSeqOf is the lowest seq of turn's events in evs (in seq order), or
// nil.
func firstSeqOf(evs []forge.Event, turn string) *int64 {
	for _, e := range evs {
		if e.TurnID != nil && *e.TurnID == turn {
			return &e.Seq
		}
	}
	return nil
}

// ListEvents returns stored events of a live session in seq order: one
// round trip for the packs (and the old log's rows), one more for the rows
// the packs refer to unless the dictionary cache has them, and more only
// when a page needs more packs than the first guess.
func (s *Store) ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error) {
	limit := storeutil.Limit(q.Limit, storeutil.DefaultEventLimit)
	after, before := q.After, storeutil.EventsBefore(q.Before)
	var (
		out, old []forge.Event
		packs    []packRow
		noPacks  bool
	)
	// A guess of the packs a page needs: a trivial turn packs 9 events.
	n := min(256, limit/8+2)
	b := batch(tenant)
	liveSession(b, tenant, q.SessionID)
	fromTurn := ""
	if q.TurnID != "" {
		// A turn's events lie within its seqs.
		b.Queue(`SELECT first_seq, last_seq FROM turns WHERE tenant = $1 AND id = $2 AND session_id = $3`,
			tenant, q.TurnID, q.SessionID).QueryRow(func(r pgx.Row) error {
			var first *int64
			var last int64
			err := r.Scan(&first, &last)
			switch {
			case errors.Is(err, pgx.ErrNoRows) || err == nil && first == nil:
				noPacks = true
				return nil
			case err != nil:
				return err
			}
			after, before = max(after, *first-1), min(before, last+1)
			return nil
		})
		fromTurn = ` AND first_seq >= coalesce((SELECT first_seq - 1 FROM turns WHERE tenant = $1 AND id = $6 AND session_id = $2), 0)
			AND first_seq <= coalesce((SELECT last_seq FROM turns WHERE tenant = $1 AND id = $6 AND session_id = $2), 0)`
	}
	args := []any{tenant, q.SessionID, after, before, n}
	if q.TurnID != "" {
		args = append(args, q.TurnID)
	}
	// The pack holding after, if any, then those after it.
	b.Queue(`SELECT first_seq, last_seq, body FROM event_log
		WHERE tenant = $1 AND session_id = $2 AND first_seq < $4 AND first_seq >= coalesce((SELECT first_seq FROM event_log
			WHERE tenant = $1 AND session_id = $2 AND first_seq <= $3 ORDER BY first_seq DESC LIMIT 1), 0)`+fromTurn+`
		ORDER BY first_seq LIMIT $5`, args...).Query(func(rows pgx.Rows) error {
		var err error
		packs, err = scanPacks(rows)
		return err
	})
	queueOldEvents(b, tenant, q, limit, &old)
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	for !noPacks {
		got := len(packs) == n
		evs, err := s.decodePacks(ctx, tenant, q.SessionID, packs)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Seq > after && e.Seq < before && (q.TurnID == "" || e.TurnID != nil && *e.TurnID == q.TurnID) {
				out = append(out, e)
			}
		}
		if !got || len(out) >= limit {
			break
		}
		// More packs.
		from := packs[len(packs)-1].first + 1
		n = min(1024, 2*n)
		b := batch(tenant)
		b.Queue(`SELECT first_seq, last_seq, body FROM event_log
			WHERE tenant = $1 AND session_id = $2 AND first_seq >= $3 AND first_seq < $4 ORDER BY first_seq LIMIT $5`,
			tenant, q.SessionID, from, before, n).Query(func(rows pgx.Rows) error {
			var err error
			packs, err = scanPacks(rows)
			return err
		})
		if err := s.read(ctx, b); err != nil {
			return nil, err
		}
	}
	return mergeEvents(out, old, limit), nil
}

// packRow is a row of event_log being read.
type packRow struct {
	first, last int64
	body        []byte
	head        eventpack.Header
}

func scanPacks(rows pgx.Rows) ([]packRow, error) {
	var out []packRow
	for rows.Next() {
		var r packRow
		if err := rows.Scan(&r.first, &r.last, &r.body); err != nil {
			return nil, err
		}
		var err error
		if r.head, err = eventpack.ReadHeader(r.body); err != nil {
			return nil, fmt.Errorf("event log at seq %d: %w", r.first, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// decodePacks decodes packs against the rows they refer to: from the
// dictionary cache, or read in one round trip. A pack that does not
// decode against cached bytes is decoded again against its rows.
func (s *Store) decodePacks(ctx context.Context, tenant, sessionID string, packs []packRow) ([]forge.Event, error) {
	var refs []eventpack.Ref
	for _, p := range packs {
		refs = append(refs, p.head.Refs...)
	}
	rows, err := s.readRows(ctx, tenant, refs, func(r eventpack.Ref) bool { return s.dicts.Has(tenant, r) })
	if err != nil {
		return nil, err
	}
	src := s.dicts.Source(tenant, rows)
	var out []forge.Event
	for _, p := range packs {
		evs, err := eventpack.Decode(p.body, sessionID, src)
		if errors.Is(err, eventpack.ErrRowsChanged) {
			for _, r := range p.head.Refs {
				s.dicts.Drop(tenant, r)
			}
			var fresh *eventpack.Rows
			if fresh, err = s.readRows(ctx, tenant, p.head.Refs, nil); err == nil {
				evs, err = eventpack.Decode(p.body, sessionID, s.dicts.Source(tenant, fresh))
			}
		}
		if err != nil {
			return nil, storeutil.DBError("postgres", fmt.Errorf("event log of session %s at seq %d: %w", sessionID, p.first, err))
		}
		out = append(out, evs...)
	}
	return out, nil
}

// readRows reads, in one round trip, the rows refs name but those skip
// says are not needed.
func (s *Store) readRows(ctx context.Context, tenant string, refs []eventpack.Ref, skip func(eventpack.Ref) bool) (*eventpack.Rows, error) {
	var turnIDs, wholeIDs, msgIDs []string
	for _, r := range refs {
		if skip != nil && skip(r) {
			continue
		}
		switch r.Kind {
		case eventpack.RefTurn:
			turnIDs = append(turnIDs, r.ID)
		case eventpack.RefWholeTurn:
			turnIDs = append(turnIDs, r.ID)
			wholeIDs = append(wholeIDs, r.ID)
		case eventpack.RefMessage:
			msgIDs = append(msgIDs, r.ID)
		case eventpack.RefPart:
			msgIDs = append(msgIDs, r.Message)
		}
	}
	rows := eventpack.NewRows()
	if len(turnIDs) == 0 && len(msgIDs) == 0 {
		return rows, nil
	}
	b := batch(tenant)
	queueRows(b, tenant, dedup(turnIDs), dedup(wholeIDs), dedup(msgIDs), rows)
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return rows, nil
}

func dedup(ids []string) []string { return slices.Compact(slices.Sorted(slices.Values(ids))) }

// queueRows queues the reads of turns by id and of messages (with their
// parts) by id or by turn into rows, as the packer and the readers both
// read them: the bytes of a dictionary depend on it.
func queueRows(b *pgx.Batch, tenant string, turnIDs, wholeIDs, msgIDs []string, rows *eventpack.Rows) {
	if len(turnIDs) > 0 {
		b.Queue(`SELECT `+turnCols+` FROM turns t WHERE t.tenant = $1 AND t.id = ANY($2)`, tenant, turnIDs).
			Query(func(rs pgx.Rows) error {
				var ts []*forge.Turn
				if err := scanTurns(rs, &ts); err != nil {
					return err
				}
				for _, t := range ts {
					rows.AddTurn(t)
				}
				return nil
			})
	}
	if len(wholeIDs) > 0 || len(msgIDs) > 0 {
		b.Queue(`WITH page AS (SELECT * FROM messages WHERE tenant = $1 AND turn_id = ANY($2)
				UNION SELECT * FROM messages WHERE tenant = $1 AND id = ANY($3))`+pageWithParts, tenant, wholeIDs, msgIDs).
			Query(func(rs pgx.Rows) error {
				msgs, err := scanPage(rs, tenant)
				for _, m := range msgs {
					rows.AddMessage(m)
				}
				return err
			})
	}
}

// queueOldEvents queues the read of the log written before packs
// (migration 0005).
func queueOldEvents(b *pgx.Batch, tenant string, q forge.EventQuery, limit int, out *[]forge.Event) {
	before := storeutil.EventsBefore(q.Before)
	query := `SELECT seq, id, type, session_id, turn_id, thread_id, created_at, data FROM events
		WHERE tenant = $1 AND session_id = $2 AND seq > $3 AND seq < $4 ORDER BY seq LIMIT $5`
	args := []any{tenant, q.SessionID, q.After, before, limit}
	if q.TurnID != "" {
		// Uses events_turn: one turn's events without scanning the session.
		query = `SELECT seq, id, type, session_id, turn_id, thread_id, created_at, data FROM events
			WHERE tenant = $1 AND turn_id = $6 AND session_id = $2 AND seq > $3 AND seq < $4 ORDER BY seq LIMIT $5`
		args = append(args, q.TurnID)
	}
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
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
			*out = append(*out, e)
		}
		return rows.Err()
	})
}

// mergeEvents merges two seq-ordered lists (their seqs are distinct) and
// keeps the first limit.
func mergeEvents(a, b []forge.Event, limit int) []forge.Event {
	if len(b) == 0 {
		return a[:min(len(a), limit)]
	}
	out := make([]forge.Event, 0, min(limit, len(a)+len(b)))
	for len(out) < limit && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || len(a) > 0 && a[0].Seq < b[0].Seq {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// FlushEventLog packs now the log of every ended turn still waiting for
// it (tests, and benchmarks that measure the packed size).
func (s *Store) FlushEventLog(ctx context.Context) error { return s.pk.Flush(ctx) }

// packWork is the Store as its packer sees it.
type packWork struct{ s *Store }

func (w packWork) PackTurns(ctx context.Context, keys []eventpack.TurnKey) error {
	return w.s.packTurns(ctx, keys)
}

// UnpackedTurns lists the turns whose packs wait, across tenants, through
// the SECURITY DEFINER function unpacked_turns (ids only).
func (w packWork) UnpackedTurns(ctx context.Context) ([]eventpack.TurnKey, error) {
	var out []eventpack.TurnKey
	b := &pgx.Batch{}
	b.Queue(`SELECT tenant, session_id, turn_id FROM unpacked_turns()`).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k eventpack.TurnKey
			if err := rows.Scan(&k.Tenant, &k.Session, &k.Turn); err != nil {
				return err
			}
			out = append(out, k)
		}
		return rows.Err()
	})
	return out, w.s.read(ctx, b)
}

// packTurns packs the logs of ended turns: per tenant, one round trip to
// read their packs and rows and one to swap the packs.
func (s *Store) packTurns(ctx context.Context, keys []eventpack.TurnKey) error {
	byTenant := map[string][]eventpack.TurnKey{}
	var tenants []string
	for _, k := range keys {
		if byTenant[k.Tenant] == nil {
			tenants = append(tenants, k.Tenant)
		}
		byTenant[k.Tenant] = append(byTenant[k.Tenant], k)
	}
	for _, tenant := range tenants {
		if err := s.packTenantTurns(ctx, tenant, byTenant[tenant]); err != nil {
			return err
		}
	}
	return nil
}

// turnLog is an ended turn's log being packed.
type turnLog struct {
	t     *forge.Turn
	first int64
	evs   []forge.Event
	olds  []int64
	stops []int64
	packs []eventpack.Pack
	refs  []eventpack.Ref
}

func (s *Store) packTenantTurns(ctx context.Context, tenant string, keys []eventpack.TurnKey) error {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.Turn
	}
	var (
		logs   []*turnLog
		stored []struct {
			session string
			first   int64
			turn    *string
			body    []byte
		}
	)
	rows := eventpack.NewRows()
	b := batch(tenant)
	b.Queue(`SELECT `+turnCols+`, t.first_seq FROM turns t
		WHERE t.tenant = $1 AND t.id = ANY($2) AND t.status <> 'running' AND t.first_seq IS NOT NULL`, tenant, ids).
		Query(func(rs pgx.Rows) error {
			for rs.Next() {
				var first int64
				t, err := scanTurn(withExtra(rs, &first))
				if err != nil {
					return err
				}
				logs = append(logs, &turnLog{t: t, first: first})
			}
			return rs.Err()
		})
	// Each turn's part of the log: its own packs, and any other among them.
	b.Queue(`SELECT e.session_id, e.first_seq, e.turn_id, e.body FROM turns t
		JOIN event_log e ON e.tenant = t.tenant AND e.session_id = t.session_id
			AND e.first_seq BETWEEN t.first_seq AND t.last_seq
		WHERE t.tenant = $1 AND t.id = ANY($2) AND t.status <> 'running'
		ORDER BY e.session_id, e.first_seq`, tenant, ids).Query(func(rs pgx.Rows) error {
		for rs.Next() {
			var r struct {
				session string
				first   int64
				turn    *string
				body    []byte
			}
			if err := rs.Scan(&r.session, &r.first, &r.turn, &r.body); err != nil {
				return err
			}
			stored = append(stored, r)
		}
		return rs.Err()
	})
	queueRows(b, tenant, nil, ids, nil, rows)
	if err := s.read(ctx, b); err != nil {
		return err
	}
	for _, r := range stored {
		var l *turnLog
		for _, c := range logs {
			if c.t.SessionID == r.session && r.first >= c.first && r.first <= c.t.LastSeq {
				l = c
			}
		}
		if l == nil {
			continue
		}
		if r.turn == nil || *r.turn != l.t.ID {
			l.stops = append(l.stops, r.first)
			continue
		}
		dec, err := eventpack.Decode(r.body, r.session, eventpack.NewRows())
		if err != nil {
			return storeutil.DBError("postgres", fmt.Errorf("event log of turn %s at seq %d: %w", l.t.ID, r.first, err))
		}
		l.evs = append(l.evs, dec...)
		l.olds = append(l.olds, r.first)
	}
	b = batch(tenant)
	var done []*turnLog
	for _, l := range logs {
		if len(l.olds) == 0 {
			continue // packed already
		}
		rows.AddTurn(l.t)
		slices.SortFunc(l.evs, func(a, b forge.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		slices.Sort(l.stops)
		var err error
		if l.packs, l.refs, err = eventpack.PackTurn(l.t, l.evs, l.stops, rows); err != nil {
			return storeutil.DBError("postgres", err)
		}
		a := arraysOf(l.packs)
		b.Queue(`SELECT event_log_swap($1, $2, $3, $4, $5, $6)`, l.t.SessionID, l.t.ID, l.olds, a.first, a.last, a.body)
		done = append(done, l)
	}
	if len(done) == 0 {
		return nil
	}
	if err := s.write(ctx, b); err != nil {
		return err
	}
	// Replays of these turns come soon, if at all: their rows' bytes are
	// kept for them.
	for _, l := range done {
		for _, ref := range l.refs {
			if bs, err := rows.RowBytes(nil, ref); err == nil {
				s.dicts.Put(tenant, ref, bs)
			}
		}
	}
	return nil
}

// withExtra is a row whose Scan takes the turn's columns, then extra
// destinations.
func withExtra(r pgx.Row, extra ...any) pgx.Row { return extraRow{r, extra} }

type extraRow struct {
	r     pgx.Row
	extra []any
}

func (e extraRow) Scan(dest ...any) error { return e.r.Scan(append(dest, e.extra...)...) }
