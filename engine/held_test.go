package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
)

// writeLog records the write transactions of a turn (BeginTurn and
// Commit; seq reservations are not the turn's) and which events each
// stored.
type writeLog struct {
	forge.Store
	mu     sync.Mutex
	writes [][]string // per write, the types of the events it stored
}

// wrap puts wl in front of the engine's store (a harness option).
func (wl *writeLog) wrap(c *engine.Config) {
	wl.Store = c.Store
	c.Store = wl
}

func (w *writeLog) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	err := w.Store.BeginTurn(ctx, b)
	w.record(b.Events, err)
	return err
}

func (w *writeLog) Commit(ctx context.Context, b *forge.Batch) error {
	err := w.Store.Commit(ctx, b)
	w.record(b.Events, err)
	return err
}

func (w *writeLog) record(evs []forge.Event, err error) {
	if err != nil {
		return
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	w.mu.Lock()
	w.writes = append(w.writes, types)
	w.mu.Unlock()
}

func (w *writeLog) take() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

// streamTurn starts a turn subscribed and collects its events.
func streamTurn(t *testing.T, h *harness, sid string) []forge.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	_, events, err := h.eng.StreamTurn(ctx, forge.DefaultTenant, sid, msg("hi"))
	if err != nil {
		t.Fatal(err)
	}
	var out []forge.Event
	for ev, err := range events {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// deltaText joins the deltas of evs, checking that their seqs increase.
func deltaText(t *testing.T, evs []forge.Event) string {
	t.Helper()
	var b strings.Builder
	for i, ev := range evs {
		if i > 0 && ev.Seq <= evs[i-1].Seq {
			t.Fatalf("seq %d after %d", ev.Seq, evs[i-1].Seq)
		}
		if ev.Type == forge.EventModelDelta {
			var d forge.DeltaData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			b.WriteString(d.Delta)
		}
	}
	return b.String()
}

// TestDeltasOfABurstShareTheTerminalWrite: a model that reports its waits
// and streams its whole reply without waiting costs a turn two writes (its
// creation and its end), and its deltas still reach a subscriber, in seq
// order between the rows around them. A model that does not report its
// waits costs one write more: before its first delta.
func TestDeltasOfABurstShareTheTerminalWrite(t *testing.T) {
	t.Parallel()
	wl := &writeLog{}
	h := newHarness(t, wl.wrap)
	h.agent("a", nil)
	s := h.session("a")
	want := "turn.created message.created message.created step.started model.message " +
		"model.message.delta model.message.delta model.message.delta model.message step.finished message.updated turn.done"
	for _, tc := range []struct {
		silent bool
		writes string
	}{
		{false, "[turn.created message.created] [message.created step.started model.message model.message step.finished message.updated turn.done]"},
		{true, "[turn.created message.created] [message.created step.started model.message] [model.message step.finished message.updated turn.done]"},
	} {
		h.model.push(reply{deltas: []string{"a", "b", "c"}, silent: tc.silent})
		wl.take()
		evs := streamTurn(t, h, s.ID)
		if got := types(evs); got != want {
			t.Fatalf("silent %v: events %s", tc.silent, got)
		}
		if got := deltaText(t, evs); got != "abc" {
			t.Fatalf("silent %v: deltas %q", tc.silent, got)
		}
		var writes []string
		for _, w := range wl.take() {
			writes = append(writes, "["+strings.Join(w, " ")+"]")
		}
		if got := strings.Join(writes, " "); got != tc.writes {
			t.Fatalf("silent %v: writes\n%s\nwant\n%s", tc.silent, got, tc.writes)
		}
	}
}

// TestHeldDeltasArePublishedWhenTheModelWaits: the deltas a model streamed
// before it waits reach a subscriber while it waits, and by then the rows
// before them (the streaming part's among them) are committed.
func TestHeldDeltasArePublishedWhenTheModelWaits(t *testing.T) {
	t.Parallel()
	wl := &writeLog{}
	h := newHarness(t, wl.wrap)
	h.agent("a", nil)
	s := h.session("a")
	release := make(chan struct{})
	h.model.push(reply{deltas: []string{"a", "b"}, block: release})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	var seen []forge.Event
	for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
		if ev.Type == forge.EventModelDelta && deltaText(t, seen) == "ab" {
			break
		}
	}
	// The model is still waiting: its part is stored as streaming.
	msgs, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || len(msgs[1].Parts) != 2 || msgs[1].Parts[1].State != forge.StateStreaming {
		t.Fatalf("stored while the model waits: %d messages %+v", len(msgs), msgs)
	}
	close(release)
	if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnDone || got.Output.Text != "ab" {
		t.Fatalf("turn %+v", got)
	}
	if n := len(wl.take()); n != 3 {
		t.Fatalf("%d writes, want 3: creation, the deltas before the wait, the end", n)
	}
}

// TestAFailedWriteOfHeldDeltasEndsTheCall: when the write before the
// model's wait fails for good, the model call is aborted (not left waiting
// for the model) and the turn ends store_error with the part interrupted.
func TestAFailedWriteOfHeldDeltasEndsTheCall(t *testing.T) {
	t.Parallel()
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl))
	h.agent("a", nil)
	s := h.session("a")
	never := make(chan struct{}) // the model would wait for ever
	h.model.push(reply{deltas: []string{"a"}, block: never})
	fs.setFail(func(b *forge.Batch) bool {
		// The write before the wait (the first that stores the part) fails
		// through its retries; the terminal write lands.
		return b.Turn == nil && len(b.Parts) > 0
	})
	got := h.run(s.ID, msg("go"))
	if got.Status != forge.TurnErrored || got.Error == nil || got.Error.Code != forge.CodeStoreError {
		t.Fatalf("turn %+v (error %+v)", got, got.Error)
	}
	fs.mu.Lock()
	failed := fs.failed
	fs.mu.Unlock()
	if failed != 3 {
		t.Fatalf("%d failed commits, want 3 (a try and two retries)", failed)
	}
	msgs, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p := msgs[1].Parts[1]; p.State != forge.StateInterrupted || p.Text != "a" {
		t.Fatalf("part %+v", p)
	}
}

// streamReads counts the store reads a turn stream could make.
type streamReads struct {
	forge.Store
	mu                          sync.Mutex
	sessions, turns, eventPages int
}

func (r *streamReads) GetSession(ctx context.Context, tenant, id string) (*forge.Session, error) {
	r.mu.Lock()
	r.sessions++
	r.mu.Unlock()
	return r.Store.GetSession(ctx, tenant, id)
}

// SessionForTurn is the session read a turn starts with (maybe cached).
func (r *streamReads) SessionForTurn(ctx context.Context, tenant, id string) (*forge.Session, error) {
	r.mu.Lock()
	r.sessions++
	r.mu.Unlock()
	return r.Store.SessionForTurn(ctx, tenant, id)
}

func (r *streamReads) GetTurn(ctx context.Context, tenant, sid, tid string) (*forge.Turn, error) {
	r.mu.Lock()
	r.turns++
	r.mu.Unlock()
	return r.Store.GetTurn(ctx, tenant, sid, tid)
}

func (r *streamReads) ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error) {
	r.mu.Lock()
	r.eventPages++
	r.mu.Unlock()
	return r.Store.ListEvents(ctx, tenant, q)
}

func (r *streamReads) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf("sessions %d, turns %d, event pages %d", r.sessions, r.turns, r.eventPages)
	r.sessions, r.turns, r.eventPages = 0, 0, 0
	return s
}

// TestStreamTurnReadsNothingBack: a turn streamed from its start, chaining
// from a turn that ended here, reads the session once (to start it) and
// neither a turn nor the stored log: everything it yields is published
// after it subscribed. Another tenant's session is refused.
func TestStreamTurnReadsNothingBack(t *testing.T) {
	t.Parallel()
	rc := &streamReads{}
	h := newHarness(t, func(c *engine.Config) {
		rc.Store = c.Store
		c.Store = rc
	})
	h.agent("a", nil)
	s := h.session("a")
	for i := range 2 {
		h.model.push(reply{deltas: []string{"a", "b"}})
		rc.take()
		evs := streamTurn(t, h, s.ID)
		if got := deltaText(t, evs); got != "ab" || evs[0].Type != forge.EventTurnCreated || evs[len(evs)-1].Type != forge.EventTurnDone {
			t.Fatalf("turn %d: %s, deltas %q", i, types(evs), got)
		}
		if got := rc.take(); i == 1 && got != "sessions 1, turns 0, event pages 0" {
			t.Fatalf("a turn stream read %s", got)
		}
	}
	if _, _, err := h.eng.StreamTurn(h.ctx, "other-tenant", s.ID, msg("hi")); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("another tenant's session: %v", err)
	}
}

// lagCount is the in-process bus counting the subscribers it cut off.
type lagCount struct {
	*bus.Bus
	cut atomic.Int64
}

func (b *lagCount) Subscribe(ctx context.Context, session string, after int64) ([]forge.Event, forge.BusSubscription, error) {
	held, s, err := b.Bus.Subscribe(ctx, session, after)
	if err != nil {
		return nil, nil, err
	}
	return held, &lagSub{BusSubscription: s, b: b}, nil
}

type lagSub struct {
	forge.BusSubscription
	b *lagCount
}

func (s *lagSub) Next(ctx context.Context, wait bool) ([]forge.Event, error) {
	evs, err := s.BusSubscription.Next(ctx, wait)
	if errors.Is(err, forge.ErrLagged) {
		s.b.cut.Add(1)
	}
	return evs, err
}

// TestStreamTurnCutOffResumesFromTheStore: a turn stream the bus cuts off
// (a reply of many deltas published in one burst to a tiny buffer)
// resumes, reading the store then, and still yields every delta once, in
// order.
func TestStreamTurnCutOffResumesFromTheStore(t *testing.T) {
	t.Parallel()
	b := &lagCount{Bus: bus.New(4, 0)}
	h := newHarness(t, func(c *engine.Config) { c.Bus = b })
	h.agent("a", nil)
	s := h.session("a")
	var deltas []string
	for i := range 500 {
		deltas = append(deltas, fmt.Sprintf("%d,", i))
	}
	h.model.push(reply{deltas: deltas})
	evs := streamTurn(t, h, s.ID)
	if got := deltaText(t, evs); got != strings.Join(deltas, "") || evs[len(evs)-1].Type != forge.EventTurnDone {
		t.Fatalf("%d events, deltas %d bytes", len(evs), len(got))
	}
	if b.cut.Load() == 0 {
		t.Fatal("the stream was not cut off: the test did not exercise resuming")
	}
}

// TestShortWaitsWriteNothing: a model that waits between its deltas costs
// one write for them however short its waits, the first: it carries the
// part's first row with its first delta, which a reader is waiting for, so
// it does not linger (it used to, and the first delta of a reply came
// DeltaLinger late). The deltas after it are published on the bus alone.
// Either way the deltas reach a subscriber in order.
func TestShortWaitsWriteNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		linger time.Duration
		writes int
	}{{time.Hour, 3}, {-1, 3}} {
		wl := &writeLog{}
		h := newHarness(t, func(c *engine.Config) {
			wl.wrap(c)
			c.DeltaLinger = tc.linger
		})
		h.agent("a", nil)
		s := h.session("a")
		h.model.push(reply{deltas: []string{"a", "b", "c"}, waitBetween: true})
		wl.take()
		evs := streamTurn(t, h, s.ID)
		if got := deltaText(t, evs); got != "abc" {
			t.Fatalf("linger %v: deltas %q", tc.linger, got)
		}
		if got := len(wl.take()); got != tc.writes {
			t.Fatalf("linger %v: %d writes, want %d", tc.linger, got, tc.writes)
		}
	}
}

// TestPacedDeltasCostNoWrites: a model that pauses before every delta
// (longer than DeltaLinger) costs the same writes for 3 deltas as for 300:
// its turn's creation, the part's first row with the first delta, the
// terminal write (checkpoints aside: the interval is an hour here). No
// delta waits on the store.
func TestPacedDeltasCostNoWrites(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 300} {
		wl := &writeLog{}
		h := newHarness(t, func(c *engine.Config) {
			wl.wrap(c)
			c.DeltaLinger = -1
			c.CheckpointInterval = time.Hour
		})
		h.agent("a", nil)
		s := h.session("a")
		var deltas []string
		for i := range n {
			deltas = append(deltas, fmt.Sprintf("%d,", i))
		}
		h.model.push(reply{deltas: deltas, waitBetween: true})
		wl.take()
		evs := streamTurn(t, h, s.ID)
		if got, want := deltaText(t, evs), strings.Join(deltas, ""); got != want {
			t.Fatalf("%d deltas: got %d bytes, want %d", n, len(got), len(want))
		}
		if got := len(wl.take()); got != 3 {
			t.Fatalf("%d paced deltas: %d writes, want 3", n, got)
		}
	}
}

// TestLongBurstIsNotHeldToItsEnd: deltas the model streams without
// waiting are held at most DeltaMaxHold: the write that publishes the
// first ones comes at the first delta past it, not with the terminal write
// (then the rest go on the bus alone). With a negative DeltaMaxHold the
// whole burst shares the terminal write.
func TestLongBurstIsNotHeldToItsEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxHold time.Duration
		writes  int
	}{{time.Millisecond, 3}, {-1, 2}} {
		wl := &writeLog{}
		h := newHarness(t, func(c *engine.Config) {
			wl.wrap(c)
			c.DeltaLinger = time.Hour
			c.DeltaMaxHold = tc.maxHold
			c.CheckpointInterval = time.Hour
		})
		h.agent("a", nil)
		s := h.session("a")
		h.model.push(reply{deltas: []string{"a", "b", "c", "d"}, gap: 2 * time.Millisecond})
		wl.take()
		evs := streamTurn(t, h, s.ID)
		if got := deltaText(t, evs); got != "abcd" {
			t.Fatalf("max hold %v: deltas %q", tc.maxHold, got)
		}
		if got := len(wl.take()); got != tc.writes {
			t.Fatalf("max hold %v: %d writes, want %d", tc.maxHold, got, tc.writes)
		}
	}
}

// TestLingerRacingTheStream: with a linger of a microsecond the timer's
// writes race the executor going on with the stream (run with -race):
// every delta still reaches a subscriber once, in order, and the stored
// part holds the whole text.
func TestLingerRacingTheStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) { c.DeltaLinger = time.Microsecond })
	h.agent("a", nil)
	s := h.session("a")
	var deltas []string
	for i := range 300 {
		deltas = append(deltas, fmt.Sprintf("%d,", i))
	}
	h.model.push(reply{deltas: deltas, waitBetween: true})
	evs := streamTurn(t, h, s.ID)
	want := strings.Join(deltas, "")
	if got := deltaText(t, evs); got != want {
		t.Fatalf("deltas: %d bytes, want %d", len(got), len(want))
	}
	turn := evs[len(evs)-1]
	msgs, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, *turn.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	if p := msgs[1].Parts[1]; p.Text != want || p.State != forge.StateCompleted {
		t.Fatalf("stored part %q (%s)", p.Text, p.State)
	}
}
