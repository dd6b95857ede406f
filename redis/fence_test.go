package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

func delta(session, turn string, seq int64, text string) forge.Event {
	data, _ := json.Marshal(forge.DeltaData{Delta: text})
	ev := forge.Event{Seq: seq, ID: "prt_x", Type: forge.EventModelDelta, SessionID: session, CreatedAt: time.Now(), Data: data}
	if turn != "" {
		ev.TurnID = &turn
	}
	return ev
}

func stored(session, turn, typ string, seq int64) forge.Event {
	ev := forge.Event{Seq: seq, ID: fmt.Sprint("id_", seq), Type: typ, SessionID: session, CreatedAt: time.Now(), Data: json.RawMessage(`{}`)}
	if turn != "" {
		ev.TurnID = &turn
	}
	return ev
}

// TestHoldIsExclusiveAcrossProcesses: two buses (two replicas) take turns
// holding a session; each learns whether the other wrote in between.
func TestHoldIsExclusiveAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	a := open(t, prefix, redis.Options{WriterID: "a"})
	b := open(t, prefix, redis.Options{WriterID: "b"})

	holdA, fresh, err := a.Acquire(ctx, "ses_1")
	if err != nil || fresh {
		t.Fatalf("first acquire: fresh=%v err=%v (nobody wrote before: not known fresh)", fresh, err)
	}
	acquired := make(chan string)
	go func() {
		h, fresh, err := b.Acquire(ctx, "ses_1")
		if err != nil || fresh {
			t.Errorf("b acquire: fresh=%v err=%v", fresh, err)
		}
		acquired <- h
	}()
	select {
	case <-acquired:
		t.Fatal("b acquired a session a holds")
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.Release(ctx, "ses_1", holdA, []forge.Event{stored("ses_1", "", forge.EventMessageCreated, 1)}); err != nil {
		t.Fatal(err)
	}
	holdB := <-acquired
	if err := b.Release(ctx, "ses_1", holdB, []forge.Event{stored("ses_1", "", forge.EventMessageCreated, 1025)}); err != nil {
		t.Fatal(err)
	}
	// a's seq block is stale: an unheld delta is refused, and its next
	// hold is not fresh.
	if ok, err := a.PublishUnheld(ctx, delta("ses_1", "", 2, "x")); ok || err != nil {
		t.Fatalf("unheld delta after another writer: ok=%v err=%v", ok, err)
	}
	holdA, fresh, err = a.Acquire(ctx, "ses_1")
	if err != nil || fresh {
		t.Fatalf("a again: fresh=%v err=%v, want not fresh", fresh, err)
	}
	// A stale seq is refused even under a hold.
	if err := a.Release(ctx, "ses_1", holdA, []forge.Event{delta("ses_1", "", 2, "x")}); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("stale seq under a hold: %v", err)
	}
	holdA, fresh, err = a.Acquire(ctx, "ses_1")
	if err != nil || !fresh {
		t.Fatalf("a, last writer: fresh=%v err=%v", fresh, err)
	}
	if err := a.Release(ctx, "ses_1", holdA, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.PublishUnheld(ctx, delta("ses_1", "", 2049, "x")); !ok || err != nil {
		t.Fatalf("unheld delta by the last writer: ok=%v err=%v", ok, err)
	}
	// While b holds the session, a's unheld delta waits for a hold.
	holdB, _, _ = b.Acquire(ctx, "ses_1")
	if ok, err := a.PublishUnheld(ctx, delta("ses_1", "", 2050, "x")); ok || err != nil {
		t.Fatalf("unheld delta while another holds: ok=%v err=%v", ok, err)
	}
	_ = b.Release(ctx, "ses_1", holdB, nil)
}

// TestExpiredHoldPublishesNothing: a holder that stalls past the hold's
// TTL loses it; its late events are not published.
func TestExpiredHoldPublishesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	a := open(t, prefix, redis.Options{WriterID: "a", HoldTTL: 50 * time.Millisecond})
	b := open(t, prefix, redis.Options{WriterID: "b"})
	hold, _, err := a.Acquire(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	holdB, _, err := b.Acquire(ctx, "ses_1") // waits for a's hold to expire
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, "ses_1", hold, []forge.Event{stored("ses_1", "", forge.EventMessageCreated, 5)}); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("release of an expired hold: %v", err)
	}
	if err := b.Release(ctx, "ses_1", holdB, []forge.Event{stored("ses_1", "", forge.EventMessageCreated, 1025)}); err != nil {
		t.Fatal(err)
	}
	held, s, err := b.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(held) != 1 || held[0].Seq != 1025 {
		t.Fatalf("held %v: the expired hold's event was published", held)
	}
}

// TestDeltaOfEndedTurnIsRefused: once a turn's turn.done is published (by
// whoever ended it), a late delta of that turn is refused: turn.done stays
// the turn's last event.
func TestDeltaOfEndedTurnIsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := open(t, redistest.Prefix(t), redis.Options{WriterID: "a"})
	for _, ev := range []forge.Event{stored("ses_1", "turn_1", forge.EventTurnCreated, 1), delta("ses_1", "turn_1", 2, "a"),
		stored("ses_1", "turn_1", forge.EventTurnDone, 3)} {
		if err := b.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(ctx, delta("ses_1", "turn_1", 4, "late")); !errors.Is(err, forge.ErrTurnEnded) {
		t.Fatalf("late delta: %v", err)
	}
	if err := b.Publish(ctx, stored("ses_1", "turn_2", forge.EventTurnCreated, 5)); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, delta("ses_1", "turn_1", 6, "late")); !errors.Is(err, forge.ErrTurnEnded) {
		t.Fatalf("delta of a turn that is not the running one: %v", err)
	}
	if err := b.Publish(ctx, delta("ses_1", "turn_2", 7, "ok")); err != nil {
		t.Fatal(err)
	}
}

// TestSubscriberOnAnotherReplica: events published through one bus reach
// subscribers of another, live and held, in order.
func TestSubscriberOnAnotherReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	pub := open(t, prefix, redis.Options{})
	sub := open(t, prefix, redis.Options{})
	_ = pub.BeginTurn(ctx, "ses_1", "turn_1")
	for seq := int64(1); seq <= 5; seq++ {
		if err := pub.Publish(ctx, delta("ses_1", "turn_1", seq, "x")); err != nil {
			t.Fatal(err)
		}
	}
	held, s, err := sub.Subscribe(ctx, "ses_1", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(held) != 3 || held[0].Seq != 3 {
		t.Fatalf("held %v", held)
	}
	published := make(chan struct{})
	go func() {
		defer close(published)
		for seq := int64(6); seq <= 300; seq++ {
			if err := pub.Publish(ctx, delta("ses_1", "turn_1", seq, "x")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { <-published }()
	last := int64(5)
	for last < 300 {
		evs, err := s.Next(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Seq != last+1 {
				t.Fatalf("seq %d after %d", ev.Seq, last)
			}
			last = ev.Seq
		}
	}
}

// TestSubscriptionConnectionDrops: when Redis drops the bus's Pub/Sub
// connection, subscribers miss nothing (they read the stream once the
// connection is back).
func TestSubscriptionConnectionDrops(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	pub := open(t, prefix, redis.Options{})
	sub := open(t, prefix, redis.Options{})
	admin := redistest.Client(t)
	_, s, err := sub.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := int64(1); seq <= 400; seq++ {
			if err := pub.Publish(ctx, delta("ses_1", "", seq, "x")); err != nil {
				t.Error(err)
				return
			}
			if seq%100 == 0 {
				// Every Pub/Sub connection of the server, ours included.
				if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	last := int64(0)
	deadline := time.After(20 * time.Second)
	for last < 400 {
		select {
		case <-deadline:
			t.Fatalf("stalled at %d", last)
		default:
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		evs, err := s.Next(wctx, true)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Seq != last+1 {
				t.Fatalf("seq %d after %d", ev.Seq, last)
			}
			last = ev.Seq
		}
	}
	wg.Wait()
}

// TestTrimmedPositionIsCutOff: a subscriber whose position was trimmed
// from the stream is cut off; resubscribing from its cursor gives the text
// so far and the rest.
func TestTrimmedPositionIsCutOff(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := open(t, redistest.Prefix(t), redis.Options{MaxLen: 10, Buffer: 2})
	_ = b.BeginTurn(ctx, "ses_1", "turn_1")
	_, s, err := b.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for seq := int64(1); seq <= 40; seq++ {
		if err := b.Publish(ctx, delta("ses_1", "turn_1", seq, "x")); err != nil {
			t.Fatal(err)
		}
	}
	var got []forge.Event
	for {
		evs, err := s.Next(ctx, false)
		got = append(got, evs...)
		if errors.Is(err, forge.ErrLagged) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			t.Fatalf("read %d events without being cut off, though its position was trimmed", len(got))
		}
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Fatalf("before the cut: seq %d at %d", ev.Seq, i)
		}
	}
}

// TestCancelSignalReachesEveryReplica.
func TestCancelSignalReachesEveryReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	a := open(t, prefix, redis.Options{})
	b := open(t, prefix, redis.Options{})
	got := make(chan forge.CancelSignal, 1)
	b.OnCancel(func(s forge.CancelSignal) { got <- s })
	want := forge.CancelSignal{Tenant: "acme", SessionID: "ses_1", TurnID: "turn_1", Reason: forge.CancelClient, Message: "stop"}
	// The receiving side subscribes asynchronously: send until it hears.
	for {
		if err := a.SendCancel(ctx, want); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != want {
				t.Fatalf("got %+v", s)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRetention: a running turn's keys live RunningTTL; once it ends,
// Retention.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	b := open(t, prefix, redis.Options{Retention: 2 * time.Second, RunningTTL: time.Hour})
	admin := redistest.Client(t)
	stream := prefix + ":{ses_1}:s"
	_ = b.BeginTurn(ctx, "ses_1", "turn_1")
	if err := b.Publish(ctx, delta("ses_1", "turn_1", 1, "x")); err != nil {
		t.Fatal(err)
	}
	if ttl := admin.PTTL(ctx, stream).Val(); ttl < 50*time.Minute {
		t.Fatalf("running turn's stream TTL %v", ttl)
	}
	if err := b.Publish(ctx, stored("ses_1", "turn_1", forge.EventTurnDone, 2)); err != nil {
		t.Fatal(err)
	}
	if ttl := admin.PTTL(ctx, stream).Val(); ttl > 2*time.Second || ttl <= 0 {
		t.Fatalf("ended turn's stream TTL %v, want the retention", ttl)
	}
	waitGone := time.Now().Add(10 * time.Second)
	for admin.Exists(ctx, stream).Val() == 1 {
		if time.Now().After(waitGone) {
			t.Fatal("the stream outlived its retention")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLocksAcrossProcesses: a named lock has one holder among processes;
// its holder extends it, another takes it once it expires or is released.
func TestLocksAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	a := open(t, prefix, redis.Options{WriterID: "a"})
	b := open(t, prefix, redis.Options{WriterID: "b"})
	take := func(bus *redis.Bus, ttl time.Duration) bool {
		ok, err := bus.TryLock(ctx, "par_1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !take(a, time.Minute) || !take(a, time.Minute) {
		t.Fatal("a could not take, or extend, a free lock")
	}
	if take(b, time.Minute) {
		t.Fatal("b took a's lock")
	}
	if err := b.Unlock(ctx, "par_1"); err != nil || take(b, time.Minute) {
		t.Fatal("b released a's lock")
	}
	if err := a.Unlock(ctx, "par_1"); err != nil || !take(b, 100*time.Millisecond) {
		t.Fatal("b could not take a released lock")
	}
	waitGone := time.Now().Add(10 * time.Second)
	for !take(a, time.Minute) {
		if time.Now().After(waitGone) {
			t.Fatal("an expired lock was not taken")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTextSoFarRowsExpire: a text so far row carried by a delta of a
// running turn may create the session's rows hash; it gets the session's
// TTL like the stream (else it would outlive it).
func TestTextSoFarRowsExpire(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	b := open(t, prefix, redis.Options{Retention: 2 * time.Second, RunningTTL: time.Hour})
	admin := redistest.Client(t)
	_ = b.BeginTurn(ctx, "ses_1", "turn_1")
	if err := b.Publish(ctx, stored("ses_1", "turn_1", forge.EventTurnCreated, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, delta("ses_1", "turn_1", 2, "x")); err != nil {
		t.Fatal(err)
	}
	ev := delta("ses_1", "turn_1", 3, "y")
	row := stored("ses_1", "turn_1", forge.EventModelMessage, 2)
	row.ID = "prt_x"
	ev.TextSoFar = []forge.Event{row}
	if err := b.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	rows := prefix + ":{ses_1}:o"
	if admin.Exists(ctx, rows).Val() != 1 {
		t.Fatal("the row was not kept")
	}
	if ttl := admin.PTTL(ctx, rows).Val(); ttl < 50*time.Minute {
		t.Fatalf("running turn's rows TTL %v", ttl)
	}
}
