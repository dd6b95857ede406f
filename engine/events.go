package engine

import (
	"context"
	"iter"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// EventsQuery selects a subscription.
type EventsQuery struct {
	// After is the last seq the client has; events after it follow.
	After int64
	// TurnID, when set, keeps only that turn's events and ends after its
	// turn.done.
	TurnID string
}

// Events replays what followed q.After, from the stored log and what the
// bus still holds, then tails live events, with no gap and no duplicate
// (eventlog.Log.Events). A turn stream ends after turn.done; a session
// stream ends with ctx.
func (e *Engine) Events(ctx context.Context, tenant, sessionID string, q EventsQuery) iter.Seq2[forge.Event, error] {
	return e.events.Events(ctx, tenant, sessionID, eventlog.Query{After: q.After, TurnID: q.TurnID})
}

// StreamTurn starts a turn like StartTurn and returns its event stream from
// turn.created to turn.done. The stream is subscribed before the turn
// begins, so it carries every delta however fast the turn runs, and reads
// nothing from the store (eventlog.Log.SubscribeAhead; StartTurn checks
// the session). The caller must range over the stream (it owns a
// subscription until then).
func (e *Engine) StreamTurn(ctx context.Context, tenant, sessionID string, req TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error) {
	cursor := e.events.Cursor(sessionID)
	sub, err := e.events.SubscribeAhead(ctx, tenant, sessionID, cursor)
	if err != nil {
		return nil, nil, err
	}
	turn, err := e.StartTurn(ctx, tenant, sessionID, req)
	if err != nil {
		sub.Close()
		return nil, nil, err
	}
	if turn.LastSeq <= cursor {
		// An idempotent retry answered with an earlier turn: all of it.
		sub.Close()
		return turn, e.Events(ctx, tenant, sessionID, EventsQuery{TurnID: turn.ID}), nil
	}
	return turn, sub.Events(ctx, turn.ID), nil
}
