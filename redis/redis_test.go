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
