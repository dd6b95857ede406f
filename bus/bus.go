// Package bus is the in-process event bus: per-session fan-out of live
// events to subscribers, and the live backlog of each running turn so a
// resume after any seq (a delta's included) replays exactly what was missed.
//
// Publish never blocks: a subscriber whose buffer is full is cut off (its
// channel closed, Lagged set) and resubscribes from its own cursor.
package bus

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
)

// Defaults.
const (
	DefaultBuffer     = 256
	DefaultBacklogMax = 200_000
)

// Bus fans events out per session.
type Bus struct {
	buffer     int
	backlogMax int

	mu     sync.Mutex // guards the following
	topics map[string]*topic
}

type topic struct {
	subs    map[*Subscription]struct{}
	turnID  string        // the turn whose backlog is kept, "" for none
	backlog []forge.Event // that turn's events in seq order, deltas included
	// ended is the backlog of the last turn that ended, kept a short while
	// for subscribers that were cut off mid-turn and resume (ResumeFrom).
	ended      []forge.Event
	endedTimer *time.Timer
}

// Retention is how long an ended turn's backlog stays available to
// subscribers resuming after being cut off.
const Retention = 30 * time.Second

// New returns a bus. buffer is each subscriber's channel capacity and
// backlogMax caps a turn's in-memory backlog (0 means the defaults).
func New(buffer, backlogMax int) *Bus {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	if backlogMax <= 0 {
		backlogMax = DefaultBacklogMax
	}
	return &Bus{buffer: buffer, backlogMax: backlogMax, topics: map[string]*topic{}}
}

// Subscription receives a session's events published after it was made.
type Subscription struct {
	// C yields events in seq order; it is closed when the subscription is
	// cut off (Lagged) or closed.
	C <-chan forge.Event

	c       chan forge.Event
	bus     *Bus
	session string
	lagged  atomic.Bool
	closed  bool // guarded by bus.mu
}

// Lagged reports whether the subscription was cut off for falling behind.
func (s *Subscription) Lagged() bool { return s.lagged.Load() }

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	s.bus.dropLocked(s)
}

func (b *Bus) dropLocked(s *Subscription) {
	if s.closed {
		return
	}
	s.closed = true
	close(s.c)
	if t := b.topics[s.session]; t != nil {
		delete(t.subs, s)
		b.gcLocked(s.session, t)
	}
}

func (b *Bus) gcLocked(session string, t *topic) {
	if len(t.subs) == 0 && t.turnID == "" && t.ended == nil {
		delete(b.topics, session)
	}
}

func (b *Bus) topicLocked(session string) *topic {
	t := b.topics[session]
	if t == nil {
		t = &topic{subs: map[*Subscription]struct{}{}}
		b.topics[session] = t
	}
	return t
}

// Subscribe returns a copy of the session's live backlog and a subscription
// that receives every event published after that backlog's last one.
func (b *Bus) Subscribe(session string) ([]forge.Event, *Subscription) {
	c := make(chan forge.Event, b.buffer)
	s := &Subscription{C: c, c: c, bus: b, session: session}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topicLocked(session)
	t.subs[s] = struct{}{}
	return append([]forge.Event(nil), t.backlog...), s
}

// BeginTurn starts keeping a backlog for turnID, dropping any earlier one.
// Call it before publishing the turn's first event.
func (b *Bus) BeginTurn(session, turnID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topicLocked(session)
	t.turnID = turnID
	t.backlog = nil
	b.dropEndedLocked(t)
}

func (b *Bus) dropEndedLocked(t *topic) {
	if t.endedTimer != nil {
		t.endedTimer.Stop()
		t.endedTimer = nil
	}
	t.ended = nil
}

// endTurnLocked moves the running turn's backlog to ended, for Retention.
func (b *Bus) endTurnLocked(session string, t *topic) {
	b.dropEndedLocked(t)
	t.ended, t.backlog, t.turnID = t.backlog, nil, ""
	if len(t.ended) == 0 {
		t.ended = nil
		return
	}
	var timer *time.Timer
	timer = time.AfterFunc(Retention, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if cur := b.topics[session]; cur == t && t.endedTimer == timer {
			t.ended, t.endedTimer = nil, nil
			b.gcLocked(session, t)
		}
	})
	t.endedTimer = timer
}

// ResumeFrom is Subscribe for a subscriber that was cut off with cursor
// after: when no turn runs but the turn that just ended still has every
// event after the cursor in memory, that backlog is returned, so the
// subscriber gets the deltas it missed rather than only the stored rows.
func (b *Bus) ResumeFrom(session string, after int64) ([]forge.Event, *Subscription) {
	c := make(chan forge.Event, b.buffer)
	s := &Subscription{C: c, c: c, bus: b, session: session}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topicLocked(session)
	t.subs[s] = struct{}{}
	backlog := t.backlog
	if t.turnID == "" && len(t.ended) > 0 && t.ended[0].Seq <= after+1 && t.ended[len(t.ended)-1].Seq > after {
		backlog = t.ended
	}
	return append([]forge.Event(nil), backlog...), s
}

// EndTurn drops turnID's backlog once its last event is published and
// stored: from then on the stored log serves resumes.
func (b *Bus) EndTurn(session, turnID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[session]
	if t == nil || t.turnID != turnID {
		return
	}
	b.endTurnLocked(session, t)
	b.gcLocked(session, t)
}

// Publish delivers ev to the session's subscribers without blocking, and
// appends it to the backlog of the running turn.
func (b *Bus) Publish(ev forge.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[ev.SessionID]
	if t == nil {
		return
	}
	if t.turnID != "" && ev.TurnID != nil && *ev.TurnID == t.turnID {
		if len(t.backlog) >= b.backlogMax {
			// Keep the newest half; resumes from before it read the store.
			n := copy(t.backlog, t.backlog[len(t.backlog)/2:])
			t.backlog = t.backlog[:n]
		}
		t.backlog = append(t.backlog, ev)
	}
	if ev.Type == forge.EventTurnDone && t.turnID != "" && ev.TurnID != nil && *ev.TurnID == t.turnID {
		// The turn's last event is stored: from here the log serves resumes.
		b.endTurnLocked(ev.SessionID, t)
	}
	for s := range t.subs {
		select {
		case s.c <- ev:
		default:
			s.lagged.Store(true)
			b.dropLocked(s)
		}
	}
}

// Subscribers returns how many subscriptions a session has (for tests and
// metrics).
func (b *Bus) Subscribers(session string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[session]; t != nil {
		return len(t.subs)
	}
	return 0
}
