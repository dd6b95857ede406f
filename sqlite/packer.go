package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
)

// Packing a turn's log.
//
// A running turn's events are stored in packs without rows (events.go):
// its rows still change. Once the turn has ended they are final, and a
// packer goroutine owned by the Store packs the turn's log again against
// them, off the writer's path: it reads the turn's packs and rows on the
// read pool, encodes there, and asks the writer only to swap the rows of
// event_log (a DELETE fenced on finding exactly the packs it read, and
// an INSERT). Terminal writes queue their turn; at Open, and after a
// failed round, it sweeps the log for ended turns still waiting (a crash
// between a terminal write and its packing leaves a correct, larger log
// until then).

// A round costs about the same for one turn or many (a read transaction
// of four queries per tenant and one write): the packer lets turns gather
// for packDelay after the first is queued, up to maxPackRound.
const (
	packDelay    = 100 * time.Millisecond
	maxPackRound = 256
)

type turnKey struct{ tenant, session, turn string }

type packer struct {
	s    *Store
	kick chan struct{} // capacity 1: turns were queued
	quit chan struct{}
	done chan struct{}

	round sync.Mutex // one round at a time (the goroutine's, or Flush's)

	mu     sync.Mutex // guards the following
	queue  []turnKey
	queued map[turnKey]bool
	sweep  bool // the log must be swept for turns to pack

	// For tests: turns packed, last error.
	packed  atomic.Int64
	lastErr atomic.Pointer[error]
}

func newPacker(s *Store, start bool) *packer {
	p := &packer{s: s, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		queued: map[turnKey]bool{}, sweep: true}
	if start {
		go p.run()
	} else {
		close(p.done)
	}
	p.poke()
	return p
}

// add queues an ended turn (its terminal write committed).
func (p *packer) add(k turnKey) {
	p.mu.Lock()
	if !p.queued[k] {
		p.queued[k] = true
		p.queue = append(p.queue, k)
	}
	p.mu.Unlock()
	p.poke()
}

func (p *packer) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *packer) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

func (p *packer) run() {
	defer close(p.done)
	ctx := context.Background()
	for {
		select {
		case <-p.quit:
			p.drain()
			return
		case <-p.kick:
		}
		t := time.NewTimer(p.s.packDelay)
		select {
		case <-p.quit:
			t.Stop()
			p.drain()
			return
		case <-t.C:
		}
		for p.roundOnce(ctx) {
		}
	}
}

// drainTimeout bounds how long Close packs what is queued.
const drainTimeout = 5 * time.Second

// drain packs the queued turns before the store closes, so that a clean
// shutdown leaves a packed log (what it cannot finish, the next Open's
// sweep does).
func (p *packer) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	p.mu.Lock()
	p.sweep = false
	p.mu.Unlock()
	for p.roundOnce(ctx) {
	}
}

// flush packs every turn queued or waiting in the log, now.
func (p *packer) flush(ctx context.Context) error {
	p.mu.Lock()
	p.sweep = true
	p.mu.Unlock()
	for {
		more, err := p.roundErr(ctx)
		if err != nil || !more {
			return err
		}
	}
}

// roundOnce runs a round and reports whether turns are left.
func (p *packer) roundOnce(ctx context.Context) bool {
	more, err := p.roundErr(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		p.lastErr.Store(&err)
		// The turns of a failed round are found again by the next sweep
		// (at the next Open, or the next flush); packing is an
		// optimization of a log that is correct without it.
		return more
	}
	return more
}

// roundErr packs up to maxPackRound turns and reports whether turns are
// left in the queue.
func (p *packer) roundErr(ctx context.Context) (bool, error) {
	p.round.Lock()
	defer p.round.Unlock()
	p.mu.Lock()
	sweep := p.sweep
	p.sweep = false
	p.mu.Unlock()
	if sweep {
		keys, err := p.s.unpackedTurns(ctx)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			p.add(k)
		}
	}
	p.mu.Lock()
	n := min(len(p.queue), maxPackRound)
	keys := append([]turnKey(nil), p.queue[:n]...)
	p.queue = p.queue[n:]
	for _, k := range keys {
		delete(p.queued, k)
	}
	more := len(p.queue) > 0
	p.mu.Unlock()
	if len(keys) == 0 {
		return false, nil
	}
	if err := p.s.packTurns(ctx, keys); err != nil {
		return more, err
	}
	p.packed.Add(int64(len(keys)))
	return more, nil
}

// FlushEventLog packs now the log of every ended turn still waiting for
// it (tests, and benchmarks that measure the packed size).
func (s *Store) FlushEventLog(ctx context.Context) error { return s.pk.flush(ctx) }

// unpackedTurns lists the ended turns whose log waits to be packed.
func (s *Store) unpackedTurns(ctx context.Context) ([]turnKey, error) {
	rows, err := s.query(ctx, `SELECT DISTINCT e.tenant, e.session_id, e.turn_id FROM event_log e
		JOIN turns t ON t.tenant = e.tenant AND t.id = e.turn_id AND t.status <> 'running'
		WHERE e.turn_id IS NOT NULL`)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []turnKey
	for rows.Next() {
		var k turnKey
		if err := rows.Scan(&k.tenant, &k.session, &k.turn); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, k)
	}
	return out, dbErr(rows.Err())
}

// packedTurn is a turn's log packed against its rows, ready to replace the
// packs it was read from.
type packedTurn struct {
	key   turnKey
	olds  []int64 // first seqs of the packs replaced
	packs []eventpack.Pack
	rows  *eventpack.Rows
	refs  []eventpack.Ref // of the packs
}

// packTurns packs the logs of ended turns: per tenant, one read
// transaction of four queries, whatever the number of turns, then one
// write for all.
func (s *Store) packTurns(ctx context.Context, keys []turnKey) error {
	byTenant := map[string][]turnKey{}
	var tenants []string
	for _, k := range keys {
		if byTenant[k.tenant] == nil {
			tenants = append(tenants, k.tenant)
		}
		byTenant[k.tenant] = append(byTenant[k.tenant], k)
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
				s.dicts.Put(pt.key.tenant, ref, b)
			}
		}
	}
	return nil
}

// readTurnLogs reads ended turns' packs and rows and packs them anew
// (nothing for a turn that runs, or was packed).
func readTurnLogs(x *tx, tenant string, keys []turnKey) ([]packedTurn, error) {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.turn
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
		l := &turnLog{t: t, first: first, pt: packedTurn{key: turnKey{tenant, t.SessionID, t.ID}}}
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
				pt.key.tenant, pt.key.session, first, pt.key.turn)
			if err != nil {
				return dbErr(err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return dbErr(err)
			} else if n != 1 {
				return fmt.Errorf("sqlite: event log of turn %s changed while it was packed", pt.key.turn)
			}
		}
		sc := scope{tenant: pt.key.tenant, session: pt.key.session}
		for _, p := range pt.packs {
			rows = append(rows, packArgs(sc, p))
		}
	}
	return logInsert.exec(x, rows)
}
