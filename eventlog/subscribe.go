package eventlog

import (
	"context"
	"errors"
	"iter"
	"math"
	"time"

	"github.com/forge-runtime/forge"
)

// Query selects what a subscription yields.
type Query struct {
	// After is the last seq the reader has; events after it follow.
	After int64
	// TurnID, when set, keeps only that turn's events and ends the stream
	// after its turn.done.
	TurnID string
}

// Events replays what followed q.After (the stored log merged with what
// the bus still holds, deltas included), then follows the live tail, with
// no gap and no duplicate. A turn stream ends after its turn.done; a
// session stream ends with ctx. A reader the bus cuts off for falling
// behind resumes from its own cursor without the caller noticing.
func (l *Log) Events(ctx context.Context, tenant, sessionID string, q Query) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		events, err := l.Open(ctx, tenant, sessionID, q)
		if err != nil {
			yield(forge.Event{}, err)
			return
		}
		for ev, err := range events {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// BusRetryAfter is how long a reader refused for want of the bus is told
// to wait (a Redis restart takes about a second).
const BusRetryAfter = 2 * time.Second

// Open is Events for a caller that must know, before it answers, whether
// the stream can be served: a turn that has ended is replayed from the
// store alone (nothing of it is left to come, and a reader of an ended
// turn gets its stored log, not the bus's deltas), so it is served while
// the bus is down; any other stream is subscribed now, and a bus that
// cannot be subscribed fails here (ErrStore, with BusRetryAfter). The
// caller ranges over what it returns (it holds a subscription until then).
func (l *Log) Open(ctx context.Context, tenant, sessionID string, q Query) (iter.Seq2[forge.Event, error], error) {
	after := q.After
	if q.TurnID != "" {
		t, err := l.store.GetTurn(ctx, tenant, sessionID, q.TurnID)
		if err != nil {
			return nil, err
		}
		if t.Ended() {
			return l.storedTurn(ctx, tenant, sessionID, q), nil
		}
		// Nothing of the turn lies before its first event: subscribing
		// from there spares copying the events of earlier turns that
		// the bus still holds.
		first, err := l.store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: sessionID, TurnID: q.TurnID, After: q.After, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(first) > 0 {
			after = max(after, first[0].Seq-1)
		}
	}
	s, err := l.Subscribe(ctx, tenant, sessionID, after)
	if err != nil {
		return nil, err
	}
	s.after = q.After
	return s.Events(ctx, q.TurnID), nil
}

// storedTurn yields an ended turn's stored events after q.After, through
// its turn.done.
func (l *Log) storedTurn(ctx context.Context, tenant, sessionID string, q Query) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		after := q.After
		for {
			page, err := l.store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: sessionID, TurnID: q.TurnID, After: after, Limit: l.pageSize})
			if err != nil {
				if ctx.Err() == nil {
					yield(forge.Event{}, err)
				}
				return
			}
			for _, ev := range page {
				if !yield(ev, nil) || ev.Type == forge.EventTurnDone {
					return
				}
			}
			if len(page) < l.pageSize {
				return
			}
			after = page[len(page)-1].Seq
		}
	}
}

// Subscription is a subscription taken before it is read: what is
// published after Subscribe returned reaches it however late Events runs
// (a streamed turn subscribes before the turn begins).
type Subscription struct {
	l       *Log
	tenant  string
	session string
	after   int64
	held    []forge.Event
	sub     forge.BusSubscription
	// ahead: made before anything the reader wants was written
	// (SubscribeAhead), so the store holds none of it.
	ahead bool
}

// Subscribe subscribes to the session's events after after. The caller
// ranges over Events once, or calls Close.
func (l *Log) Subscribe(ctx context.Context, tenant, sessionID string, after int64) (*Subscription, error) {
	if _, err := l.store.GetSession(ctx, tenant, sessionID); err != nil {
		return nil, err
	}
	held, sub, err := l.bus.Subscribe(ctx, sessionID, after)
	if err != nil {
		return nil, busRetry(err)
	}
	return &Subscription{l: l, tenant: tenant, session: sessionID, after: after, held: held, sub: sub}, nil
}

// busRetry tells a reader refused for want of the bus (ErrStore) when to
// try again: a streamed turn's answer, like a stream's, is then a 503 with
// Retry-After before any SSE header.
func busRetry(err error) error {
	if _, ok := forge.RetryAfter(err); !ok && errors.Is(err, forge.ErrStore) {
		return forge.WithRetryAfter(err, BusRetryAfter)
	}
	return err
}

// SubscribeAhead subscribes like Subscribe for a reader that subscribes
// before anything it wants is written: a turn stream taken before the
// turn begins (after is then Cursor's seq, taken before the turn starts).
// Everything the reader wants is published after this returns, so Events
// reads neither the turn nor the stored log, unless the bus cuts the
// reader off (it then resumes from the store like any reader). The
// session is not looked up: the caller checks it (starting the turn does)
// and closes the subscription if that fails.
func (l *Log) SubscribeAhead(ctx context.Context, tenant, sessionID string, after int64) (*Subscription, error) {
	// Nothing the bus holds now is wanted: it is not read (after may lie
	// far below the session's last seq, when another process wrote it
	// since this one did: its entries would be copied for nothing).
	held, sub, err := l.bus.Subscribe(ctx, sessionID, math.MaxInt64)
	if err != nil {
		return nil, busRetry(err)
	}
	return &Subscription{l: l, tenant: tenant, session: sessionID, after: after, held: held, sub: sub, ahead: true}, nil
}

// Close releases the subscription (Events does when it ends).
func (s *Subscription) Close() {
	if s.sub != nil {
		_ = s.sub.Close()
		s.sub = nil
	}
}

// Events yields the subscription's events, only turnID's when set (then
// it ends after that turn's turn.done). It may be ranged over once.
func (s *Subscription) Events(ctx context.Context, turnID string) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		defer s.Close()
		if s.sub == nil {
			yield(forge.Event{}, errors.New("eventlog: subscription already read or closed"))
			return
		}
		if turnID != "" && !s.ahead {
			t, err := s.l.store.GetTurn(ctx, s.tenant, s.session, turnID)
			if err != nil {
				yield(forge.Event{}, err)
				return
			}
			if t.Ended() && s.after >= t.LastSeq {
				return // nothing of the turn follows its turn.done
			}
		}
		r := &reader{l: s.l, tenant: s.tenant, session: s.session, turnID: turnID, last: s.after, yield: yield}
		// A new subscriber reads a turn that ended before it subscribed
		// from the stored log, as API.md says: the bus's copies of its
		// deltas are not replayed. One cut off mid-stream gets them all.
		held := dropEndedDeltas(s.held)
		readStore := !s.ahead
		for {
			resume, err := r.pass(ctx, held, s.sub, readStore)
			readStore = true
			s.Close()
			if err != nil {
				if !errors.Is(err, errStop) {
					yield(forge.Event{}, err)
				}
				return
			}
			if !resume {
				return
			}
			// Cut off for falling behind: resubscribe from our cursor.
			h, sub, err := s.l.bus.Subscribe(ctx, s.session, r.last)
			if err != nil {
				yield(forge.Event{}, err)
				return
			}
			held, s.sub = h, sub
		}
	}
}

// dropEndedDeltas removes from held the deltas of turns whose turn.done
// is also held (turns that ended before the subscription).
func dropEndedDeltas(held []forge.Event) []forge.Event {
	ended := map[string]bool{}
	for _, ev := range held {
		if ev.Type == forge.EventTurnDone && ev.TurnID != nil {
			ended[*ev.TurnID] = true
		}
	}
	if len(ended) == 0 {
		return held
	}
	out := make([]forge.Event, 0, len(held))
	for _, ev := range held {
		if ev.Type == forge.EventModelDelta && ev.TurnID != nil && ended[*ev.TurnID] {
			continue
		}
		out = append(out, ev)
	}
	return out
}

// errStop ends a reader without an error for the caller: it stopped
// reading, the turn stream ended, or ctx ended.
var errStop = errors.New("stop")

// reader yields one subscriber's events in seq order, each once.
type reader struct {
	l       *Log
	tenant  string
	session string
	turnID  string
	last    int64 // the last seq yielded (or the cursor)
	yield   func(forge.Event, error) bool
}

// emit yields ev unless it is at or below the cursor or of another turn.
// An ephemeral event (no seq) is yielded as it comes, cursor untouched.
func (r *reader) emit(ev forge.Event) error {
	if ev.Seq == 0 {
		if r.turnID != "" && (ev.TurnID == nil || *ev.TurnID != r.turnID) {
			return nil
		}
		if !r.yield(ev, nil) {
			return errStop
		}
		return nil
	}
	if r.turnID != "" && (ev.TurnID == nil || *ev.TurnID != r.turnID) {
		return nil
	}
	if ev.Seq <= r.last {
		if r.turnID != "" && ev.Type == forge.EventTurnDone {
			// The turn ended at or below the cursor (a client resuming
			// after a seq past its end): nothing is left to send, and
			// the stream ends as it does after turn.done.
			return errStop
		}
		return nil
	}
	r.last = ev.Seq
	if !r.yield(ev, nil) {
		return errStop
	}
	if r.turnID != "" && ev.Type == forge.EventTurnDone {
		return errStop
	}
	return nil
}

// pass reads one bus subscription: the stored events after the cursor,
// merged by seq with what the bus returns, then the live tail. It reports
// resume when the bus cut the subscription off.
//
// The merge is exact because a session has one writer, which commits and
// publishes in seq order: a delta below a stored event's seq was published
// before that event was committed, or (a delta held back, Local) by
// the write that committed it, whose publishing settle waits for; so once
// a store page is read, one non-blocking Next returns every bus event
// below the page's seqs that this subscription will ever get.
func (r *reader) pass(ctx context.Context, held []forge.Event, sub forge.BusSubscription, readStore bool) (resume bool, err error) {
	pending := held   // bus events not yet yielded, in seq order
	busLast := r.last // the highest seq the bus returned
	if n := len(held); n > 0 {
		busLast = max(busLast, held[n-1].Seq)
	}
	horizon := int64(math.MaxInt64)
	// take adds what the bus returns to pending. Without wait it calls
	// Next until it has nothing more: then pending holds every event
	// published before the call (what the merge with a store page needs),
	// or the subscription was cut off and horizon says up to where it is
	// complete. With wait (the live tail, where no store page remains to
	// merge) one call that returns something is enough. Ephemeral events
	// are yielded at once.
	take := func(wait bool) error {
		for {
			evs, err := sub.Next(ctx, wait)
			switch {
			case errors.Is(err, forge.ErrLagged):
				// Everything up to busLast arrived; past it, we cannot know.
				horizon = busLast
				return nil
			case err != nil && ctx.Err() != nil:
				return errStop
			case err != nil:
				return err
			}
			n := 0
			for _, ev := range evs {
				if ev.Seq == 0 {
					if err := r.emit(ev); err != nil {
						return err
					}
					continue
				}
				pending = append(pending, ev)
				busLast = ev.Seq
				n++
			}
			if len(evs) == 0 || (wait && n > 0) {
				return nil
			}
			if n > 0 {
				wait = false
			}
		}
	}
	flushBelow := func(seq int64) error {
		for len(pending) > 0 && pending[0].Seq < seq {
			ev := pending[0]
			pending = pending[1:]
			if err := r.emit(ev); err != nil {
				return err
			}
		}
		return nil
	}
	storeAfter := r.last
	for readStore {
		page, err := r.l.store.ListEvents(ctx, r.tenant, forge.EventQuery{SessionID: r.session, TurnID: r.turnID, After: storeAfter, Limit: r.l.pageSize})
		if err != nil {
			if ctx.Err() != nil {
				return false, errStop
			}
			return false, err
		}
		if horizon == math.MaxInt64 {
			r.l.settle(r.session)
			if err := take(false); err != nil {
				return false, err
			}
		}
		for _, ev := range page {
			if ev.Seq > horizon {
				return true, flushBelow(math.MaxInt64)
			}
			if err := flushBelow(ev.Seq); err != nil {
				return false, err
			}
			if len(pending) > 0 && pending[0].Seq == ev.Seq {
				pending = pending[1:] // the bus's copy of a stored event
			}
			if err := r.emit(ev); err != nil {
				return false, err
			}
		}
		if len(page) < r.l.pageSize {
			break
		}
		storeAfter = page[len(page)-1].Seq
	}
	if err := flushBelow(math.MaxInt64); err != nil {
		return false, err
	}
	for horizon == math.MaxInt64 {
		if err := take(true); err != nil {
			return false, err
		}
		if err := flushBelow(math.MaxInt64); err != nil {
			return false, err
		}
	}
	return true, nil
}
