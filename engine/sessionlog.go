package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/forge-runtime/forge"
)

// seqBlock is how many seqs one reservation claims. A reservation is a
// store write, so it is amortised over many events.
const seqBlock = 1024

// sessionLog is the one sequencer of a session in this process: every
// writer (executor, checkpointer, recovery) assigns seqs, commits and
// publishes through it, so seq order, commit order and publish order agree.
type sessionLog struct {
	tenant  string
	session string

	// base is the first seq of the first block this process reserved, 0
	// until then; every seq below it was assigned by an earlier process
	// (and is stored or was a delta of an ended turn).
	base atomic.Int64

	mu       sync.Mutex // guards the following; held across commit and publish
	next     int64      // next seq to hand out
	reserved int64      // highest seq committed as reserved
}

// sessionLog returns the session's log, creating it on first use.
func (e *Engine) sessionLog(tenant, session string) *sessionLog {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.logs[session]
	if l == nil {
		l = &sessionLog{tenant: tenant, session: session}
		e.logs[session] = l
	}
	return l
}

// seqLocked hands out the next seq, committing a new reservation first when
// the current one is used up: no seq is published before it is reserved.
func (l *sessionLog) seqLocked(ctx context.Context, store forge.SessionStore) (int64, error) {
	if l.next == 0 || l.next > l.reserved {
		if err := l.reserveLocked(ctx, store); err != nil {
			return 0, err
		}
	}
	s := l.next
	l.next++
	return s, nil
}

// reserveLocked commits a new block of seqs above every earlier one.
func (l *sessionLog) reserveLocked(ctx context.Context, store forge.SessionStore) error {
	hi, err := store.ReserveSeqs(context.WithoutCancel(ctx), l.tenant, l.session, seqBlock)
	if err != nil {
		return fmt.Errorf("reserve seqs: %w", err)
	}
	l.next, l.reserved = hi-seqBlock+1, hi
	l.base.CompareAndSwap(0, l.next)
	return nil
}

// pendingEvent is an event waiting for its seq.
type pendingEvent struct {
	typ      string
	id       string
	turnID   string
	threadID string
	data     any
}

func (e *Engine) newEvent(l *sessionLog, seq int64, p pendingEvent) (forge.Event, error) {
	data := p.data
	if f, ok := data.(func(seq int64) any); ok {
		data = f(seq) // data that names its own seq (turn.done's last_seq)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return forge.Event{}, fmt.Errorf("marshal %s event: %w", p.typ, err)
	}
	ev := forge.Event{Seq: seq, ID: p.id, Type: p.typ, SessionID: l.session, CreatedAt: e.clock.Now(), Data: raw}
	if p.turnID != "" {
		t := p.turnID
		ev.TurnID = &t
	}
	if p.threadID != "" {
		th := p.threadID
		ev.ThreadID = &th
	}
	return ev, nil
}

// write assigns seqs to events, commits them with the rows in one
// transaction (commit is called with the events filled in), then publishes.
// It returns the events as published.
func (e *Engine) write(ctx context.Context, l *sessionLog, events []pendingEvent, commit func(ctx context.Context, evs []forge.Event) error) ([]forge.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := make([]forge.Event, 0, len(events))
	for _, p := range events {
		seq, err := l.seqLocked(ctx, e.store)
		if err != nil {
			return nil, err
		}
		ev, err := e.newEvent(l, seq, p)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	// Commit even when the turn's context is cancelled: the terminal write
	// of a cancelled turn must land.
	if err := commit(context.WithoutCancel(ctx), evs); err != nil {
		return nil, err
	}
	for _, ev := range evs {
		e.bus.Publish(ev)
	}
	return evs, nil
}

// publishDelta gives a bus-only event its seq and publishes it.
func (e *Engine) publishDelta(ctx context.Context, l *sessionLog, p pendingEvent) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq, err := l.seqLocked(ctx, e.store)
	if err != nil {
		return err
	}
	ev, err := e.newEvent(l, seq, p)
	if err != nil {
		return err
	}
	e.bus.Publish(ev)
	return nil
}
