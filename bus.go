package forge

import (
	"context"
	"errors"
)

// ErrLagged ends a bus subscription that fell behind and was cut off: every
// event before the cut was returned; resubscribe after the last seq seen.
var ErrLagged = errors.New("subscriber fell behind and was cut off")

// ErrSubscriptionClosed is returned by a closed subscription's Next.
var ErrSubscriptionClosed = errors.New("subscription closed")

// Bus carries the live events of sessions, deltas included, from the
// process that writes them to every subscriber, on this replica or another
// (package bus in process, a Redis Streams bus across replicas). It keeps
// each session's recent events, at least the running turn's (bounded), so a
// subscriber resumes after any seq it saw.
//
// Only the eventlog writes to a bus, through one sequencer per session: the
// events of a session are published one at a time, in seq order, stored
// ones after their commit. Readers merge what the bus holds with the stored
// log (eventlog.Log.Events); a bus never reads the store.
//
// Implementations pass the conformance suite in bus/bustest.
type Bus interface {
	// Publish appends ev to its session's stream and hands it to the
	// session's subscribers without waiting for any of them. A seq at or
	// below the session's last published one is refused with an error
	// wrapping ErrConflict (Redis: XADD with the seq as the entry id).
	Publish(ctx context.Context, ev Event) error
	// BeginTurn tells the bus that turnID runs in the session: the
	// session's events are kept (up to the bus's backlog bound) until
	// EndTurn. The eventlog calls it before publishing turn.created.
	BeginTurn(ctx context.Context, sessionID, turnID string) error
	// EndTurn tells the bus that turnID's last event is published and
	// stored: its events are kept for a retention period, for subscribers
	// that were cut off, then dropped. A call for a turn that is not the
	// session's running one only starts that retention if none runs.
	EndTurn(ctx context.Context, sessionID, turnID string) error
	// Subscribe returns the events the bus holds for the session with a
	// seq above after, in seq order, and a subscription that returns every
	// event published from then on.
	//
	// When the bus trimmed events above after that belong to parts still
	// streaming, held starts with one model.message event per such part:
	// the part's row with the text through its last trimmed delta, at that
	// delta's seq (the "text so far" of DESIGN.md). Stored events the bus
	// no longer holds are not returned: readers take them from the store.
	Subscribe(ctx context.Context, sessionID string, after int64) (held []Event, sub BusSubscription, err error)
}

// BusSubscription is one subscriber's position in a session's stream. It
// is used by one goroutine at a time.
type BusSubscription interface {
	// Next returns the events published after the last one it returned
	// (after the held events at first), in seq order, as many as the bus
	// has now. With wait set and nothing to return, it blocks until an
	// event is published, the subscription is cut off or closed, or ctx
	// ends (then it returns ctx.Err()).
	//
	// Exactly once and in order, it returns every event published after
	// Subscribe returned, unless the subscriber falls too far behind and is
	// cut off: then, once the events before the cut are returned, Next
	// returns ErrLagged. After Close it returns ErrSubscriptionClosed.
	//
	// Readers merge the bus with the stored log relying on this: when
	// Next(ctx, false) returns no event (and no error), every event whose
	// Publish returned before that call has been returned.
	Next(ctx context.Context, wait bool) ([]Event, error)
	// Close releases the subscription. It is safe to call more than once.
	Close() error
}
