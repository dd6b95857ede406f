// Package bus is the in-process forge.Bus: per-session fan-out of live
// events to subscribers, and each session's recent events (deltas
// included) so that a subscriber resumes after any seq.
//
// Publish never blocks: a subscriber whose buffer is full is cut off (its
// Next returns forge.ErrLagged once it has read what was buffered) and
// resubscribes from its own cursor. A session's events are kept while a
// turn runs (bounded by BacklogMax: the oldest half is dropped when it is
// reached, and the text of dropped deltas of parts still streaming is
// folded into their "text so far" rows) and for Retention after it ended,
// across the next turn's start, so a subscriber cut off near a turn's end
// still gets every delta it missed. Expiry is lazy (checked on every call
// with the injected clock): the bus owns no goroutine.
package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
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
	// Retention is how long a session's events are kept once no turn runs
	// (after EndTurn, or after an event published outside any turn).
	Retention time.Duration
	Clock     forge.Clock
}

// Bus fans events out per session. It implements forge.Bus.
type Bus struct {
	opts Options

	mu     sync.Mutex // guards the following
	topics map[string]*topic
	// expiring lists sessions with a retention deadline, oldest first (at
	// most one entry per topic: topic.queued).
	expiring []expiry
}

var _ forge.Bus = (*Bus)(nil)

type expiry struct {
	session string
	at      time.Time
}

// topic is one session's stream.
type topic struct {
	subs   map[*subscription]struct{}
	events []forge.Event // recent events in seq order, deltas included
	last   int64         // last published seq
	// open are the parts streaming now, by part id, with the text of
	// their deltas already dropped from events.
	open    map[string]*openPart
	turn    string    // the running turn, "" when none
	expires time.Time // zero while a turn runs or nothing is kept
	queued  bool      // an entry for this topic is in Bus.expiring
}

// openPart is a part still streaming: its row as its model.message start
// event gave it, and the text of its trimmed deltas.
type openPart struct {
	start   forge.Event
	row     forge.Part
	text    []byte
	lastSeq int64 // the seq of its last trimmed delta, 0 when none
	lastAt  time.Time
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
	return &Bus{opts: opts, topics: map[string]*topic{}}
}

func (b *Bus) topicLocked(session string) *topic {
	t := b.topics[session]
	if t == nil {
		t = &topic{subs: map[*subscription]struct{}{}, open: map[string]*openPart{}}
		b.topics[session] = t
	}
	return t
}

// gcLocked forgets a topic that holds nothing and has no subscriber.
func (b *Bus) gcLocked(session string, t *topic) {
	if len(t.subs) == 0 && t.turn == "" && len(t.events) == 0 && len(t.open) == 0 && !t.queued {
		delete(b.topics, session)
	}
}

// idleLocked starts t's retention: its events go Retention from now.
func (b *Bus) idleLocked(session string, t *topic, now time.Time) {
	t.expires = now.Add(b.opts.Retention)
	if !t.queued {
		t.queued = true
		b.expiring = append(b.expiring, expiry{session: session, at: t.expires})
	}
}

// sweepLocked drops the events of topics whose retention is over.
func (b *Bus) sweepLocked(now time.Time) {
	i := 0
	for ; i < len(b.expiring); i++ {
		e := b.expiring[i]
		if e.at.After(now) {
			break
		}
		t := b.topics[e.session]
		if t == nil {
			continue
		}
		t.queued = false
		switch {
		case t.turn != "" || t.expires.IsZero():
			// A turn began since: nothing expires.
		case t.expires.After(now):
			// Published to again while idle: wait for the new deadline.
			t.queued = true
			b.expiring = append(b.expiring, expiry{session: e.session, at: t.expires})
		default:
			t.events, t.expires = nil, time.Time{}
			clear(t.open)
		}
		b.gcLocked(e.session, t)
	}
	if i > 0 {
		b.expiring = slices.Delete(b.expiring, 0, i)
	}
}

// Publish appends ev to its session's stream and hands it to each
// subscriber without blocking; a subscriber whose buffer is full is cut
// off. A seq not above the session's last is refused.
func (b *Bus) Publish(_ context.Context, ev forge.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.opts.Clock.Now()
	b.sweepLocked(now)
	t := b.topicLocked(ev.SessionID)
	if ev.Seq <= t.last {
		return forge.Errorf(forge.ErrConflict, "bus: seq %d of session %s is not above the last published seq %d", ev.Seq, ev.SessionID, t.last)
	}
	t.last = ev.Seq
	if ev.Type == forge.EventModelMessage {
		// The part's id and state say what to do; the whole part is
		// decoded only when it starts streaming (most parts arrive
		// complete).
		var head struct {
			ID    string `json:"id"`
			State string `json:"state"`
		}
		if err := json.Unmarshal(ev.Data, &head); err == nil {
			if head.State == forge.StateStreaming {
				var p forge.Part
				if err := json.Unmarshal(ev.Data, &p); err == nil {
					t.open[p.ID] = &openPart{start: ev, row: p}
				}
			} else {
				delete(t.open, head.ID)
			}
		}
	}
	if len(t.events) >= b.opts.BacklogMax {
		b.trimLocked(t)
	}
	t.events = append(t.events, ev)
	if t.turn == "" {
		b.idleLocked(ev.SessionID, t, now)
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
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[ev.SessionID]
	if t == nil {
		return nil
	}
	for s := range t.subs {
		if !s.push(ev) {
			b.dropLocked(t, s) // cut off: it fell behind
		}
	}
	return nil
}

// trimLocked drops the oldest half of t's events, folding the deltas of
// parts still streaming into their text so far.
func (b *Bus) trimLocked(t *topic) {
	n := len(t.events) / 2
	for _, ev := range t.events[:n] {
		if ev.Type != forge.EventModelDelta {
			continue
		}
		op := t.open[ev.ID]
		if op == nil {
			continue
		}
		var d forge.DeltaData
		if json.Unmarshal(ev.Data, &d) == nil {
			op.text = append(op.text, d.Delta...)
		}
		op.lastSeq, op.lastAt = ev.Seq, ev.CreatedAt
	}
	m := copy(t.events, t.events[n:])
	clear(t.events[m:])
	t.events = t.events[:m]
}

// BeginTurn keeps the session's events while turnID runs.
func (b *Bus) BeginTurn(_ context.Context, session, turnID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweepLocked(b.opts.Clock.Now())
	t := b.topicLocked(session)
	t.turn, t.expires = turnID, time.Time{}
	return nil
}

// EndTurn starts the retention of the session's events once turnID, its
// running turn (or, when none runs, any turn), has ended.
func (b *Bus) EndTurn(_ context.Context, session, turnID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.opts.Clock.Now()
	b.sweepLocked(now)
	t := b.topics[session]
	if t == nil || (t.turn != "" && t.turn != turnID) {
		return nil
	}
	t.turn = ""
	b.idleLocked(session, t, now)
	return nil
}

// Subscribe returns the session's kept events after after (led by the
// text so far of parts whose deltas after after were trimmed) and a
// subscription to every event published later.
func (b *Bus) Subscribe(_ context.Context, session string, after int64) ([]forge.Event, forge.BusSubscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweepLocked(b.opts.Clock.Now())
	t := b.topicLocked(session)
	held, err := textSoFar(t, after)
	if err != nil {
		return nil, nil, err
	}
	i := sort.Search(len(t.events), func(i int) bool { return t.events[i].Seq > after })
	held = append(held, t.events[i:]...)
	s := &subscription{bus: b, session: session, limit: b.opts.Buffer, notify: make(chan struct{}, 1)}
	t.subs[s] = struct{}{}
	return held, s, nil
}

// textSoFar returns a model.message per part still streaming whose trimmed
// deltas include one after after: the part's row with the text of its
// trimmed deltas, at the seq of the last of them (which the subscriber
// never got), in seq order.
func textSoFar(t *topic, after int64) ([]forge.Event, error) {
	var rows []forge.Event
	for _, op := range t.open {
		if op.lastSeq <= after {
			continue
		}
		row := op.row
		row.Text = string(op.text)
		data, err := json.Marshal(&row)
		if err != nil {
			return nil, fmt.Errorf("bus: text so far of %s: %w", row.ID, err)
		}
		ev := op.start
		ev.Seq, ev.CreatedAt, ev.Data = op.lastSeq, op.lastAt, data
		rows = append(rows, ev)
	}
	slices.SortFunc(rows, func(a, b forge.Event) int { return cmpSeq(a.Seq, b.Seq) })
	return rows, nil
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

func (b *Bus) dropLocked(t *topic, s *subscription) {
	if s.closed {
		return
	}
	s.closed = true
	s.end()
	delete(t.subs, s)
	b.gcLocked(s.session, t)
}

// Subscribers returns how many subscriptions a session has (tests,
// metrics).
func (b *Bus) Subscribers(session string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[session]; t != nil {
		return len(t.subs)
	}
	return 0
}

// subscription is one subscriber of a session. Its queue grows as events
// come (a subscriber costs nothing up front, however large Buffer is) up
// to limit events left unread: the next event cuts it off.
type subscription struct {
	bus     *Bus
	session string
	limit   int
	closed  bool // guarded by bus.mu
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

// Close ends the subscription. Safe to call more than once.
func (s *subscription) Close() error {
	b := s.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[s.session]; t != nil {
		b.dropLocked(t, s)
	}
	return nil
}

// ProcessLocal reports that every subscriber of this bus is in this
// process: eventlog.Log may then publish a held-back delta after a commit
// that also stored later events (see eventlog.Log.Local).
func (b *Bus) ProcessLocal() bool { return true }
