package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/eventlog"
)

// lagCounter wraps a bus and counts the subscriptions it cut off, so the
// stress test knows it exercised the resume path.
type lagCounter struct {
	forge.Bus
	cut atomic.Int64
}

func (b *lagCounter) Subscribe(ctx context.Context, session string, after int64) ([]forge.Event, forge.BusSubscription, error) {
	held, s, err := b.Bus.Subscribe(ctx, session, after)
	if err != nil {
		return nil, nil, err
	}
	return held, &countedSub{BusSubscription: s, b: b}, nil
}

type countedSub struct {
	forge.BusSubscription
	b *lagCounter
}

func (s *countedSub) Next(ctx context.Context, wait bool) ([]forge.Event, error) {
	evs, err := s.BusSubscription.Next(ctx, wait)
	if errors.Is(err, forge.ErrLagged) {
		s.b.cut.Add(1)
	}
	return evs, err
}

// TestSlowSubscribersGetEveryDeltaOnceInOrder: many session-stream
// subscribers, slower than the writer, with a tiny bus buffer, over several
// turns of long delta streams: the bus cuts them off again and again, and
// each still gets every delta exactly once, in order, and every stored
// event once (DESIGN.md: a resume has no gap and no duplicate).
func TestSlowSubscribersGetEveryDeltaOnceInOrder(t *testing.T) {
	t.Parallel()
	const (
		subscribers = 16
		turns       = 3
		deltas      = 1000
	)
	f := newFixture(t, eventlog.Config{}, bus.Options{Buffer: 4})
	counted := &lagCounter{Bus: f.bus}
	f.log = eventlog.New(eventlog.Config{Store: f.store, Bus: counted})

	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()
	type result struct {
		events []forge.Event
		err    error
	}
	results := make(chan result, subscribers)
	var wg sync.WaitGroup
	for i := range subscribers {
		s, err := f.log.Subscribe(ctx, forge.DefaultTenant, f.sess.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r result
			dones := 0
			for ev, err := range s.Events(ctx, "") {
				if err != nil {
					r.err = err
					break
				}
				r.events = append(r.events, ev)
				if len(r.events)%(5+i) == 0 {
					time.Sleep(20 * time.Microsecond) // a slow reader
				}
				if ev.Type == forge.EventTurnDone {
					if dones++; dones == turns {
						break
					}
				}
			}
			results <- r
		}()
	}
	want := map[string]string{} // part id -> its deltas, in order
	for range turns {
		tr := f.begin()
		p := f.startText(tr, f.sess.MainThreadID)
		for i := range deltas {
			d := fmt.Sprintf("%d,", i)
			f.delta(tr, p, f.sess.MainThreadID, d)
			want[p.ID] += d
		}
		f.complete(tr, p, f.sess.MainThreadID)
		f.end(tr)
	}
	wg.Wait()
	close(results)
	stored, err := f.store.ListEvents(f.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: f.sess.ID, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		got := map[string]string{}
		seen := map[int64]bool{}
		for i, ev := range r.events {
			if i > 0 && ev.Seq <= r.events[i-1].Seq {
				t.Fatalf("seq %d after %d: out of order or duplicate", ev.Seq, r.events[i-1].Seq)
			}
			seen[ev.Seq] = true
			if ev.Type == forge.EventModelDelta {
				var d forge.DeltaData
				_ = json.Unmarshal(ev.Data, &d)
				got[ev.ID] += d.Delta
			}
		}
		for part, text := range want {
			if got[part] != text {
				var ds []int64
				for _, ev := range r.events {
					if ev.Type == forge.EventModelDelta && ev.ID == part {
						ds = append(ds, ev.Seq)
					}
				}
				for i := 1; i < len(ds); i++ {
					if ds[i] != ds[i-1]+1 {
						t.Logf("part %s: no delta between seqs %d and %d", part, ds[i-1], ds[i])
					}
				}
				t.Fatalf("part %s: a subscriber got %d bytes of deltas, want %d", part, len(got[part]), len(text))
			}
		}
		for _, ev := range stored {
			if !seen[ev.Seq] {
				t.Fatalf("a subscriber missed stored event %d (%s)", ev.Seq, ev.Type)
			}
		}
	}
	if counted.cut.Load() == 0 {
		t.Fatal("no subscriber was cut off: the test did not exercise resuming")
	}
	t.Logf("%d cut-offs resumed", counted.cut.Load())
}

// TestCursorOlderThanTrimmedBacklogGetsTextSoFar: when the bus has
// dropped deltas a resume needs, the resume gets, per part still
// streaming, in whichever thread, its row with the text up to what the bus
// kept, then the kept deltas: the text adds up.
func TestCursorOlderThanTrimmedBacklogGetsTextSoFar(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{}, bus.Options{BacklogMax: 16})
	tr := f.begin()
	child := f.ids.New(forge.PrefixThread)
	mainPart := f.startText(tr, f.sess.MainThreadID)
	childPart := f.startText(tr, child)
	for i := range 40 {
		f.delta(tr, mainPart, f.sess.MainThreadID, fmt.Sprintf("m%d ", i))
		f.delta(tr, childPart, child, fmt.Sprintf("c%d ", i))
	}
	got := make(chan []forge.Event, 1)
	go func() { got <- f.collect(eventlog.Query{After: 1, TurnID: tr.ID}, 1) }()
	for f.bus.Subscribers(f.sess.ID) == 0 {
		time.Sleep(time.Millisecond) // wait for the reader to subscribe (a poll, not ordering)
	}
	f.delta(tr, mainPart, f.sess.MainThreadID, "end")
	f.complete(tr, mainPart, f.sess.MainThreadID)
	f.complete(tr, childPart, child)
	f.end(tr)
	evs := <-got
	text := map[string]string{}
	rows := map[string]string{}
	for i, ev := range evs {
		if i > 0 && ev.Seq <= evs[i-1].Seq {
			t.Fatalf("seq %d after %d", ev.Seq, evs[i-1].Seq)
		}
		switch ev.Type {
		case forge.EventModelMessage:
			var p forge.Part
			_ = json.Unmarshal(ev.Data, &p)
			if p.State == forge.StateStreaming && p.Text != "" {
				rows[p.ID] = *ev.ThreadID
				text[p.ID] = p.Text
			}
		case forge.EventModelDelta:
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			text[ev.ID] += d.Delta
		}
	}
	if rows[mainPart.ID] != f.sess.MainThreadID || rows[childPart.ID] != child {
		t.Fatalf("text-so-far rows by part (thread): %v", rows)
	}
	if text[mainPart.ID] != mainPart.Text || text[childPart.ID] != childPart.Text {
		t.Fatalf("rebuilt %q / %q, want %q / %q", text[mainPart.ID], text[childPart.ID], mainPart.Text, childPart.Text)
	}
}
