package redis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/redis/redistest"
)

// BenchmarkPublishGroup measures what an unheld delta costs Redis itself
// (INFO cpu, the server's user and system time) when the deltas of
// several sessions go in one script call, for groups of 1 (the plain
// publish script), 8 and 32 sessions, each session with a subscriber on
// another connection (as a replica streaming it to a client has). It
// reports redis-µs/delta and round trips per delta.
func BenchmarkPublishGroup(b *testing.B) {
	for _, size := range []int{1, 8, 32} {
		b.Run(fmt.Sprint("sessions=", size), func(b *testing.B) {
			ctx := b.Context()
			prefix := redistest.Prefix(b)
			bus, err := Open(ctx, redistest.URL(b), Options{Prefix: prefix, WriterID: "w"})
			if err != nil {
				b.Fatal(err)
			}
			defer bus.Close()
			reader, err := Open(ctx, redistest.URL(b), Options{Prefix: prefix, WriterID: "r"})
			if err != nil {
				b.Fatal(err)
			}
			defer reader.Close()
			ids := forge.NewULIDGen(nil)
			type session struct {
				id, turn, thread, part string
				seq                    int64
			}
			sessions := make([]*session, size)
			for i := range sessions {
				s := &session{id: ids.New(forge.PrefixSession), turn: ids.New(forge.PrefixTurn),
					thread: ids.New(forge.PrefixThread), part: ids.New(forge.PrefixPart), seq: 1}
				sessions[i] = s
				hold, _, err := bus.Acquire(ctx, s.id)
				if err != nil {
					b.Fatal(err)
				}
				begin := forge.Event{Seq: 1, ID: s.turn, Type: forge.EventTurnCreated, SessionID: s.id, TurnID: &s.turn,
					CreatedAt: time.Now().UTC(), Data: json.RawMessage(`{}`)}
				if err := bus.Release(ctx, s.id, hold, []forge.Event{begin}); err != nil {
					b.Fatal(err)
				}
				_, sub, err := reader.Subscribe(ctx, s.id, 1)
				if err != nil {
					b.Fatal(err)
				}
				defer sub.Close()
			}
			n := bus.nodes[0]
			cpu := func() float64 {
				info, err := n.rdb.Info(ctx, "cpu").Result()
				if err != nil {
					b.Fatal(err)
				}
				var t float64
				for _, line := range strings.Split(info, "\r\n") {
					for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
						if v, ok := strings.CutPrefix(line, k); ok {
							f, _ := strconv.ParseFloat(v, 64)
							t += f
						}
					}
				}
				return t
			}
			calls := 0
			start := cpu()
			for b.Loop() {
				group := make([]*publishReq, size)
				for i, s := range sessions {
					s.seq++
					data, _ := json.Marshal(forge.DeltaData{Delta: " word"})
					ev := forge.Event{Seq: s.seq, ID: s.part, Type: forge.EventModelDelta, SessionID: s.id, TurnID: &s.turn,
						ThreadID: &s.thread, CreatedAt: time.Now().UTC(), Data: data, Delta: " word"}
					args, err := bus.eventArgs(nil, s.id, []forge.Event{ev})
					if err != nil {
						b.Fatal(err)
					}
					group[i] = &publishReq{session: s.id, events: args, done: make(chan struct{})}
				}
				bus.sendGroup(n, group)
				for _, r := range group {
					if r.err != nil || len(r.res) == 0 || r.res[0] != "ok" {
						b.Fatalf("publish: %v %v", r.res, r.err)
					}
				}
				calls++
			}
			deltas := float64(calls * size)
			b.ReportMetric((cpu()-start)*1e6/deltas, "redis-µs/delta")
			b.ReportMetric(float64(calls)/deltas, "round-trips/delta")
		})
	}
}
