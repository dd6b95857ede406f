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

// OpenEvents is Events for a caller that must know before it answers
// whether the stream can be served (eventlog.Log.Open): an ended turn's
// stream is served from the store alone; any other is subscribed now, and
// fails here (ErrStore, with a Retry-After) when the bus cannot be.
func (e *Engine) OpenEvents(ctx context.Context, tenant, sessionID string, q EventsQuery) (iter.Seq2[forge.Event, error], error) {
	return e.events.Open(ctx, tenant, sessionID, eventlog.Query{After: q.After, TurnID: q.TurnID})
}

// StreamTurn starts a turn like StartTurn and returns its event stream from
// turn.created to turn.done. The stream is subscribed before the turn
// begins, so it carries every delta however fast the turn runs, and reads
// nothing from the store (eventlog.Log.SubscribeAhead; StartTurn checks
// the session). The caller must range over the stream (it owns a
// subscription until then).
func (e *Engine) StreamTurn(ctx context.Context, tenant, sessionID string, req TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error) {
	// The subscription takes what is published from now on, and nothing
	// the bus holds of earlier turns: whichever replica wrote the session
	// last, its seq cursor here may lie far below them (issue 22: such a
	// stream read the other replica's whole turns from Redis, and two
	// store reads to avoid it when this replica had no cursor at all).
	sub, err := e.events.SubscribeAhead(ctx, tenant, sessionID, e.events.Cursor(sessionID))
	if err != nil {
		return nil, nil, err
	}
	began := false
	req.began = &began
	turn, err := e.StartTurn(ctx, tenant, sessionID, req)
	if err != nil {
		sub.Close()
		return nil, nil, err
	}
	if !began {
		// An idempotent retry answered with an earlier turn, or the turn
		// was queued or steered into: all of it, from the log.
		sub.Close()
		return turn, e.Events(ctx, tenant, sessionID, EventsQuery{TurnID: turn.ID}), nil
	}
	return turn, sub.Events(ctx, turn.ID), nil
}

// PublishEphemeral hands the session's subscribers open now, on every
// replica, an event that has no seq (a forum's forum.typing): it is never
// stored or replayed.
func (e *Engine) PublishEphemeral(ctx context.Context, sessionID string, d eventlog.Draft) error {
	return e.events.PublishEphemeral(ctx, sessionID, d)
}
