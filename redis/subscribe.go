package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
)

// Subscribe returns what the session's stream holds after after (with the
// text so far rows of parts whose deltas after after may be trimmed, in
// place of their deltas at or below the rows' seqs) and a subscription to
// every event published from then on.
func (b *Bus) Subscribe(ctx context.Context, sessionID string, after int64) ([]forge.Event, forge.BusSubscription, error) {
	s := &subscription{bus: b, node: b.pick(sessionID), session: sessionID, notify: make(chan struct{}, 1)}
	// Registered before the snapshot is read, so that nothing published
	// after the snapshot escapes it.
	if err := b.register(ctx, s); err != nil {
		return nil, nil, err
	}
	k := b.keys(sessionID)
	res, err := snapshotScript.Run(ctx, s.node.rdb, []string{k.stream, k.open, k.meta}, after).Slice()
	if err != nil {
		_ = s.Close()
		return nil, nil, fmt.Errorf("redis: subscribe to session %s: %w: %w", sessionID, forge.ErrStore, err)
	}
	held, last, err := decodeSnapshot(sessionID, res, after)
	if err != nil {
		_ = s.Close()
		return nil, nil, fmt.Errorf("redis: subscribe to session %s: %w: %w", sessionID, forge.ErrStore, err)
	}
	s.pos = last
	return held, s, nil
}

// decodeSnapshot turns snapshotScript's answer into the held events and
// the stream position the subscription starts after.
func decodeSnapshot(session string, res []any, after int64) ([]forge.Event, int64, error) {
	if len(res) != 3 {
		return nil, 0, fmt.Errorf("snapshot: %d values", len(res))
	}
	flat, _ := res[0].([]any)
	entries, _ := res[1].([]any)
	lastStr, _ := res[2].(string)
	last, err := strconv.ParseInt(lastStr, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: last seq %q", lastStr)
	}
	held := make([]forge.Event, 0, len(entries))
	for _, raw := range entries {
		e, err := decodeEntry(session, raw)
		if err != nil {
			return nil, 0, err
		}
		held = append(held, e.ev)
		last = max(last, e.ev.Seq)
	}
	if len(flat) == 0 {
		return held, last, nil
	}
	rows, err := textSoFar(flat)
	if err != nil {
		return nil, 0, err
	}
	return bus.WithTextSoFar(rows, held, after), last, nil
}

// textSoFar decodes the rows hash (part -> its text so far row as JSON).
func textSoFar(flat []any) (map[string]forge.Event, error) {
	rows := make(map[string]forge.Event, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		part, _ := flat[i].(string)
		raw, _ := flat[i+1].(string)
		var ev forge.Event
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			return nil, fmt.Errorf("text so far of %s: %w", part, err)
		}
		rows[part] = ev
	}
	return rows, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// entry is an event as the stream holds it: prev is the seq of the entry
// before it in the stream (a reader positioned at prev missed nothing);
// -1 for an ephemeral event.
type entry struct {
	ev   forge.Event
	prev int64
}

// decodeEntry decodes one XRANGE entry ([id, [field, value, ...]]) of the
// session's stream.
func decodeEntry(session string, raw any) (entry, error) {
	pair, _ := raw.([]any)
	if len(pair) != 2 {
		return entry{}, fmt.Errorf("stream entry: %v", raw)
	}
	id, _ := pair[0].(string)
	flat, _ := pair[1].([]any)
	values := map[string]string{}
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		values[k] = v
	}
	return makeEntry(session, id, values)
}

func makeEntry(session, id string, values map[string]string) (entry, error) {
	seq, err := seqOf(id)
	if err != nil {
		return entry{}, err
	}
	prev, err := strconv.ParseInt(values["v"], 10, 64)
	if err != nil {
		return entry{}, fmt.Errorf("stream entry %s: no link to the entry before it", id)
	}
	raw, ok := values["e"]
	if !ok {
		ev, err := deltaEvent(session, seq, values)
		if err != nil {
			return entry{}, fmt.Errorf("stream entry %s: %w", id, err)
		}
		return entry{ev: ev, prev: prev}, nil
	}
	// The publisher's encoding, kept as the event's Wire when it is
	// Marshal's: this process's readers write it as it is.
	var ev forge.Event
	if err := ev.DecodeWire([]byte(raw)); err != nil {
		return entry{}, fmt.Errorf("stream entry %s: %w", id, err)
	}
	if ev.Seq != seq {
		ev.Seq, ev.Wire = seq, nil
	}
	return entry{ev: ev, prev: prev}, nil
}

// deltaEvent rebuilds a delta from the fields its entry keeps: the same
// envelope, and data encoded as the event log encodes a forge.DeltaData.
func deltaEvent(session string, seq int64, values map[string]string) (forge.Event, error) {
	ns, err := strconv.ParseInt(values["a"], 10, 64)
	if err != nil {
		return forge.Event{}, fmt.Errorf("delta without a time")
	}
	d := forge.DeltaData{Delta: values["d"]}
	data := d.AppendJSON(make([]byte, 0, len(d.Delta)+16))
	ev := forge.Event{Seq: seq, ID: values["p"], Type: forge.EventModelDelta, SessionID: session,
		CreatedAt: time.Unix(0, ns).UTC(), Data: data}
	if t := values["t"]; t != "" {
		ev.TurnID = &t
	}
	if h := values["h"]; h != "" {
		ev.ThreadID = &h
	}
	return ev, nil
}

func seqOf(id string) (int64, error) {
	ms, _, _ := strings.Cut(id, "-")
	seq, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stream entry id %q", id)
	}
	return seq, nil
}

// parseMessage decodes a session channel's message: "<seq> <prev> <json>"
// for a stream entry, "x <json>" for an ephemeral event.
func parseMessage(payload string) (entry, error) {
	if rest, ok := strings.CutPrefix(payload, ephemeralMark); ok {
		var ev forge.Event
		if err := ev.DecodeWire([]byte(rest)); err != nil {
			return entry{}, err
		}
		return entry{ev: ev, prev: -1}, nil
	}
	seqStr, rest, ok1 := strings.Cut(payload, " ")
	prevStr, raw, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return entry{}, fmt.Errorf("malformed message")
	}
	return makeEntry("", seqStr+"-0", map[string]string{"v": prevStr, "e": raw})
}

// register adds s to its session's subscribers, subscribing this Bus's
// connection (to the session's server) to the session's channel when s is
// the first.
func (b *Bus) register(ctx context.Context, s *subscription) error {
	n := s.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done {
		return forge.ErrSubscriptionClosed
	}
	set := n.sessions[s.session]
	if set == nil {
		// The answer comes through receive, which then makes the
		// session's subscribers read the stream (a message published
		// before the subscription took effect is not lost).
		if err := n.ps.Subscribe(ctx, b.keys(s.session).channel); err != nil {
			return fmt.Errorf("redis: subscribe to session %s: %w: %w", s.session, forge.ErrStore, err)
		}
		set = map[*subscription]struct{}{}
		n.sessions[s.session] = set
	}
	set[s] = struct{}{}
	return nil
}

func (b *Bus) unregister(s *subscription) {
	n := s.node
	n.mu.Lock()
	defer n.mu.Unlock()
	set := n.sessions[s.session]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(n.sessions, s.session)
		if err := n.ps.Unsubscribe(context.Background(), b.keys(s.session).channel); err != nil && !n.done {
			b.log.Warn("redis: unsubscribe failed", "session_id", s.session, "err", err)
		}
	}
}

// receive reads a node's Pub/Sub connection until Close: session events
// go to the session's subscribers, cancel signals to the OnCancel
// functions.
func (b *Bus) receive(n *node) {
	defer b.wg.Done()
	ctx := context.Background()
	backoff := 50 * time.Millisecond
	for {
		msg, err := n.ps.ReceiveTimeout(ctx, 15*time.Second)
		select {
		case <-b.closed:
			return
		default:
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = n.ps.Ping(ctx) // a dead connection shows on the next read
				continue
			}
			b.log.Warn("redis: subscription connection failed; retrying", "server", n.id, "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-b.closed:
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				n.each(b.sessionOf(m.Channel), (*subscription).poke)
			}
		case *goredis.Message:
			b.dispatch(n, m)
		}
	}
}

func (b *Bus) dispatch(n *node, m *goredis.Message) {
	if m.Channel == b.cancel {
		var sig forge.CancelSignal
		if err := json.Unmarshal([]byte(m.Payload), &sig); err != nil {
			b.log.Warn("redis: malformed cancel signal", "err", err)
			return
		}
		b.mu.Lock()
		fns := slices.Clone(b.onCancel)
		b.mu.Unlock()
		for _, fn := range fns {
			fn(sig)
		}
		return
	}
	session := b.sessionOf(m.Channel)
	if session == "" {
		return
	}
	e, err := parseMessage(m.Payload)
	if err != nil {
		b.log.Warn("redis: malformed session message", "session_id", session, "err", err)
		return
	}
	n.each(session, func(s *subscription) { s.push(e) })
}

// each calls fn for each subscriber of the session on this Bus (the
// session's server is n).
func (n *node) each(session string, fn func(*subscription)) {
	if session == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.sessions[session] {
		fn(s)
	}
}

// streamPage is how many entries a subscriber reads from the stream at a
// time.
const streamPage = 1000

// subscription is one subscriber of a session: the Bus's receiving
// goroutine queues what the channel brings; Next returns it when it
// follows on from the subscriber's position, and reads the stream itself
// otherwise.
type subscription struct {
	bus     *Bus
	node    *node // the session's server
	session string
	notify  chan struct{} // signalled when queue or behind changes

	mu     sync.Mutex // guards the following
	queue  []entry
	behind bool // the queue overflowed or the channel was (re)subscribed
	closed bool

	// Owned by Next's caller.
	pos int64 // the last seq returned (or the stream's last when subscribed)
	err error // what every later Next returns
}

func (s *subscription) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *subscription) push(e entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.queue) >= s.bus.opts.Buffer {
		// Too far behind to be handed events: it reads the stream.
		s.queue, s.behind = nil, true
	} else {
		s.queue = append(s.queue, e)
	}
	s.signal()
}

// poke makes the subscriber read the stream once: its channel's
// subscription took effect (again), and what was published before that
// did not reach it.
func (s *subscription) poke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behind = true
	s.signal()
}

func (s *subscription) shut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.queue = nil
	s.signal()
}

// Next returns the events published after the last one it returned.
func (s *subscription) Next(ctx context.Context, wait bool) ([]forge.Event, error) {
	if s.err != nil {
		return nil, s.err
	}
	for {
		s.mu.Lock()
		queue, behind, closed := s.queue, s.behind, s.closed
		s.queue, s.behind = nil, false
		s.mu.Unlock()
		if closed {
			s.err = forge.ErrSubscriptionClosed
			return nil, s.err
		}
		var out []forge.Event
		read := behind
		for _, e := range queue {
			switch {
			case e.prev < 0:
				out = append(out, e.ev) // ephemeral
			case e.ev.Seq <= s.pos:
			case read || e.prev != s.pos:
				read = true // a gap: what follows comes from the stream
			default:
				out = append(out, e.ev)
				s.pos = e.ev.Seq
			}
		}
		if read || (len(out) == 0 && !wait) {
			evs, more, err := s.readStream(ctx)
			out = append(out, evs...)
			if err != nil {
				if errors.Is(err, forge.ErrLagged) {
					s.err = err
					if len(out) > 0 {
						return out, nil
					}
				}
				return nil, err
			}
			if more {
				s.poke()
			}
		}
		if len(out) > 0 || !wait {
			return out, nil
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readStream returns the stream's entries after the subscriber's position
// (a page of them; more reports there may be others). ErrLagged when the
// entry after the position is no longer there (trimmed, or the stream
// expired and started over).
func (s *subscription) readStream(ctx context.Context) (evs []forge.Event, more bool, err error) {
	k := s.bus.keys(s.session)
	msgs, err := s.node.rdb.XRangeN(ctx, k.stream, "("+strconv.FormatInt(s.pos, 10)+"-0", "+", streamPage).Result()
	if err != nil {
		return nil, false, fmt.Errorf("redis: read session %s: %w", s.session, err)
	}
	for _, m := range msgs {
		values := make(map[string]string, len(m.Values))
		for k, v := range m.Values {
			if str, ok := v.(string); ok {
				values[k] = str
			}
		}
		e, err := makeEntry(s.session, m.ID, values)
		if err != nil {
			return evs, false, err
		}
		if e.prev != s.pos {
			return evs, false, forge.ErrLagged
		}
		evs = append(evs, e.ev)
		s.pos = e.ev.Seq
	}
	return evs, len(msgs) == streamPage, nil
}

// Close ends the subscription. Safe to call more than once.
func (s *subscription) Close() error {
	s.shut()
	s.bus.unregister(s)
	return nil
}
