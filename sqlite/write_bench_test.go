package sqlite

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// BenchmarkWriteLatency times each write of a trivial turn's three (the
// turn's creation, a reply, the terminal write), made one after the other
// as fast as they go (three to four times the rate of turns over HTTP),
// and reports the p50, p99 and maximum write latency, the writes over
// 5 ms, and the checkpointer's PASSIVE passes and RESTARTs; for the
// checkpoint arrangements of BenchmarkEngineTurn.
//
//	go test -run '^$' -bench WriteLatency -benchtime 3000x -count 3 ./sqlite/
func BenchmarkWriteLatency(b *testing.B) {
	for _, v := range checkpointVariants {
		b.Run(v.name, func(b *testing.B) { benchWriteLatency(b, v.configure) })
	}
}

func benchWriteLatency(b *testing.B, configure func(*Store)) {
	ctx := context.Background()
	s, err := openStore(ctx, filepath.Join(b.TempDir(), "forge.db"), configure)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	ses := &forge.Session{ID: s.ids.New(forge.PrefixSession), Tenant: "acme", Agent: "a", MainThreadID: "thr_1"}
	if err := s.CreateSession(ctx, ses); err != nil {
		b.Fatal(err)
	}
	if _, err := s.ReserveSeqs(ctx, "acme", ses.ID, 1<<40); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	timed := func(fn func() error) {
		start := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	seq := int64(0)
	text := make([]byte, 300)
	for i := range text {
		text[i] = 'x'
	}
	var prev *string
	for b.Loop() {
		turn := &forge.Turn{ID: s.ids.New(forge.PrefixTurn), Tenant: "acme", SessionID: ses.ID, AgentID: "ag", AgentVersion: 1, PreviousTurnID: prev}
		user := &forge.Message{ID: s.ids.New(forge.PrefixMessage), ThreadID: "thr_1", Role: forge.RoleUser}
		user.Parts = []*forge.Part{{ID: s.ids.New(forge.PrefixPart), Type: forge.PartText, Text: "hi", State: forge.StateCompleted}}
		seq++
		created := forge.Event{Seq: seq, ID: turn.ID, Type: forge.EventTurnCreated, TurnID: &turn.ID, Data: text}
		seq++
		msgEv := forge.Event{Seq: seq, ID: user.ID, Type: forge.EventMessageCreated, TurnID: &turn.ID, Data: text}
		timed(func() error {
			return s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, Messages: []*forge.Message{user}, Events: []forge.Event{created, msgEv}})
		})
		f := &turnFixture{s: s, ses: ses, turn: turn}
		seq++
		_, reply := f.reply(seq, string(text))
		timed(reply)
		seq++
		timed(f.end(seq))
		prev = &turn.ID
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return float64(lat[max(0, min(i, len(lat)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(q(0.50), "write-p50-µs")
	b.ReportMetric(q(0.99), "write-p99-µs")
	b.ReportMetric(q(1), "write-max-µs")
	b.ReportMetric(float64(s.cp.passives.Load()), "passive")
	b.ReportMetric(float64(s.cp.restarts.Load()), "restart")
	n := 0
	for _, d := range lat {
		if d > 5*time.Millisecond {
			n++
		}
	}
	b.ReportMetric(float64(n), "writes>5ms")
}
