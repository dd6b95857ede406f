package redis_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus/bustest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// open returns a Bus with a prefix of its own, closed when t ends.
func open(t *testing.T, prefix string, o redis.Options) *redis.Bus {
	t.Helper()
	o.Prefix = prefix
	b, err := redis.Open(context.Background(), redistest.URL(t), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func TestConformance(t *testing.T) {
	redistest.URL(t)
	t.Parallel()
	bustest.Run(t, func(t *testing.T, o bustest.Options) forge.Bus {
		return open(t, redistest.Prefix(t), redis.Options{Buffer: o.Buffer, MaxLen: o.BacklogMax, Retention: time.Minute})
	})
}

// TestDeltaKeptAsFieldsReadsBackTheSame: a delta is kept in the stream as
// its fields, not its JSON; read back (held, or read from the stream by a
// subscriber) it is the event that was published, byte for byte.
func TestDeltaKeptAsFieldsReadsBackTheSame(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := open(t, redistest.Prefix(t), redis.Options{})
	turn, thread := "turn_1", "thr_1"
	var sent []forge.Event
	for i, text := range []string{"plain", `"quotes" and \ backslash`, "<html>&amp;", "ünïcödé 日本 🙂", "\x00nul", "", "new\nline"} {
		data, err := json.Marshal(forge.DeltaData{Delta: text})
		if err != nil {
			t.Fatal(err)
		}
		ev := forge.Event{Seq: int64(i + 1), ID: "prt_1", Type: forge.EventModelDelta, SessionID: "ses_1",
			CreatedAt: time.Now().UTC(), Data: data, TurnID: &turn}
		if i%2 == 0 {
			ev.ThreadID = &thread
		}
		if err := b.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, ev)
	}
	held, s, err := b.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(held) != len(sent) {
		t.Fatalf("held %d of %d", len(held), len(sent))
	}
	for i := range sent {
		want, _ := json.Marshal(&sent[i])
		got, _ := json.Marshal(&held[i])
		if string(got) != string(want) {
			t.Fatalf("delta %d read back as\n%s\nwant\n%s", i, got, want)
		}
	}
}

// TestLiveEventsKeepThePublishersEncoding: an event another process
// published reaches a subscriber (from the channel or read from the
// stream) with the publisher's encoding as its Wire
// (written to clients as it is, not encoded again), and one whose encoding
// the fast decoder does not take reaches it the same, without Wire.
func TestLiveEventsKeepThePublishersEncoding(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	pub, sub := open(t, prefix, redis.Options{}), open(t, prefix, redis.Options{})
	_, s, err := sub.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	turn, plain, odd := "turn_1", "thr_1", "thr_<é>"
	var sent []forge.Event
	for i, thread := range []*string{&plain, &odd, nil} {
		// Not deltas: those the stream keeps as fields, rebuilt on reading.
		ev := forge.Event{Seq: int64(i + 1), ID: "evt_1", Type: forge.EventMessageUpdated, SessionID: "ses_1", TurnID: &turn, ThreadID: thread,
			CreatedAt: time.Now().UTC(), Data: json.RawMessage(`{"x":[1,"<"]}`)}
		if err := ev.Encode(); err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, ev)
	}
	var got []forge.Event
	for len(got) < len(sent) {
		evs, err := s.Next(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	for i, ev := range got {
		if want := i != 1; (ev.Wire != nil) != want {
			t.Errorf("event %d: Wire kept %v, want %v", i, ev.Wire != nil, want)
		}
		if b, _ := json.Marshal(&ev); string(b) != string(sent[i].Wire) {
			t.Errorf("event %d arrived as %s, want %s", i, b, sent[i].Wire)
		}
		if ev.Wire != nil && string(ev.Wire) != string(sent[i].Wire) {
			t.Errorf("event %d: Wire %s, want %s", i, ev.Wire, sent[i].Wire)
		}
	}
}
