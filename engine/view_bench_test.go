package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/storetest"
)

// readCounter counts the message and part rows the store hands back.
type readCounter struct {
	forge.Store
	rows atomic.Int64
}

func (c *readCounter) ListMessages(ctx context.Context, tenant string, q forge.MessageQuery) ([]*forge.Message, string, error) {
	ms, next, err := c.Store.ListMessages(ctx, tenant, q)
	for _, m := range ms {
		c.rows.Add(1 + int64(len(m.Parts)))
	}
	return ms, next, err
}

type benchClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *benchClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// seedCompacted writes a session of n main-thread messages in turns of
// 100, with a compaction boundary (request, summary) 50 messages from the
// end and a verbatim tail of 10 messages before the request.
func seedCompacted(b *testing.B, h *harness, n int) *forge.Session {
	b.Helper()
	ses := h.session("a")
	ids := forge.NewULIDGen(&benchClock{t: time.Now().UTC()})
	req, sum, tail := n-51, n-50, n-61
	msgs := make([]*forge.Message, n)
	var prevTurn *string
	var turn *forge.Turn
	for i := range n {
		if i%100 == 0 {
			turn = &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: ses.ID,
				PreviousTurnID: prevTurn, AgentID: "ag_bench", AgentVersion: 1, Status: forge.TurnRunning,
				Input: []forge.Input{{Type: forge.InputMessage, Text: "q"}}, CreatedAt: time.Now()}
			id := turn.ID
			prevTurn = &id
		}
		role := forge.RoleAssistant
		if i%4 == 0 || i == req {
			role = forge.RoleUser
		}
		m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: ses.ID,
			TurnID: turn.ID, ThreadID: ses.MainThreadID, Role: role, CreatedAt: time.Now()}
		if i > 0 {
			m.ParentID = &msgs[i-1].ID
		}
		if role == forge.RoleAssistant {
			m.Finish = forge.FinishStop
		}
		p := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: m.ID, Type: forge.PartText, State: forge.StateCompleted,
			Text: fmt.Sprintf("message %d: some text of the kind a conversation holds", i)}
		m.Parts = []*forge.Part{p}
		switch i {
		case req:
			cp := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: m.ID, Type: forge.PartCompaction, State: forge.StateCompleted}
			cp.Data, _ = json.Marshal(forge.CompactionData{TailStartID: msgs[tail].ID, Reason: "threshold", Auto: true})
			m.Parts = append(m.Parts, cp)
		case sum:
			m.Summary = true
		}
		msgs[i] = m
		if i%100 == 99 || i == n-1 {
			chunk := msgs[i-i%100 : i+1]
			if err := h.store.BeginTurn(h.ctx, &forge.BeginTurn{Turn: turn, Messages: chunk}); err != nil {
				b.Fatal(err)
			}
			turn.Status = forge.TurnDone
			now := time.Now()
			turn.EndedAt = &now
			if err := h.store.Commit(h.ctx, &forge.Batch{Tenant: forge.DefaultTenant, SessionID: ses.ID, TurnID: turn.ID, Turn: turn}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return ses
}

// BenchmarkModelView builds the model view (GET /messages?view=model) of
// sessions of 1k, 10k and 100k stored messages whose compaction boundary
// lies 50 messages from the end. Its cost must not grow with the session.
func BenchmarkModelView(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("msgs=%d", n), func(b *testing.B) {
			var counter *readCounter
			h := newHarness(b, func(c *engine.Config) {
				counter = &readCounter{Store: c.Store}
				c.Store = counter
			})
			ses := seedCompacted(b, h, n)
			view, _, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, ses.ID, forge.ListOptions{Limit: 1000})
			if err != nil {
				b.Fatal(err)
			}
			if len(view) != 61 || !view[1].Summary {
				b.Fatalf("view of %d messages (summary second: %v), want 61", len(view), len(view) > 1 && view[1].Summary)
			}
			counter.rows.Store(0)
			b.ResetTimer()
			for b.Loop() {
				if _, _, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, ses.ID, forge.ListOptions{Limit: 1000}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counter.rows.Load())/float64(b.N), "rows/op")
		})
	}
}

// seedChain writes a session of agent's of n main-thread messages on a
// chain of turns of 100 (user, then assistant replies with usage), as a
// long session leaves them, and returns it.
func seedChain(b *testing.B, h *harness, agent string, n int) *forge.Session {
	b.Helper()
	ses := h.session(agent)
	ids := forge.NewULIDGen(&benchClock{t: time.Now().UTC()})
	var prev *string
	for start := 0; start < n; start += 100 {
		now := time.Now()
		turn := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: ses.ID,
			PreviousTurnID: prev, AgentID: "ag_bench", AgentVersion: 1, Status: forge.TurnDone, CreatedAt: now, EndedAt: &now,
			Input: []forge.Input{{Type: forge.InputMessage, Text: "q"}}, RequiredActions: []forge.RequiredAction{}}
		var msgs []*forge.Message
		for i := start; i < min(n, start+100); i++ {
			m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: ses.ID,
				TurnID: turn.ID, ThreadID: ses.MainThreadID, Role: forge.RoleUser, CreatedAt: now}
			if i%2 == 1 {
				m.Role, m.Finish, m.Usage = forge.RoleAssistant, forge.FinishStop, &forge.Usage{InputTokens: int64(10 * i), OutputTokens: 5}
			}
			m.Parts = []*forge.Part{{ID: ids.New(forge.PrefixPart), MessageID: m.ID, Type: forge.PartText, State: forge.StateCompleted,
				Text: fmt.Sprintf("message %d: some text of the kind a conversation holds", i)}}
			msgs = append(msgs, m)
		}
		if err := h.store.BeginTurn(h.ctx, &forge.BeginTurn{Turn: turn, Messages: msgs}); err != nil {
			b.Fatal(err)
		}
		id := turn.ID
		prev = &id
	}
	return ses
}

// BenchmarkModelViewPages lists the whole model view (GET
// /messages?view=model to its end, default pages) of sessions of 10 and
// 10,000 messages: without compaction the pages are the store's, each
// costing what it returns; with tool-output pruning on, where pruning
// starts is found once per tip.
func BenchmarkModelViewPages(b *testing.B) {
	for _, prune := range []bool{false, true} {
		for _, n := range []int{10, 10_000} {
			b.Run(fmt.Sprintf("prune=%v/msgs=%d", prune, n), func(b *testing.B) {
				var counter *readCounter
				h := newHarness(b, func(c *engine.Config) {
					counter = &readCounter{Store: c.Store}
					c.Store = counter
				})
				h.agent("a", func(a *forge.Agent) {
					if prune {
						budget := int64(1000)
						a.Compaction.PruneToolOutputs = &budget
					}
				})
				ses := seedChain(b, h, "a", n)
				list := func() int {
					got, cursor := 0, ""
					for {
						page, next, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, ses.ID, forge.ListOptions{Cursor: cursor})
						if err != nil {
							b.Fatal(err)
						}
						got += len(page)
						if next == "" {
							return got
						}
						cursor = next
					}
				}
				if got := list(); got != n {
					b.Fatalf("view of %d messages, want %d", got, n)
				}
				counter.rows.Store(0)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					list()
				}
				b.ReportMetric(float64(counter.rows.Load())/float64(b.N), "rows/op")
			})
		}
	}
}

// constModel answers every request at once with the same short reply
// and usage, reading nothing of it: a turn's cost is then the engine's
// and the store's alone.
type constModel struct{}

func (constModel) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		_ = yield(forge.ModelEvent{Type: forge.TextDelta, Delta: "ok"}, nil) &&
			yield(forge.ModelEvent{Type: forge.TextEnd}, nil) &&
			yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{Reason: forge.FinishStop,
				Usage: forge.Usage{InputTokens: 100, OutputTokens: 1}}}, nil)
	}
}

// BenchmarkLongSessionTurn runs trivial turns (engine and SQLite, a model
// that answers at once) on sessions of 10 and 10,000 messages: a turn
// chained from the tip finds the history cached, and its model view costs
// what the turn adds, so the two cost about the same. Each session takes
// 50 turns (100 messages), then a fresh one is seeded outside the timing.
//
//	go test -run '^$' -bench LongSessionTurn -benchtime 500x -benchmem ./engine/
func BenchmarkLongSessionTurn(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("msgs=%d", n), func(b *testing.B) {
			h := newHarness(b, func(c *engine.Config) { c.Models = models{constModel{}} })
			h.agent("a", nil)
			var ses *forge.Session
			turn := func() {
				t, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, ses.ID, msg("hi"))
				if err != nil {
					b.Fatal(err)
				}
				if t, err := h.eng.WaitTurn(h.ctx, forge.DefaultTenant, ses.ID, t.ID); err != nil || t.Status != forge.TurnDone {
					b.Fatalf("%v %+v", err, t)
				}
			}
			cpu := storetest.CPUTime()
			var seeding time.Duration
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%50 == 0 {
					b.StopTimer()
					c := storetest.CPUTime()
					ses = seedChain(b, h, "a", n)
					turn() // loads the history and caches it
					seeding += storetest.CPUTime() - c
					b.StartTimer()
				}
				i++
				turn()
			}
			b.ReportMetric(float64((storetest.CPUTime()-cpu-seeding).Microseconds())/float64(b.N), "cpu-µs/turn")
		})
	}
}
