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
	// The bus keeps, per part, the latest "text so far" row published
	// with an event (Event.TextSoFar: the part's model.message with its
	// text through a delta, at that delta's seq; the event log folds the
	// text, the bus decodes nothing) and forgets it at the part's next
	// model.message. When the bus trimmed events above after, held
	// includes the kept rows with a seq above after, in seq order among
	// the events, and leaves out the deltas of their parts at or below
	// their seqs: the rows carry that text (the "text so far" of
	// DESIGN.md). The event log publishes a row before a part's unfolded
	// deltas are a quarter of the bus's backlog bound old (Backlogger),
	// and a bus trims at most its oldest half, so no text is lost. Stored
	// events the bus no longer holds are not returned: readers take them
	// from the store.
	Subscribe(ctx context.Context, sessionID string, after int64) (held []Event, sub BusSubscription, err error)
	// PublishEphemeral hands ev, an event with no seq (Seq 0: a forum's
	// forum.typing), to the session's subscribers open now, on every
	// replica, at most once each. It is never held, stored or replayed,
	// and carries no order with the session's other events; a subscriber
	// that falls behind may miss it.
	PublishEphemeral(ctx context.Context, ev Event) error
}

// Backlogger is implemented by a bus whose per-session backlog is
// bounded: Backlog is the bound, in events. The event log publishes text
// so far rows (Event.TextSoFar) often enough for it.
type Backlogger interface {
	Backlog() int
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
	//
	// Ephemeral events (Seq 0, see Bus.PublishEphemeral) may come among
	// the others, in no particular place.
	Next(ctx context.Context, wait bool) ([]Event, error)
	// Close releases the subscription. It is safe to call more than once.
	Close() error
}

// WriterFence makes one process at a time the writer of a session, across
// the replicas sharing a bus (the Redis bus implements it; a single process
// needs none). The event log holds the session from seq reservation to
// publish, so that seq order, commit order and publish order agree across
// processes, as DESIGN.md's readers require, and reserves a fresh seq block
// whenever another process wrote the session since its last hold (its
// cached block is then stale: its seqs may lie below the other's).
type WriterFence interface {
	// Acquire waits until this process holds the session (or ctx ends) and
	// returns the hold's token. fresh is false when another process may
	// have written the session since this one last held it.
	Acquire(ctx context.Context, sessionID string) (hold string, fresh bool, err error)
	// Release publishes evs (the hold's events, in seq order, after their
	// commit; none when the commit failed) and ends the hold, in one step.
	// A hold that expired before Release publishes nothing and returns an
	// error wrapping ErrConflict.
	Release(ctx context.Context, sessionID, hold string, evs []Event) error
	// PublishUnheld publishes a bus-only event (a delta) without a hold
	// when no process holds the session and this process wrote it last,
	// and reports whether it did; false means take a hold and publish with
	// Release (with a fresh seq if the hold is not fresh). A delta of a turn
	// the bus saw end is refused with an error wrapping ErrTurnEnded.
	// Several events are published together, in order, or none is.
	PublishUnheld(ctx context.Context, evs ...Event) (bool, error)
}

// CancelSignal asks the replica running a turn to cancel it (distributed
// mode: a cancel sent to a replica that does not own the turn).
type CancelSignal struct {
	Tenant    string `json:"tenant"`
	SessionID string `json:"session_id"`
	TurnID    string `json:"turn_id"`
	// Reason is the cancel reason (CancelClient, CancelSuperseded).
	Reason string `json:"reason"`
	// Message is the client's free text, if any.
	Message string `json:"message,omitempty"`
}
