package eventlog_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/eventlog"
)

// heldCounter is a bus that counts the events its subscriptions are handed
// from what it held before they began (Redis: entries read with XRANGE).
type heldCounter struct {
	forge.Bus
	held atomic.Int64
}

func (c *heldCounter) Subscribe(ctx context.Context, sessionID string, after int64) ([]forge.Event, forge.BusSubscription, error) {
	held, sub, err := c.Bus.Subscribe(ctx, sessionID, after)
	c.held.Add(int64(len(held)))
	return held, sub, err
}

// TestSubscribeAheadReadsNothingTheBusHeld: a turn stream subscribed
// before its turn begins reads none of what the bus holds of earlier turns,
// however low its cursor (a replica that did not write the session last
// has a cursor below them; issue 22: it copied those turns from Redis),
// and gets its whole turn.
func TestSubscribeAheadReadsNothingTheBusHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{}, bus.Options{})
	counter := &heldCounter{Bus: f.bus}
	f.log = eventlog.New(eventlog.Config{Store: f.store, Bus: counter})
	earlier := f.begin()
	p := f.startText(earlier, f.sess.MainThreadID)
	f.delta(earlier, p, f.sess.MainThreadID, "old")
	f.complete(earlier, p, f.sess.MainThreadID)
	f.end(earlier)

	sub, err := f.log.SubscribeAhead(f.ctx, forge.DefaultTenant, f.sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.held.Load(); n != 0 {
		t.Fatalf("the subscription was handed %d events of the earlier turn", n)
	}
	tr := f.begin()
	q := f.startText(tr, f.sess.MainThreadID)
	f.delta(tr, q, f.sess.MainThreadID, "new")
	f.complete(tr, q, f.sess.MainThreadID)
	f.end(tr)
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	var got []forge.Event
	for ev, err := range sub.Events(ctx, tr.ID) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if types(got) != "turn.created model.message model.message.delta model.message turn.done" {
		t.Fatalf("turn stream %s", types(got))
	}
}
