package redis_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// BenchmarkStreamMemory measures what a running turn costs Redis: the
// memory of a session's keys (MEMORY USAGE) after a turn of 1,000 deltas
// of 4 characters (about 1,000 tokens of answer) with the envelopes the
// engine writes (ULID ids), per delta and per turn. Each iteration is one
// such turn in a session of its own.
func BenchmarkStreamMemory(b *testing.B) {
	ctx := b.Context()
	prefix := redistest.Prefix(b)
	bus, err := redis.Open(ctx, redistest.URL(b), redis.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	admin := redistest.Client(b)
	ids := forge.NewULIDGen(nil)
	const deltas = 1000
	var total int64
	n := 0
	for b.Loop() {
		sid, tid, thr := ids.New(forge.PrefixSession), ids.New(forge.PrefixTurn), ids.New(forge.PrefixThread)
		part := forge.Part{ID: ids.New(forge.PrefixPart), MessageID: ids.New(forge.PrefixMessage), Type: forge.PartText, State: forge.StateStreaming}
		ev := func(seq int64, typ, id string, data any) forge.Event {
			raw, _ := json.Marshal(data)
			return forge.Event{Seq: seq, ID: id, Type: typ, SessionID: sid, TurnID: &tid, ThreadID: &thr, CreatedAt: time.Now().UTC(), Data: raw}
		}
		seq := int64(1)
		publish := func(e forge.Event) {
			if err := bus.Publish(ctx, e); err != nil {
				b.Fatal(err)
			}
			seq++
		}
		publish(ev(seq, forge.EventTurnCreated, tid, map[string]any{"id": tid, "status": "running", "input": []any{map[string]string{"type": "message", "text": "hi"}}}))
		publish(ev(seq, forge.EventModelMessage, part.ID, part))
		for i := range deltas {
			publish(ev(seq, forge.EventModelDelta, part.ID, forge.DeltaData{Delta: fmt.Sprintf("w%03d", i%1000)}))
		}
		b.StopTimer()
		var bytes int64
		for _, k := range []string{"s", "o", "m"} {
			v, err := admin.MemoryUsage(ctx, prefix+":{"+sid+"}:"+k).Result()
			if err == nil {
				bytes += v
			}
		}
		total += bytes
		n++
		b.StartTimer()
	}
	b.ReportMetric(float64(total)/float64(n), "bytes/turn")
	b.ReportMetric(float64(total)/float64(n)/deltas, "bytes/delta")
}
