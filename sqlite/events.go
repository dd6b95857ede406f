package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// The event log is stored in packs (internal/eventpack): each row of
// event_log holds a run of a session's events with consecutive seqs.
// A write stores its events as one pack per run of events of one turn;
// the packs of a running turn hold them against the static dictionary
// only (turn_id names the turn: its rows still change), and once the turn
// has ended the packer packs all of its events again against the turn's
// rows, now final (packer.go). Events outside turns are packed at once against
// the messages their write inserts, which never change. Rows of the log
// written before (table events, schema version 7 and earlier) stay where
// they are and are read beside the packs.

// dictCacheBytes bounds the dictionaries kept for replays of recently
// packed turns (a trivial turn's is about 2.5 KB).
const dictCacheBytes = 16 << 20

func packArgs(sc scope, p eventpack.Pack) []any {
	var open any
	if p.Open != "" {
		open = p.Open
	}
	return []any{sc.tenant, sc.session, p.First, p.Last, open, p.Body}
}

var logInsert = newMultiInsert("event seq", `INSERT INTO event_log (tenant, session_id, first_seq, last_seq,
	turn_id, body) VALUES `, 6, "")

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

// checkSeqs refuses a write whose first seq is not above every stored seq
// of the session: seqs are assigned in order and never reused, so a lower
// one is a seq used twice (ErrConflict).
func (s *Store) checkSeqs(x *tx, sc scope, first int64) error {
	query := `SELECT coalesce((SELECT last_seq FROM event_log WHERE tenant = ?1 AND session_id = ?2
		ORDER BY first_seq DESC LIMIT 1), 0)`
	if s.oldLog {
		query = `SELECT max(
			coalesce((SELECT last_seq FROM event_log WHERE tenant = ?1 AND session_id = ?2 ORDER BY first_seq DESC LIMIT 1), 0),
			coalesce((SELECT max(seq) FROM events WHERE tenant = ?1 AND session_id = ?2), 0))`
	}
	var top int64
	if err := x.queryRow(query, sc.tenant, sc.session).Scan(&top); err != nil {
		return dbErr(err)
	}
	if first <= top {
		return forge.Errorf(forge.ErrConflict, "event seq %d already exists (the log of session %s is at %d)", first, sc.session, top)
	}
	return nil
}

// insertLog appends packs to the log after checking their seqs.
func (s *Store) insertLog(x *tx, sc scope, packs []eventpack.Pack) error {
	if len(packs) == 0 {
		return nil
	}
	if err := s.checkSeqs(x, sc, packs[0].First); err != nil {
		return err
	}
	args := make([][]any, len(packs))
	for i, p := range packs {
		args[i] = packArgs(sc, p)
	}
	return logInsert.exec(x, args)
}

// plainLog packs a write's events without rows (events about rows that
// may still change: stints, monologue swaps).
func (s *Store) plainLog(evs []forge.Event) ([]eventpack.Pack, error) {
	evs, err := s.prepareEvents(evs)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	return eventpack.Plain(evs, "")
}

// queryMessages reads messages with their parts.
func queryMessages(x *tx, tenant, query string, args ...any) ([]*forge.Message, error) {
	rs, err := x.query(query, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	msgs, err := scanMessages(rs, tenant)
	if err != nil {
		return nil, err
	}
	if err := loadParts(x, tenant, msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

// looseLog packs events outside turns against the messages of their write
// (msgIDs, read back as stored: they never change).
func looseLog(x *tx, sc scope, evs []forge.Event, msgIDs []string) ([]eventpack.Pack, error) {
	rows := eventpack.NewRows()
	if len(msgIDs) > 0 {
		ids, err := json.Marshal(msgIDs)
		if err != nil {
			return nil, err
		}
		msgs, err := queryMessages(x, sc.tenant, `SELECT `+msgCols+` FROM messages m
			WHERE m.tenant = ? AND m.id IN (SELECT value FROM json_each(?))`, sc.tenant, string(ids))
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.SessionID == sc.session {
				rows.AddMessage(m)
			}
		}
	}
	packs, _, err := eventpack.Against(evs, rows, "")
	return packs, err
}

// ListEvents returns stored events of a live session in seq order.
func (s *Store) ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error) {
	limit := storeutil.Limit(q.Limit, storeutil.DefaultEventLimit)
	after, before := q.After, storeutil.EventsBefore(q.Before)
	var out []forge.Event
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, q.SessionID); err != nil {
			return err
		}
		packs := true
		if q.TurnID != "" {
			// A turn's events lie within its seqs.
			var first sql.NullInt64
			var last int64
			err := x.queryRow(`SELECT first_seq, last_seq FROM turns WHERE tenant = ? AND id = ? AND session_id = ?`,
				tenant, q.TurnID, q.SessionID).Scan(&first, &last)
			switch {
			case errors.Is(err, sql.ErrNoRows) || err == nil && !first.Valid:
				packs = false
			case err != nil:
				return dbErr(err)
			default:
				after, before = max(after, first.Int64-1), min(before, last+1)
			}
		}
		var fromPacks []forge.Event
		if packs {
			var err error
			if fromPacks, err = s.readPacks(x, tenant, q, after, before, limit); err != nil {
				return err
			}
		}
		var old []forge.Event
		if s.oldLog {
			var err error
			if old, err = readOldEvents(x, tenant, q, limit); err != nil {
				return err
			}
		}
		out = mergeEvents(fromPacks, old, limit)
		return nil
	})
	return out, err
}

// packRow is a row of event_log being read.
type packRow struct {
	first, last int64
	body        []byte
	head        eventpack.Header
}

// readPacks returns at least limit events of the packs with seqs in
// (after, before) that q selects, or all of them.
func (s *Store) readPacks(x *tx, tenant string, q forge.EventQuery, after, before int64, limit int) ([]forge.Event, error) {
	var out []forge.Event
	// The pack holding after, if any, then those after it.
	query := `SELECT first_seq, last_seq, body FROM event_log
		WHERE tenant = ?1 AND session_id = ?2 AND first_seq < ?4 AND first_seq >= coalesce((SELECT first_seq FROM event_log
			WHERE tenant = ?1 AND session_id = ?2 AND first_seq <= ?3 ORDER BY first_seq DESC LIMIT 1), 0)
		ORDER BY first_seq`
	from := after
	for {
		rs, err := x.query(query, tenant, q.SessionID, from, before)
		if err != nil {
			return nil, dbErr(err)
		}
		// Enough packs to fill the page, if the turn filter keeps them all.
		var batch []packRow
		counted, more := 0, false
		for rs.Next() {
			if counted >= limit-len(out) {
				more = true
				break
			}
			var r packRow
			if err := rs.Scan(&r.first, &r.last, &r.body); err != nil {
				rs.Close()
				return nil, dbErr(err)
			}
			if r.last <= after {
				continue
			}
			if r.head, err = eventpack.ReadHeader(r.body); err != nil {
				rs.Close()
				return nil, dbErr(fmt.Errorf("event log of session %s at seq %d: %w", q.SessionID, r.first, err))
			}
			if r.first > after {
				counted += r.head.Count
			}
			batch = append(batch, r)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, dbErr(err)
		}
		evs, err := s.decodePacks(x, tenant, q.SessionID, batch)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Seq > after && e.Seq < before && (q.TurnID == "" || e.TurnID != nil && *e.TurnID == q.TurnID) {
				out = append(out, e)
			}
		}
		if !more || len(out) >= limit || len(batch) == 0 {
			return out, nil
		}
		query = `SELECT first_seq, last_seq, body FROM event_log
			WHERE tenant = ?1 AND session_id = ?2 AND first_seq >= ?3 AND first_seq < ?4 ORDER BY first_seq`
		from = batch[len(batch)-1].first + 1
	}
}

// decodePacks decodes packs against the rows they refer to: from the
// dictionary cache, or read in one query per kind of row. A pack that does
// not decode against cached bytes is decoded again against its rows.
func (s *Store) decodePacks(x *tx, tenant, sessionID string, packs []packRow) ([]forge.Event, error) {
	var refs []eventpack.Ref
	for _, p := range packs {
		refs = append(refs, p.head.Refs...)
	}
	rows, err := readRows(x, tenant, refs, func(r eventpack.Ref) bool { return s.dicts.Has(tenant, r) })
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
			if fresh, err = readRows(x, tenant, p.head.Refs, nil); err == nil {
				evs, err = eventpack.Decode(p.body, sessionID, s.dicts.Source(tenant, fresh))
			}
		}
		if err != nil {
			return nil, dbErr(fmt.Errorf("event log of session %s at seq %d: %w", sessionID, p.first, err))
		}
		out = append(out, evs...)
	}
	return out, nil
}

// readRows reads the rows refs name, but those skip says are not needed.
func readRows(x *tx, tenant string, refs []eventpack.Ref, skip func(eventpack.Ref) bool) (*eventpack.Rows, error) {
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
	if len(turnIDs) > 0 {
		list, err := idList(turnIDs)
		if err != nil {
			return nil, err
		}
		rs, err := x.query(`SELECT `+turnCols+` FROM turns t WHERE t.tenant = ? AND t.id `+list.in, tenant, list.arg)
		if err != nil {
			return nil, dbErr(err)
		}
		ts, err := scanTurns(rs)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			rows.AddTurn(t)
		}
	}
	// Two queries: with an OR between them, SQLite would scan the tenant's
	// messages instead of using an index for each.
	for _, q := range []struct {
		ids   []string
		where string
	}{{msgIDs, "m.id"}, {wholeIDs, "m.turn_id"}} {
		if len(q.ids) == 0 {
			continue
		}
		list, err := idList(q.ids)
		if err != nil {
			return nil, err
		}
		msgs, err := queryMessages(x, tenant, `SELECT `+msgCols+` FROM messages m WHERE m.tenant = ?
			AND `+q.where+` `+list.in, tenant, list.arg)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			rows.AddMessage(m)
		}
	}
	return rows, nil
}

// ids is a condition on a list of ids: "= ?" for one (the most common
// case, and a cheaper query), IN a JSON array for more.
type ids struct {
	in  string
	arg any
}

func idList(list []string) (ids, error) {
	list = slices.Compact(slices.Sorted(slices.Values(list)))
	if len(list) == 1 {
		return ids{"= ?", list[0]}, nil
	}
	b, err := json.Marshal(list)
	if err != nil {
		return ids{}, err
	}
	return ids{"IN (SELECT value FROM json_each(?))", string(b)}, nil
}

// readOldEvents reads the log written before packs (schema version 7 and
// earlier).
func readOldEvents(x *tx, tenant string, q forge.EventQuery, limit int) ([]forge.Event, error) {
	before := storeutil.EventsBefore(q.Before)
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
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []forge.Event
	for rows.Next() {
		var (
			e              forge.Event
			turn, thr, dat sql.NullString
			created        int64
		)
		if err := rows.Scan(&e.Seq, &e.ID, &e.Type, &e.SessionID, &turn, &thr, &created, &dat); err != nil {
			return nil, dbErr(err)
		}
		e.TurnID, e.ThreadID = fromNullStr(turn), fromNullStr(thr)
		e.CreatedAt = fromNano(created)
		e.Data = fromRawText(dat)
		out = append(out, e)
	}
	return out, dbErr(rows.Err())
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
