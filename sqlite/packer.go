package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
)

// Packing a turn's log.
//
// A running turn's events are stored in packs without rows (events.go):
// its rows still change. Once the turn has ended they are final, and the
// Store's packer (eventpack.Packer) packs the turn's log again against
// them, off the writer's path: it reads the turn's packs and rows on the
// read pool, encodes there, and asks the writer only to swap the rows of
// event_log (a DELETE fenced on finding exactly the packs it read, and
// an INSERT).

// FlushEventLog packs now the log of every ended turn still waiting for
// it (tests, and benchmarks that measure the packed size).
func (s *Store) FlushEventLog(ctx context.Context) error { return s.pk.Flush(ctx) }

// packWork is the Store as its packer sees it.
type packWork struct{ s *Store }

func (w packWork) PackTurns(ctx context.Context, keys []eventpack.TurnKey) error {
	return w.s.packTurns(ctx, keys)
}
func (w packWork) UnpackedTurns(ctx context.Context) ([]eventpack.TurnKey, error) {
	return w.s.unpackedTurns(ctx)
}

// unpackedTurns lists the ended turns whose log waits to be packed.
func (s *Store) unpackedTurns(ctx context.Context) ([]eventpack.TurnKey, error) {
	rows, err := s.query(ctx, `SELECT DISTINCT e.tenant, e.session_id, e.turn_id FROM event_log e
		JOIN turns t ON t.tenant = e.tenant AND t.id = e.turn_id AND t.status <> 'running'
		WHERE e.turn_id IS NOT NULL`)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []eventpack.TurnKey
	for rows.Next() {
		var k eventpack.TurnKey
		if err := rows.Scan(&k.Tenant, &k.Session, &k.Turn); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, k)
	}
	return out, dbErr(rows.Err())
}

// packedTurn is a turn's log packed against its rows, ready to replace the
// packs it was read from.
type packedTurn struct {
	key   eventpack.TurnKey
	olds  []int64 // first seqs of the packs replaced
	packs []eventpack.Pack
	rows  *eventpack.Rows
	refs  []eventpack.Ref // of the packs
}

// packTurns packs the logs of ended turns: per tenant, one read
// transaction of four queries, whatever the number of turns, then one
// write for all.
func (s *Store) packTurns(ctx context.Context, keys []eventpack.TurnKey) error {
	byTenant := map[string][]eventpack.TurnKey{}
	var tenants []string
	for _, k := range keys {
		if byTenant[k.Tenant] == nil {
			tenants = append(tenants, k.Tenant)
		}
		byTenant[k.Tenant] = append(byTenant[k.Tenant], k)
	}
	var work []packedTurn
	for _, tenant := range tenants {
		err := s.read(ctx, func(x *tx) error {
			pts, err := readTurnLogs(x, tenant, byTenant[tenant])
			work = append(work, pts...)
			return err
		})
		if err != nil {
			return err
		}
	}
	if len(work) == 0 {
		return nil
	}
	if err := s.write(ctx, func(x *tx) error { return swapPacks(x, work) }); err != nil {
		return err
	}
	// Replays of these turns come soon, if at all: their rows' bytes are
	// kept for them.
	for _, pt := range work {
		for _, ref := range pt.refs {
			if b, err := pt.rows.RowBytes(nil, ref); err == nil {
				s.dicts.Put(pt.key.Tenant, ref, b)
			}
		}
	}
	return nil
}

// readTurnLogs reads ended turns' packs and rows and packs them anew
// (nothing for a turn that runs, or was packed).
func readTurnLogs(x *tx, tenant string, keys []eventpack.TurnKey) ([]packedTurn, error) {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.Turn
	}
	idJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	type turnLog struct {
		t     *forge.Turn
		first int64
		evs   []forge.Event
		stops []int64 // first seqs of other packs among its events
		pt    packedTurn
	}
	rs, err := x.query(`SELECT `+turnCols+`, t.first_seq FROM turns t
		WHERE t.tenant = ? AND t.id IN (SELECT value FROM json_each(?)) AND t.status <> 'running' AND t.first_seq IS NOT NULL`,
		tenant, string(idJSON))
	if err != nil {
		return nil, dbErr(err)
	}
	logs := map[string]*turnLog{}
	var order []*turnLog
	var ranges [][3]any
	for rs.Next() {
		vals := make([]any, turnColCount+1)
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			rs.Close()
			return nil, dbErr(err)
		}
		t, err := scanTurn(valuesRow(vals[:turnColCount]))
		if err != nil {
			rs.Close()
			return nil, dbErr(err)
		}
		first, _ := vals[turnColCount].(int64)
		l := &turnLog{t: t, first: first, pt: packedTurn{key: eventpack.TurnKey{Tenant: tenant, Session: t.SessionID, Turn: t.ID}}}
		logs[t.ID] = l
		order = append(order, l)
		ranges = append(ranges, [3]any{t.SessionID, first, t.LastSeq})
	}
	if err := rs.Err(); err != nil {
		return nil, dbErr(err)
	}
	if len(order) == 0 {
		return nil, nil
	}
	rangeJSON, err := json.Marshal(ranges)
	if err != nil {
		return nil, err
	}
	// Each turn's part of the log: its own packs, and any other among them.
	rs, err = x.query(`SELECT e.session_id, e.first_seq, e.turn_id, e.body FROM json_each(?2) j
		CROSS JOIN event_log e WHERE e.tenant = ?1 AND e.session_id = json_extract(j.value, '$[0]')
		AND e.first_seq BETWEEN json_extract(j.value, '$[1]') AND json_extract(j.value, '$[2]')`, tenant, string(rangeJSON))
	if err != nil {
		return nil, dbErr(err)
	}
	bySession := map[string][]*turnLog{}
	for _, l := range order {
		bySession[l.t.SessionID] = append(bySession[l.t.SessionID], l)
	}
	for rs.Next() {
		var (
			session string
			seq     int64
			turn    sql.NullString
			body    []byte
		)
		if err := rs.Scan(&session, &seq, &turn, &body); err != nil {
			rs.Close()
			return nil, dbErr(err)
		}
		var l *turnLog
		for _, c := range bySession[session] {
			if seq >= c.first && seq <= c.t.LastSeq {
				l = c
			}
		}
		if l == nil {
			continue
		}
		if !turn.Valid || turn.String != l.t.ID {
			l.stops = append(l.stops, seq)
			continue
		}
		dec, err := eventpack.Decode(body, session, eventpack.NewRows())
		if err != nil {
			rs.Close()
			return nil, dbErr(fmt.Errorf("event log of turn %s at seq %d: %w", l.t.ID, seq, err))
		}
		l.evs = append(l.evs, dec...)
		l.pt.olds = append(l.pt.olds, seq)
	}
	if err := rs.Err(); err != nil {
		return nil, dbErr(err)
	}
	msgs, err := queryMessages(x, tenant, `SELECT `+msgCols+` FROM messages m
		WHERE m.tenant = ? AND m.turn_id IN (SELECT value FROM json_each(?))`, tenant, string(idJSON))
	if err != nil {
		return nil, err
	}
	rows := eventpack.NewRows()
	for _, m := range msgs {
		rows.AddMessage(m)
	}
	var out []packedTurn
	for _, l := range order {
		if len(l.pt.olds) == 0 {
			continue // packed already
		}
		rows.AddTurn(l.t)
		slices.SortFunc(l.evs, cmpSeq)
		slices.Sort(l.stops)
		var err error
		if l.pt.packs, l.pt.refs, err = eventpack.PackTurn(l.t, l.evs, l.stops, rows); err != nil {
			return nil, dbErr(err)
		}
		l.pt.rows = rows
		out = append(out, l.pt)
	}
	return out, nil
}

func cmpSeq(a, b forge.Event) int { return cmp.Compare(a.Seq, b.Seq) }

// swapPacks replaces turns' packs with their packed form, if they are
// still the ones read.
func swapPacks(x *tx, work []packedTurn) error {
	var rows [][]any
	for _, pt := range work {
		// One DELETE per pack, by its key: an IN list would make SQLite
		// build a temporary table, whose page cache every commit of the
		// writer would then sweep.
		for _, first := range pt.olds {
			res, err := x.exec(`DELETE FROM event_log WHERE tenant = ? AND session_id = ? AND first_seq = ? AND turn_id = ?`,
				pt.key.Tenant, pt.key.Session, first, pt.key.Turn)
			if err != nil {
				return dbErr(err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return dbErr(err)
			} else if n != 1 {
				return fmt.Errorf("sqlite: event log of turn %s changed while it was packed", pt.key.Turn)
			}
		}
		sc := scope{tenant: pt.key.Tenant, session: pt.key.Session}
		for _, p := range pt.packs {
			rows = append(rows, packArgs(sc, p))
		}
	}
	return logInsert.exec(x, rows)
}
