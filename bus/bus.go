// Package bus is the in-process forge.Bus: per-session fan-out of live
// events to subscribers, and each session's recent events (deltas
// included) so that a subscriber resumes after any seq.
//
// Publish never blocks: a subscriber whose buffer is full is cut off (its
// Next returns forge.ErrLagged once it has read what was buffered) and
// resubscribes from its own cursor. A session's events are kept while a
// turn runs (bounded by BacklogMax: the oldest half is dropped when it is
// reached; the deltas of parts still streaming are covered by the "text
// so far" rows the event log publishes with its events, which the bus
// keeps, one per part, until the part's next model.message). Once a turn has ended its stored
// events are dropped but its turn.done (they are in the store, where
// readers take them), and its deltas are kept for Retention after its
// end, across the next turn's start, so a subscriber cut off near a
// turn's end still gets every delta it missed. Expiry is lazy (checked on
// calls with the injected clock): the bus owns no goroutine.
//
// Each session has its own lock: publishing to one session never waits
// for another, and the bus-wide lock guards only the map of sessions
// (taken for reading on every call) and the expiry queue.
package bus

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
)

// Defaults of Options.
const (
	DefaultBuffer     = 1024
	DefaultBacklogMax = 200_000
	DefaultRetention  = 30 * time.Second
)

// Options configure a Bus. Zero values take the defaults.
type Options struct {
	// Buffer is how many events a subscriber may leave unread before it
	// is cut off.
	Buffer int
	// BacklogMax bounds the events kept per session.
	BacklogMax int
	// Retention is how long an ended turn's deltas are kept (and a
	// session's events once no turn runs).
	Retention time.Duration
	Clock     forge.Clock
}

// Bus fans events out per session. It implements forge.Bus.
type Bus struct {
	opts Options

	mu     sync.RWMutex // guards topics; taken before any topic's lock
	topics map[string]*topic

	expMu sync.Mutex // guards expiring; taken after a topic's lock
	// expiring lists sessions with a retention deadline (at most one
	// entry per topic: topic.queued).
	expiring []expiry
	// nextSweep is the unix nanoseconds of expiring's first deadline
	// (MaxInt64 when none): calls check it without a lock.
	nextSweep atomic.Int64
}

var _ forge.Bus = (*Bus)(nil)

type expiry struct {
	session string
	at      time.Time
}

// topic is one session's stream.
type topic struct {
	session string

	mu sync.Mutex // guards the following
	// dead is set once the topic left Bus.topics: a caller holding it
	// looks the session up again.
	dead   bool
	subs   map[*subscription]struct{}
	events []forge.Event // recent events in seq order, deltas included
	last   int64         // last published seq
	// rows are the latest text so far row of each part still
	// streaming, by part id (Event.TextSoFar).
	rows map[string]forge.Event
	// trimmed is the highest seq trimmed from events (0: none).
	trimmed int64
	turn    string // the running turn, "" when none
	// turnFirst is the seq of the running turn's first kept event (0:
	// none yet).
	turnFirst int64
	// ended are the turns whose deltas are kept, oldest first: their
	// events up to lastSeq go at their deadline.
	ended   []endedTurn
	expires time.Time // idle deadline: zero while a turn runs or nothing is kept
	queued  bool      // an entry for this topic is in Bus.expiring
}

type endedTurn struct {
	lastSeq int64
	at      time.Time // when its events go
}

// New returns a bus with the given subscriber buffer and backlog bound (0
// means the default).
func New(buffer, backlogMax int) *Bus {
	return NewWithOptions(Options{Buffer: buffer, BacklogMax: backlogMax})
}

// NewWithOptions returns a bus configured by opts.
func NewWithOptions(opts Options) *Bus {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.BacklogMax <= 0 {
		opts.BacklogMax = DefaultBacklogMax
	}
	opts.BacklogMax = max(opts.BacklogMax, 2)
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Clock == nil {
		opts.Clock = forge.SystemClock{}
	}
	b := &Bus{opts: opts, topics: map[string]*topic{}}
	b.nextSweep.Store(math.MaxInt64)
	return b
}

// lock returns the session's topic, locked, creating it when create is
// set (nil when it does not exist otherwise). It sweeps expired topics
// first when one is due.
func (b *Bus) lock(session string, now time.Time, create bool) *topic {
	if now.UnixNano() >= b.nextSweep.Load() {
		b.sweep(now)
	}
	for {
		b.mu.RLock()
		t := b.topics[session]
		b.mu.RUnlock()
		if t == nil {
			if !create {
				return nil
			}
			b.mu.Lock()
			if t = b.topics[session]; t == nil {
				t = &topic{session: session, subs: map[*subscription]struct{}{}, rows: map[string]forge.Event{}}
				b.topics[session] = t
			}
			b.mu.Unlock()
		}
		t.mu.Lock()
		if !t.dead {
			return t
		}
		t.mu.Unlock()
	}
}

// emptyLocked reports whether t holds nothing and nobody reads it.
func (t *topic) emptyLocked() bool {
	return len(t.subs) == 0 && t.turn == "" && len(t.events) == 0 && len(t.rows) == 0
}

// forget removes t from the map when it holds nothing. b.mu is held for
// writing, t.mu by the caller.
func (b *Bus) forgetLocked(t *topic) {
	if t.emptyLocked() && !t.dead {
		t.dead = true
		delete(b.topics, t.session)
	}
}

// expireLocked queues t's idle deadline (or the deadline of its oldest
// ended turn) for the sweep.
func (b *Bus) expireLocked(t *topic, at time.Time) {
	if t.queued {
		return
	}
	t.queued = true
	b.expMu.Lock()
	b.expiring = append(b.expiring, expiry{session: t.session, at: at})
	if at.UnixNano() < b.nextSweep.Load() {
		b.nextSweep.Store(at.UnixNano())
	}
	b.expMu.Unlock()
}

// idleLocked starts t's retention: its events go Retention from now.
func (b *Bus) idleLocked(t *topic, now time.Time) {
	t.expires = now.Add(b.opts.Retention)
	b.expireLocked(t, t.expires)
}

// sweep drops what expired by now: the deltas of ended turns past their
// retention, the events of idle topics past theirs, and topics left empty.
func (b *Bus) sweep(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expMu.Lock()
	var due []expiry
	b.expiring = slices.DeleteFunc(b.expiring, func(e expiry) bool {
		if e.at.After(now) {
			return false
		}
		due = append(due, e)
		return true
	})
	b.storeNextSweepLocked()
	b.expMu.Unlock()
	for _, e := range due {
		t := b.topics[e.session]
		if t == nil {
			continue
		}
		t.mu.Lock()
		t.queued = false
		b.expireTurnsLocked(t, now)
		switch {
		case t.turn != "" || t.expires.IsZero():
			// A turn runs, or nothing idles: only ended turns expire.
		case t.expires.After(now):
			// Published to again while idle: wait for the new deadline.
		default:
			t.events, t.expires = nil, time.Time{}
			t.ended, t.trimmed = nil, 0
			clear(t.rows)
		}
		if next := t.nextDeadline(); !next.IsZero() {
			b.expireLocked(t, next)
		}
		b.forgetLocked(t)
		t.mu.Unlock()
	}
}

func (b *Bus) storeNextSweepLocked() {
	next := int64(math.MaxInt64)
	for _, e := range b.expiring {
		next = min(next, e.at.UnixNano())
	}
	b.nextSweep.Store(next)
}

// nextDeadline is t's earliest deadline, zero when none.
func (t *topic) nextDeadline() time.Time {
	var next time.Time
	if len(t.ended) > 0 {
		next = t.ended[0].at
	}
	if !t.expires.IsZero() && (next.IsZero() || t.expires.Before(next)) {
		next = t.expires
	}
	return next
}

// expireTurnsLocked drops the events of ended turns whose retention is
// over (with whatever precedes them).
func (b *Bus) expireTurnsLocked(t *topic, now time.Time) {
	n := 0
	var upTo int64
	for n < len(t.ended) && !t.ended[n].at.After(now) {
		upTo = t.ended[n].lastSeq
		n++
	}
	if n == 0 {
		return
	}
	t.ended = slices.Delete(t.ended, 0, n)
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].Seq > upTo })
	m := copy(t.events, t.events[i:])
	clear(t.events[m:])
	t.events = t.events[:m]
}

// Publish appends ev to its session's stream and hands it to each
// subscriber without blocking; a subscriber whose buffer is full is cut
// off. A seq not above the session's last is refused.
func (b *Bus) Publish(_ context.Context, ev forge.Event) error {
	now := b.opts.Clock.Now()
	t := b.lock(ev.SessionID, now, true)
	defer t.mu.Unlock()
	if ev.Seq <= t.last {
		return forge.Errorf(forge.ErrConflict, "bus: seq %d of session %s is not above the last published seq %d", ev.Seq, ev.SessionID, t.last)
	}
	t.last = ev.Seq
	for _, row := range ev.TextSoFar {
		t.rows[row.ID] = row.WithoutBusFields()
	}
	if ev.Type == forge.EventModelMessage {
		delete(t.rows, ev.ID) // the part's own event supersedes its row
	}
	ev = ev.WithoutBusFields()
	if len(t.events) >= b.opts.BacklogMax {
		b.trimLocked(t)
	}
	if t.turn != "" && t.turnFirst == 0 && ev.TurnID != nil && *ev.TurnID == t.turn {
		t.turnFirst = ev.Seq
	}
	t.events = append(t.events, ev)
	if t.turn == "" {
		b.idleLocked(t, now)
	}
	for s := range t.subs {
		if !s.push(ev) {
			b.dropLocked(t, s) // cut off: it fell behind
		}
	}
	return nil
}

// PublishEphemeral hands ev (Seq 0) to the session's subscribers open now,
// without keeping it; a subscriber whose buffer is full is cut off.
func (b *Bus) PublishEphemeral(_ context.Context, ev forge.Event) error {
	if ev.Seq != 0 {
		return forge.Errorf(forge.ErrInvalid, "bus: an ephemeral event has no seq (got %d)", ev.Seq)
	}
	t := b.lock(ev.SessionID, b.opts.Clock.Now(), false)
	if t == nil {
		return nil
	}
	defer t.mu.Unlock()
	for s := range t.subs {
		if !s.push(ev) {
			b.dropLocked(t, s) // cut off: it fell behind
		}
	}
	return nil
}

// trimLocked drops the oldest half of t's events (the text of the deltas
// of parts still streaming is in their rows already).
func (b *Bus) trimLocked(t *topic) {
	n := len(t.events) / 2
	t.trimmed = max(t.trimmed, t.events[n-1].Seq)
	m := copy(t.events, t.events[n:])
	clear(t.events[m:])
	t.events = t.events[:m]
}

// BeginTurn keeps the session's events while turnID runs.
func (b *Bus) BeginTurn(_ context.Context, session, turnID string) error {
	t := b.lock(session, b.opts.Clock.Now(), true)
	defer t.mu.Unlock()
	t.turn, t.turnFirst, t.expires = turnID, 0, time.Time{}
	return nil
}

// EndTurn starts the retention of turnID's deltas once it, the running
// turn (or, when none runs, any turn), has ended, and drops its stored
// events but turn.done: readers take them from the store.
func (b *Bus) EndTurn(_ context.Context, session, turnID string) error {
	now := b.opts.Clock.Now()
	t := b.lock(session, now, false)
	if t == nil {
		return nil
	}
	defer t.mu.Unlock()
	if t.turn != "" && t.turn != turnID {
		return nil
	}
	if t.turn == turnID {
		b.compactTurnLocked(t, turnID)
		if len(t.events) > 0 {
			at := now.Add(b.opts.Retention)
			t.ended = append(t.ended, endedTurn{lastSeq: t.events[len(t.events)-1].Seq, at: at})
			b.expireLocked(t, at)
		}
	}
	t.turn, t.turnFirst = "", 0
	b.idleLocked(t, now)
	return nil
}

// compactTurnLocked drops turnID's kept events that the store holds
// (every stored event but its turn.done, which readers use to tell an
// ended turn), keeping its deltas.
func (b *Bus) compactTurnLocked(t *topic, turnID string) {
	if t.turnFirst == 0 {
		return
	}
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].Seq >= t.turnFirst })
	kept := t.events[:i]
	for _, ev := range t.events[i:] {
		if ev.TurnID != nil && *ev.TurnID == turnID && ev.Type != forge.EventModelDelta && ev.Type != forge.EventTurnDone {
			continue
		}
		kept = append(kept, ev)
	}
	clear(t.events[len(kept):])
	t.events = kept
}

// Subscribe returns the session's kept events after after (with the text
// so far of parts whose deltas after after may be trimmed) and a
// subscription to every event published later.
func (b *Bus) Subscribe(_ context.Context, session string, after int64) ([]forge.Event, forge.BusSubscription, error) {
	t := b.lock(session, b.opts.Clock.Now(), true)
	defer t.mu.Unlock()
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].Seq > after })
	var held []forge.Event
	if t.trimmed > after {
		held = WithTextSoFar(t.rows, t.events[i:], after)
	} else {
		held = slices.Clone(t.events[i:])
	}
	s := &subscription{bus: b, session: session, limit: b.opts.Buffer, notify: make(chan struct{}, 1)}
	t.subs[s] = struct{}{}
	return held, s, nil
}

// WithTextSoFar merges into evs (a bus's kept events after after, in seq
// order) the rows (by part id) with a seq above after, in seq order, and
// leaves out the deltas of each row's part at or below its seq: the row
// carries their text. For buses (the Redis bus uses it too).
func WithTextSoFar(rows map[string]forge.Event, evs []forge.Event, after int64) []forge.Event {
	var use []forge.Event
	for _, row := range rows {
		if row.Seq > after {
			use = append(use, row)
		}
	}
	if len(use) == 0 {
		return slices.Clone(evs)
	}
	slices.SortFunc(use, func(a, b forge.Event) int { return cmpSeq(a.Seq, b.Seq) })
	through := make(map[string]int64, len(use))
	for _, row := range use {
		through[row.ID] = row.Seq
	}
	out := make([]forge.Event, 0, len(evs)+len(use))
	for _, ev := range evs {
		for len(use) > 0 && use[0].Seq <= ev.Seq {
			out = append(out, use[0])
			use = use[1:]
		}
		if ev.Type == forge.EventModelDelta && ev.Seq <= through[ev.ID] {
			continue
		}
		out = append(out, ev)
	}
	return append(out, use...)
}

func cmpSeq(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dropLocked ends s; t.mu is held.
func (b *Bus) dropLocked(t *topic, s *subscription) {
	if s.closed {
		return
	}
	s.closed = true
	s.end()
	delete(t.subs, s)
}

// Subscribers returns how many subscriptions a session has (tests,
// metrics).
func (b *Bus) Subscribers(session string) int {
	t := b.lock(session, b.opts.Clock.Now(), false)
	if t == nil {
		return 0
	}
	defer t.mu.Unlock()
	return len(t.subs)
}

// subscription is one subscriber of a session. Its queue grows as events
// come (a subscriber costs nothing up front, however large Buffer is) up
// to limit events left unread: the next event cuts it off.
type subscription struct {
	bus     *Bus
	session string
	limit   int
	closed  bool // guarded by the topic's lock
	// notify holds a token when events were queued or the subscription
	// ended since Next last looked.
	notify chan struct{}

	mu     sync.Mutex // guards the following
	queue  []forge.Event
	ended  bool // closed, or cut off (then lagged)
	lagged bool

	err error // what every later Next returns; owned by Next's caller
}

// push queues ev, or reports false when limit events are queued: the
// subscriber fell behind and is cut off.
func (s *subscription) push(ev forge.Event) bool {
	s.mu.Lock()
	if len(s.queue) >= s.limit {
		s.lagged = true
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	s.wake()
	return true
}

// end ends the subscription: Next returns what is queued, then why.
func (s *subscription) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.wake()
}

func (s *subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the events after the last one returned; see
// forge.BusSubscription.
func (s *subscription) Next(ctx context.Context, wait bool) ([]forge.Event, error) {
	if s.err != nil {
		return nil, s.err
	}
	for {
		s.mu.Lock()
		out := s.queue
		s.queue = nil
		ended, lagged := s.ended, s.lagged
		s.mu.Unlock()
		switch {
		case len(out) > 0:
			return out, nil
		case ended:
			s.err = forge.ErrSubscriptionClosed
			if lagged {
				s.err = forge.ErrLagged
			}
			return nil, s.err
		case !wait:
			return nil, nil
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close ends the subscription. Safe to call more than once. A topic left
// with nothing is forgotten.
func (s *subscription) Close() error {
	b := s.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[s.session]; t != nil {
		t.mu.Lock()
		b.dropLocked(t, s)
		b.forgetLocked(t)
		t.mu.Unlock()
	}
	return nil
}

// Backlog is the bound of a session's kept events (forge.Backlogger).
func (b *Bus) Backlog() int { return b.opts.BacklogMax }

// ProcessLocal reports that every subscriber of this bus is in this
// process: eventlog.Log may then publish a held-back delta after a commit
// that also stored later events (see eventlog.Log.Local).
func (b *Bus) ProcessLocal() bool { return true }
