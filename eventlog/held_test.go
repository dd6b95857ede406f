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

// streamDrafts are the drafts of a text part streamed in one write: its
// streaming row, the deltas (held back), its completed row.
func streamDrafts(tr *turn, p *forge.Part, thread string, deltas ...string) []eventlog.Draft {
	start := *p
	start.State = forge.StateStreaming
	drafts := []eventlog.Draft{{Type: forge.EventModelMessage, ID: p.ID, TurnID: tr.ID, ThreadID: thread, Data: &start}}
	for _, d := range deltas {
		drafts = append(drafts, eventlog.Draft{Type: forge.EventModelDelta, ID: p.ID, TurnID: tr.ID, ThreadID: thread,
			Data: forge.DeltaData{Delta: d}, BusOnly: true})
		p.Text += d
	}
	end := *p
	end.State = forge.StateCompleted
	return append(drafts, eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: tr.ID, ThreadID: thread, Data: &end})
}

func (f *fixture) newPart(tr *turn) *forge.Part {
	now := time.Now().UTC()
	if tr.msg == nil {
		tr.msg = &forge.Message{ID: f.ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: f.sess.ID, TurnID: tr.ID,
			ThreadID: f.sess.MainThreadID, Role: forge.RoleAssistant, CreatedAt: now}
	}
	return &forge.Part{ID: f.ids.New(forge.PrefixPart), MessageID: tr.msg.ID, Type: forge.PartText, CreatedAt: now, UpdatedAt: now}
}

// writeStream writes drafts with the part's final row and its message.
func (f *fixture) writeStream(tr *turn, p *forge.Part, drafts []eventlog.Draft, committed func([]forge.Event)) ([]forge.Event, error) {
	b := f.batch(tr)
	b.Messages, b.Parts = []*forge.Message{tr.msg}, []*forge.Part{p}
	return f.log.Write(f.ctx, forge.DefaultTenant, f.sess.ID, drafts, func(ctx context.Context, evs []forge.Event) error {
		b.Events = evs
		if err := f.store.Commit(ctx, b); err != nil {
			return err
		}
		if committed != nil {
			committed(evs)
		}
		return nil
	})
}

// TestHeldDeltasArePublishedAfterTheCommitAmongTheStoredEvents: a write
// carrying held deltas stores only its other events, gives the deltas their
// seqs between them, and publishes them all in seq order once committed;
// when its commit fails, nothing is published.
func TestHeldDeltasArePublishedAfterTheCommitAmongTheStoredEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{RetryDelays: []time.Duration{time.Millisecond}}, bus.Options{})
	if !f.log.Local() {
		t.Fatal("a log over the in-process bus does not hold deltas")
	}
	tr := f.begin()
	_, sub, err := f.bus.Subscribe(f.ctx, f.sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Next(f.ctx, false); err != nil {
		t.Fatal(err)
	}

	p := f.newPart(tr)
	f.store.failCommits.Store(2)
	if _, err := f.writeStream(tr, p, streamDrafts(tr, p, f.sess.MainThreadID, "a", "b"), nil); !errors.Is(err, errInjected) {
		t.Fatalf("write: %v", err)
	}
	if evs, _ := sub.Next(f.ctx, false); len(evs) != 0 {
		t.Fatalf("a failed write published %s", types(evs))
	}

	p = f.newPart(tr)
	var stored []forge.Event
	evs, err := f.writeStream(tr, p, streamDrafts(tr, p, f.sess.MainThreadID, "a", "b"), func(evs []forge.Event) {
		stored = evs
		if got, _ := sub.Next(f.ctx, false); len(got) != 0 {
			t.Errorf("published before the commit returned: %s", types(got))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if types(stored) != "model.message model.message" || stored[1].Seq != stored[0].Seq+3 {
		t.Fatalf("stored %s, seqs %d and %d", types(stored), stored[0].Seq, stored[len(stored)-1].Seq)
	}
	got, err := sub.Next(f.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if types(got) != "model.message model.message.delta model.message.delta model.message" || types(evs) != types(got) {
		t.Fatalf("published %s (write returned %s)", types(got), types(evs))
	}
	for i, ev := range got {
		if ev.Seq != stored[0].Seq+int64(i) {
			t.Fatalf("published seq %d at %d, want %d", ev.Seq, i, stored[0].Seq+int64(i))
		}
	}
	all, err := f.store.ListEvents(f.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: f.sess.ID, TurnID: tr.ID})
	if err != nil {
		t.Fatal(err)
	}
	if types(all) != "turn.created model.message model.message" {
		t.Fatalf("stored log %s", types(all))
	}
}

// remoteBus is a bus whose subscribers may be in other processes (it does
// not say it is process-local, as a Redis bus would not).
type remoteBus struct{ forge.Bus }

// TestHeldDeltasOverARemoteBus: over a bus that may have readers in
// other processes, a write may hold a delta back only where a reader
// elsewhere that takes the write's stored events from the store before the
// bus has the delta loses no text: the write completes the delta's part, or
// stores nothing above the delta. Any other write is refused and stores
// nothing.
func TestHeldDeltasOverARemoteBus(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{}, bus.Options{})
	tr := f.begin()
	f.log = eventlog.New(eventlog.Config{Store: f.store, Bus: remoteBus{f.bus}})
	if f.log.Local() {
		t.Fatal("a log over a bus that may be remote says it is process-local")
	}
	stored := func(want string) {
		t.Helper()
		all, err := f.store.ListEvents(f.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: f.sess.ID, TurnID: tr.ID})
		if err != nil {
			t.Fatal(err)
		}
		if types(all) != want {
			t.Fatalf("stored log %s, want %s", types(all), want)
		}
	}
	// Below a stored event of another part, with its own part still
	// streaming: refused.
	p := f.newPart(tr)
	drafts := streamDrafts(tr, p, f.sess.MainThreadID, "a")
	other := *f.newPart(tr)
	other.State = forge.StateStreaming
	unsafe := append(drafts[:len(drafts)-1:len(drafts)-1],
		eventlog.Draft{Type: forge.EventModelMessage, ID: other.ID, TurnID: tr.ID, ThreadID: f.sess.MainThreadID, Data: &other})
	if _, err := f.writeStream(tr, p, unsafe, nil); err == nil {
		t.Fatal("a held delta below another part's stored event was written over a remote bus")
	}
	stored("turn.created")
	// Its part completed in the same write: written, the delta published
	// between the stored events.
	evs, err := f.writeStream(tr, p, drafts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if types(evs) != "model.message model.message.delta model.message" {
		t.Fatalf("published %s", types(evs))
	}
	stored("turn.created model.message model.message")
	// Above every stored event of its write: written.
	q := f.newPart(tr)
	trailing := streamDrafts(tr, q, f.sess.MainThreadID, "b")
	if _, err := f.writeStream(tr, q, trailing[:2], nil); err != nil {
		t.Fatal(err)
	}
	stored("turn.created model.message model.message model.message")
}

// slowBus is the in-process bus publishing deltas slowly, which widens the
// window between a write's commit and the publishing of the deltas it held.
type slowBus struct{ *bus.Bus }

func (b slowBus) Publish(ctx context.Context, ev forge.Event) error {
	if ev.Type == forge.EventModelDelta {
		time.Sleep(20 * time.Microsecond)
	}
	return b.Bus.Publish(ctx, ev)
}

// TestReadersOfTheStoreGetTheDeltasHeldBetweenStoredEvents: turn streams
// opened at any moment of a running turn whose writes each hold deltas
// between stored events get every delta of the turn, once, in order: a
// reader that took a stored event from the store before the deltas below
// it were published waits for them (settle) instead of passing them by.
func TestReadersOfTheStoreGetTheDeltasHeldBetweenStoredEvents(t *testing.T) {
	t.Parallel()
	const (
		turns   = 20
		writes  = 40
		readers = 4
	)
	f := newFixture(t, eventlog.Config{}, bus.Options{})
	f.log = eventlog.New(eventlog.Config{Store: f.store, Bus: slowBus{f.bus}})
	if !f.log.Local() {
		t.Fatal("the slowed in-process bus does not hold deltas")
	}
	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()

	type running struct {
		id     string
		ending atomic.Bool // its terminal write has begun
	}
	var current atomic.Pointer[running]
	var stop atomic.Bool
	var checked atomic.Int64
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				r := current.Load()
				if r == nil || r.ending.Load() {
					time.Sleep(10 * time.Microsecond) // poll for the next turn
					continue
				}
				text := map[string]string{}
				var last int64
				for ev, err := range f.log.Events(ctx, forge.DefaultTenant, f.sess.ID, eventlog.Query{TurnID: r.id}) {
					if err != nil {
						errs <- err
						return
					}
					if ev.Seq <= last {
						errs <- fmt.Errorf("turn %s: seq %d after %d", r.id, ev.Seq, last)
						return
					}
					last = ev.Seq
					switch ev.Type {
					case forge.EventModelDelta:
						var d forge.DeltaData
						_ = json.Unmarshal(ev.Data, &d)
						text[ev.ID] += d.Delta
					case forge.EventModelMessage:
						var p forge.Part
						_ = json.Unmarshal(ev.Data, &p)
						if p.State == forge.StateCompleted && text[p.ID] != "xy" {
							errs <- fmt.Errorf("turn %s, part %s: deltas %q before its completed row, want \"xy\"", r.id, p.ID, text[p.ID])
							return
						}
					}
				}
				checked.Add(1)
			}
		}()
	}
	for range turns {
		tr := f.begin()
		r := &running{id: tr.ID}
		current.Store(r)
		for range writes {
			p := f.newPart(tr)
			if _, err := f.writeStream(tr, p, streamDrafts(tr, p, f.sess.MainThreadID, "x", "y"), nil); err != nil {
				t.Fatal(err)
			}
		}
		r.ending.Store(true)
		f.end(tr)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if checked.Load() == 0 {
		t.Fatal("no reader read a turn")
	}
	t.Logf("%d turn streams read", checked.Load())
}
