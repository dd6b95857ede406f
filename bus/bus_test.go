package bus

import (
	"testing"

	"github.com/forge-runtime/forge"
)

func ev(session, turn string, seq int64) forge.Event {
	return forge.Event{Seq: seq, SessionID: session, TurnID: &turn, Type: forge.EventModelDelta}
}

func TestSubscribeGetsBacklogThenLive(t *testing.T) {
	b := New(16, 0)
	b.BeginTurn("s", "t1")
	b.Publish(ev("s", "t1", 1))
	b.Publish(ev("s", "t1", 2))
	backlog, sub := b.Subscribe("s")
	defer sub.Close()
	b.Publish(ev("s", "t1", 3))
	if len(backlog) != 2 || backlog[0].Seq != 1 || backlog[1].Seq != 2 {
		t.Fatalf("backlog = %+v", backlog)
	}
	if got := <-sub.C; got.Seq != 3 {
		t.Fatalf("live event seq = %d, want 3", got.Seq)
	}
	b.EndTurn("s", "t1")
	backlog2, sub2 := b.Subscribe("s")
	defer sub2.Close()
	if len(backlog2) != 0 {
		t.Fatalf("backlog after EndTurn = %d events", len(backlog2))
	}
}

func TestSlowSubscriberIsCutOffWithoutBlocking(t *testing.T) {
	b := New(4, 0)
	_, slow := b.Subscribe("s")
	_, fast := b.Subscribe("s")
	defer fast.Close()
	got := 0
	for i := int64(1); i <= 100; i++ {
		b.Publish(ev("s", "t", i))
		// the fast subscriber keeps up
		if e := <-fast.C; e.Seq != i {
			t.Fatalf("fast got %d, want %d", e.Seq, i)
		}
		got++
	}
	if !slow.Lagged() {
		t.Fatal("slow subscriber was not cut off")
	}
	n := 0
	for range slow.C {
		n++
	}
	if n != 4 {
		t.Fatalf("slow subscriber drained %d buffered events, want 4", n)
	}
	if b.Subscribers("s") != 1 {
		t.Fatalf("subscribers = %d, want 1", b.Subscribers("s"))
	}
	slow.Close() // closing a cut-off subscription is safe
}

func TestBacklogIsCapped(t *testing.T) {
	b := New(1, 10)
	b.BeginTurn("s", "t")
	for i := int64(1); i <= 25; i++ {
		b.Publish(ev("s", "t", i))
	}
	backlog, sub := b.Subscribe("s")
	sub.Close()
	if len(backlog) > 10 || backlog[len(backlog)-1].Seq != 25 {
		t.Fatalf("backlog has %d events ending at %d", len(backlog), backlog[len(backlog)-1].Seq)
	}
	for i := 1; i < len(backlog); i++ {
		if backlog[i].Seq != backlog[i-1].Seq+1 {
			t.Fatal("backlog is not contiguous")
		}
	}
}

func TestTurnDoneEndsBacklog(t *testing.T) {
	b := New(16, 0)
	b.BeginTurn("s", "t1")
	b.Publish(ev("s", "t1", 1))
	done := ev("s", "t1", 2)
	done.Type = forge.EventTurnDone
	b.Publish(done)
	backlog, sub := b.Subscribe("s")
	defer sub.Close()
	if len(backlog) != 0 {
		t.Fatalf("backlog after turn.done holds %d events", len(backlog))
	}
}
