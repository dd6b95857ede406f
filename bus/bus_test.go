package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus/bustest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	bustest.Run(t, func(t *testing.T, o bustest.Options) forge.Bus {
		return NewWithOptions(Options{Buffer: o.Buffer, BacklogMax: o.BacklogMax})
	})
}

func ev(session, turn string, seq int64) forge.Event {
	return forge.Event{Seq: seq, SessionID: session, TurnID: &turn, Type: forge.EventModelDelta, Data: []byte(`{"delta":"x"}`)}
}

// TestSlowSubscriberIsCutOffWithoutBlocking: publishing never waits for a
// subscriber; the slow one reads what was buffered, then ErrLagged.
func TestSlowSubscriberIsCutOffWithoutBlocking(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := New(4, 0)
	_, slow, _ := b.Subscribe(ctx, "s", 0)
	_, fast, _ := b.Subscribe(ctx, "s", 0)
	defer fast.Close()
	for i := int64(1); i <= 100; i++ {
		if err := b.Publish(ctx, ev("s", "t", i)); err != nil {
			t.Fatal(err)
		}
		if evs, err := fast.Next(ctx, false); err != nil || len(evs) != 1 || evs[0].Seq != i {
			t.Fatalf("fast got %v %v, want %d", evs, err, i)
		}
	}
	evs, err := slow.Next(ctx, false)
	if err != nil || len(evs) != 4 {
		t.Fatalf("slow drained %d buffered events (%v), want 4", len(evs), err)
	}
	if _, err := slow.Next(ctx, true); !errors.Is(err, forge.ErrLagged) {
		t.Fatalf("slow subscriber: %v, want ErrLagged", err)
	}
	if b.Subscribers("s") != 1 {
		t.Fatalf("subscribers = %d, want 1", b.Subscribers("s"))
	}
	_ = slow.Close() // closing a cut-off subscription is safe
}

func TestBacklogIsCapped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := New(1, 10)
	_ = b.BeginTurn(ctx, "s", "t")
	for i := int64(1); i <= 25; i++ {
		_ = b.Publish(ctx, ev("s", "t", i))
	}
	held, sub, _ := b.Subscribe(ctx, "s", 0)
	defer sub.Close()
	if len(held) > 10 || held[len(held)-1].Seq != 25 {
		t.Fatalf("held %d events ending at %d", len(held), held[len(held)-1].Seq)
	}
	for i := 1; i < len(held); i++ {
		if held[i].Seq != held[i-1].Seq+1 {
			t.Fatal("held events are not contiguous")
		}
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestRetention: an ended turn's events stay for Retention, are dropped
// after it (the topic is forgotten), and a running turn's never expire.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &fakeClock{now: time.Unix(1700000000, 0)}
	b := NewWithOptions(Options{Retention: time.Minute, Clock: clock})
	held := func(session string) int {
		evs, s, _ := b.Subscribe(ctx, session, 0)
		defer s.Close()
		return len(evs)
	}
	_ = b.BeginTurn(ctx, "ended", "t1")
	_ = b.BeginTurn(ctx, "running", "t2")
	for i := int64(1); i <= 3; i++ {
		_ = b.Publish(ctx, ev("ended", "t1", i))
		_ = b.Publish(ctx, ev("running", "t2", i))
	}
	_ = b.EndTurn(ctx, "ended", "t1")
	_ = b.EndTurn(ctx, "running", "t-other") // not its running turn: ignored
	clock.advance(59 * time.Second)
	if n := held("ended"); n != 3 {
		t.Fatalf("within retention: %d events held", n)
	}
	clock.advance(2 * time.Second)
	if n := held("ended"); n != 0 {
		t.Fatalf("after retention: %d events held", n)
	}
	if n := held("running"); n != 3 {
		t.Fatalf("running turn: %d events held", n)
	}
	b.mu.Lock()
	_, kept := b.topics["ended"]
	b.mu.Unlock()
	if kept {
		t.Fatal("an expired topic with no subscriber is still kept")
	}
}

// TestEndedTurnKeepsOnlyWhatAResumeNeeds: once a turn ends, the bus keeps
// its deltas and its turn.done (the store has the rest), and drops even
// those Retention after the end while later turns run: a busy session does
// not keep every event of its past turns.
func TestEndedTurnKeepsOnlyWhatAResumeNeeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &fakeClock{now: time.Unix(1700000000, 0)}
	b := NewWithOptions(Options{Retention: time.Minute, Clock: clock})
	turn1, turn2 := "t1", "t2"
	stored := func(turn string, seq int64, typ string) forge.Event {
		return forge.Event{Seq: seq, SessionID: "s", TurnID: &turn, Type: typ, Data: []byte(`{}`)}
	}
	held := func() string {
		evs, sub, _ := b.Subscribe(ctx, "s", 0)
		defer sub.Close()
		var out []string
		for _, e := range evs {
			out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.Type))
		}
		return strings.Join(out, " ")
	}
	_ = b.BeginTurn(ctx, "s", turn1)
	_ = b.Publish(ctx, stored(turn1, 1, forge.EventTurnCreated))
	_ = b.Publish(ctx, stored(turn1, 2, forge.EventModelMessage))
	_ = b.Publish(ctx, ev("s", turn1, 3))
	_ = b.Publish(ctx, ev("s", turn1, 4))
	_ = b.Publish(ctx, stored(turn1, 5, forge.EventModelMessage))
	if got, want := held(), "1:turn.created 2:model.message 3:model.message.delta 4:model.message.delta 5:model.message"; got != want {
		t.Fatalf("running turn: held %q, want %q", got, want)
	}
	_ = b.Publish(ctx, stored(turn1, 6, forge.EventTurnDone))
	_ = b.EndTurn(ctx, "s", turn1)
	if got, want := held(), "3:model.message.delta 4:model.message.delta 6:turn.done"; got != want {
		t.Fatalf("ended turn: held %q, want %q", got, want)
	}
	clock.advance(30 * time.Second)
	_ = b.BeginTurn(ctx, "s", turn2)
	_ = b.Publish(ctx, stored(turn2, 7, forge.EventTurnCreated))
	_ = b.Publish(ctx, ev("s", turn2, 8))
	if got, want := held(), "3:model.message.delta 4:model.message.delta 6:turn.done 7:turn.created 8:model.message.delta"; got != want {
		t.Fatalf("next turn running: held %q, want %q", got, want)
	}
	clock.advance(31 * time.Second)
	if got, want := held(), "7:turn.created 8:model.message.delta"; got != want {
		t.Fatalf("past the first turn's retention: held %q, want %q", got, want)
	}
}
