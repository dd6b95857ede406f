package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// countingStore counts write transactions.
type countingStore struct {
	forge.Store
	writes atomic.Int64
}

func (c *countingStore) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	c.writes.Add(1)
	return c.Store.BeginTurn(ctx, b)
}

func (c *countingStore) Commit(ctx context.Context, b *forge.Batch) error {
	c.writes.Add(1)
	return c.Store.Commit(ctx, b)
}

func (c *countingStore) ReserveSeqs(ctx context.Context, tenant, sid string, n int64) (int64, error) {
	c.writes.Add(1)
	return c.Store.ReserveSeqs(ctx, tenant, sid, n)
}

// BenchmarkTrivialTurn runs one-delta text turns through the engine and the
// SQLite store, and reports write transactions per turn.
func BenchmarkTrivialTurn(b *testing.B) {
	var counter *countingStore
	h := newHarness(b, func(c *engine.Config) {
		counter = &countingStore{Store: c.Store}
		c.Store = counter
	})
	h.agent("a", nil)
	// Sessions of 10 turns: long sessions are the compaction benchmark's
	// subject, not this one's.
	var s *forge.Session
	i := 0
	var sessionWrites int64
	b.ResetTimer()
	for b.Loop() {
		if i%10 == 0 {
			b.StopTimer()
			before := counter.writes.Load()
			s = h.session("a")
			sessionWrites += counter.writes.Load() - before
			b.StartTimer()
		}
		i++
		turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("hi"))
		if err != nil {
			b.Fatal(err)
		}
		if t, err := h.eng.WaitTurn(h.ctx, forge.DefaultTenant, s.ID, turn.ID); err != nil || t.Status != forge.TurnDone {
			b.Fatalf("%v %+v", err, t)
		}
	}
	b.ReportMetric(float64(counter.writes.Load()-sessionWrites)/float64(b.N), "writes/turn")
}

// BenchmarkConcurrentSessions runs trivial turns on 100 sessions at once.
func BenchmarkConcurrentSessions(b *testing.B) {
	h := newHarness(b)
	h.agent("a", nil)
	const sessions = 100
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = h.session("a").ID
	}
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := ids[i]
			for range work {
				next.Add(1)
				turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, sid, msg("hi"))
				if err != nil {
					panic(fmt.Sprint(err))
				}
				if _, err := h.eng.WaitTurn(h.ctx, forge.DefaultTenant, sid, turn.ID); err != nil {
					panic(fmt.Sprint(err))
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
}

// BenchmarkDeltas streams a long reply to one subscriber and reports
// deltas per second delivered.
func BenchmarkDeltas(b *testing.B) {
	h := newHarness(b)
	h.agent("a", nil)
	s := h.session("a")
	deltas := make([]string, 10000)
	for i := range deltas {
		deltas[i] = "x"
	}
	b.ResetTimer()
	total := 0
	for b.Loop() {
		h.model.push(reply{deltas: deltas})
		turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
		if err != nil {
			b.Fatal(err)
		}
		for ev, err := range h.eng.Events(h.ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID}) {
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == forge.EventModelDelta {
				total++
			}
		}
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "deltas/s")
}

// BenchmarkToolRoundTrip runs turns of two model steps around one tool
// call: the built-in echo, and echo of the MCP reference server over stdio.
// Compare with BenchmarkTrivialTurn for the overhead of the call.
func BenchmarkToolRoundTrip(b *testing.B) {
	cases := []struct {
		name string
		call forge.ToolCall
		opt  func(*engine.Config)
		agnt func(*forge.Agent)
	}{
		{"builtin", call("echo", `{"text":"x"}`), nil,
			func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}} }},
		{"mcp-stdio", call("everything_echo", `{"message":"x"}`), func(c *engine.Config) {
			m, _ := mcpManager(b)
			c.MCP = m
		},
			func(a *forge.Agent) {
				a.MCPServers = []forge.MCPServer{{Name: "everything", Command: []string{everythingServerPath(b), "stdio"}}}
			}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var opts []func(*engine.Config)
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			h := newHarness(b, opts...)
			h.agent("a", tc.agnt)
			s := h.session("a")
			for b.Loop() {
				h.model.push(reply{calls: []forge.ToolCall{tc.call}}, reply{deltas: []string{"ok"}})
				turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
				if err != nil {
					b.Fatal(err)
				}
				if t, err := h.eng.WaitTurn(h.ctx, forge.DefaultTenant, s.ID, turn.ID); err != nil || t.Status != forge.TurnDone {
					b.Fatalf("%v %+v", err, t)
				}
			}
		})
	}
}
