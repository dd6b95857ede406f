package engine

import (
	"context"
	"iter"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
)

// EventsQuery selects a subscription.
type EventsQuery struct {
	// After is the last seq the client has; events after it follow.
	After int64
	// TurnID, when set, keeps only that turn's events and ends after its
	// turn.done.
	TurnID string
}

// Events replays what followed q.After, from the stored log and the live
// backlog, then tails live events, with no gap and no duplicate. A turn
// stream ends after turn.done; a session stream ends with ctx.
func (e *Engine) Events(ctx context.Context, tenant, sessionID string, q EventsQuery) iter.Seq2[forge.Event, error] {
	return e.events(ctx, tenant, sessionID, q, nil)
}

// StreamTurn starts a turn like StartTurn and returns its event stream from
// turn.created to turn.done. The stream is subscribed before the turn
// begins, so it carries every delta however fast the turn runs. The caller
// must range over the stream (it owns a subscription until then).
func (e *Engine) StreamTurn(ctx context.Context, tenant, sessionID string, req TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error) {
	backlog, sub := e.bus.Subscribe(sessionID)
	turn, err := e.StartTurn(ctx, tenant, sessionID, req)
	if err != nil {
		sub.Close()
		return nil, nil, err
	}
	return turn, e.events(ctx, tenant, sessionID, EventsQuery{TurnID: turn.ID}, &subscription{backlog, sub}), nil
}

// subscription is a bus subscription and the backlog it started from.
type subscription struct {
	backlog []forge.Event
	sub     *bus.Subscription
}

func (e *Engine) events(ctx context.Context, tenant, sessionID string, q EventsQuery, first *subscription) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		if first != nil {
			defer first.sub.Close()
		}
		if _, err := e.store.GetSession(ctx, tenant, sessionID); err != nil {
			yield(forge.Event{}, err)
			return
		}
		if q.TurnID != "" {
			t, err := e.store.GetTurn(ctx, tenant, sessionID, q.TurnID)
			if err != nil {
				yield(forge.Event{}, err)
				return
			}
			if t.Ended() && q.After >= t.LastSeq {
				return // nothing of the turn follows its turn.done
			}
		}
		last := q.After
		// emit yields ev unless already sent; it reports whether to go on.
		emit := func(ev forge.Event) (more, ended bool) {
			if ev.Seq <= last {
				return true, false
			}
			if q.TurnID != "" && (ev.TurnID == nil || *ev.TurnID != q.TurnID) {
				return true, false
			}
			last = ev.Seq
			if !yield(ev, nil) {
				return false, false
			}
			return true, q.TurnID != "" && ev.Type == forge.EventTurnDone
		}
		for {
			var backlog []forge.Event
			var sub *bus.Subscription
			if first != nil {
				backlog, sub, first = first.backlog, first.sub, nil
			} else {
				backlog, sub = e.bus.Subscribe(sessionID)
			}
			more, ended, err := e.replay(ctx, tenant, sessionID, q.TurnID, last, backlog, emit)
			if err != nil {
				sub.Close()
				yield(forge.Event{}, err)
				return
			}
			if !more || ended {
				sub.Close()
				return
			}
			for _, ev := range backlog {
				if more, ended = emit(ev); !more || ended {
					sub.Close()
					return
				}
			}
			lagged := false
		live:
			for {
				select {
				case <-ctx.Done():
					sub.Close()
					return
				case ev, ok := <-sub.C:
					if !ok {
						lagged = sub.Lagged()
						break live
					}
					if more, ended = emit(ev); !more || ended {
						sub.Close()
						return
					}
				}
			}
			sub.Close()
			if !lagged {
				return
			}
			// Cut off for falling behind: resubscribe from our cursor.
		}
	}
}

// replay emits stored events after `after` and before the live backlog.
func (e *Engine) replay(ctx context.Context, tenant, sessionID, turnID string, after int64, backlog []forge.Event, emit func(forge.Event) (bool, bool)) (more, ended bool, err error) {
	var before int64
	if len(backlog) > 0 {
		before = backlog[0].Seq
		if after >= before-1 {
			return true, false, nil // the backlog covers it
		}
	}
	for {
		page, err := e.store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: sessionID, TurnID: turnID, After: after, Before: before, Limit: 1000})
		if err != nil {
			return false, false, err
		}
		for _, ev := range page {
			if more, ended = emit(ev); !more || ended {
				return more, ended, nil
			}
			after = ev.Seq
		}
		if len(page) < 1000 {
			return true, false, nil
		}
	}
}
