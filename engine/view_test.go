package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/modelview"
)

// viewIDs writes a view as ids with each tool output's first word.
func viewIDs(msgs []*forge.Message) []string {
	var out []string
	for _, m := range msgs {
		s := m.ID
		for _, p := range m.Parts {
			if p.Type == forge.PartTool && p.Output != nil {
				s += " " + short(*p.Output)
			}
		}
		out = append(out, s)
	}
	return out
}

// TestModelViewPagesAreTheWholeView: GET /messages?view=model reads its
// pages from the store, yet whatever the page size, with a compaction
// boundary and with tool outputs pruned, the pages make exactly the view
// of the whole branch (FilterCompacted, PruneToolOutputs), and a cursor
// that is not in the view is refused.
func TestModelViewPagesAreTheWholeView(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	agent := h.agent("a", func(a *forge.Agent) {
		compactionAgent(1000, 0.8, true)(a)
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
	})
	s := h.session("a")
	out := func(word string) string { return `{"text":"` + word + strings.Repeat(" y", 40) + `"}` }
	h.model.push(
		reply{calls: []forge.ToolCall{call("echo", out("first"))}, usage: usage(100, 5)},
		reply{deltas: []string{long("a1")}, usage: usage(300, 10)},
		reply{calls: []forge.ToolCall{call("echo", out("second"))}, usage: usage(400, 5)},
		reply{deltas: []string{long("a2")}, usage: usage(500, 10)},
		reply{deltas: []string{long("a3")}, usage: usage(700, 10)},
		reply{deltas: []string{"SUMMARY: objective and state"}, usage: usage(650, 40)},
		reply{calls: []forge.ToolCall{call("echo", out("third"))}, usage: usage(300, 5)},
		reply{deltas: []string{long("a4")}, usage: usage(350, 10)},
		reply{calls: []forge.ToolCall{call("echo", out("fourth"))}, usage: usage(400, 5)},
		reply{deltas: []string{long("a5")}, usage: usage(450, 10)},
	)
	var last *forge.Turn
	for _, q := range []string{"q1", "q2", "q3", "q4", "q5"} {
		if last = h.run(s.ID, msg(long(q))); last.Status != forge.TurnDone {
			t.Fatalf("turn %s: %+v", q, last.Error)
		}
	}
	full := h.full(s.ID, last.ID)
	view := modelview.FilterCompacted(full)
	if len(view) == len(full) || !view[1].Summary {
		t.Fatalf("no compaction: %q", msgTexts(view))
	}
	check := func(want []*forge.Message, badCursors ...string) {
		t.Helper()
		for _, limit := range []int{1, 2, 3, 4, 7, 100} {
			var got []*forge.Message
			opts := forge.ListOptions{Limit: limit}
			for page := 0; ; page++ {
				msgs, next, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, s.ID, opts)
				if err != nil {
					t.Fatalf("limit %d, page %d: %v", limit, page, err)
				}
				if len(msgs) > limit || (next != "" && (len(msgs) != limit || next != msgs[len(msgs)-1].ID)) {
					t.Fatalf("limit %d, page %d: %d messages, next %q", limit, page, len(msgs), next)
				}
				got = append(got, msgs...)
				if next == "" {
					break
				}
				if page > 2*len(want) {
					t.Fatalf("limit %d: the pages do not end", limit)
				}
				opts.Cursor = next
			}
			eq(t, fmt.Sprintf("view in pages of %d", limit), viewIDs(got), viewIDs(want))
		}
		for _, cursor := range badCursors {
			_, _, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, s.ID, forge.ListOptions{Cursor: cursor})
			if forge.ErrorCode(err) != "invalid_request" || !strings.Contains(err.Error(), "not in the current model view") {
				t.Fatalf("cursor %q: %v", cursor, err)
			}
		}
	}
	// Refused: an unknown id, a message before the verbatim tail, a
	// session's id.
	bad := []string{"msg_ghost", full[0].ID, s.ID}
	check(view, bad...)

	budget := int64(30) // one echo output fits, two do not
	agent.Compaction.PruneToolOutputs = &budget
	if err := h.store.UpdateAgent(h.ctx, agent); err != nil {
		t.Fatal(err)
	}
	pruned := modelview.PruneToolOutputs(view, budget)
	if strings.Join(viewIDs(pruned), " ") == strings.Join(viewIDs(view), " ") {
		t.Fatal("nothing pruned: the test needs outputs over the budget")
	}
	check(pruned, bad...) // where pruning starts is found, then kept
	check(pruned, bad...)

	// Without a boundary, pruned pages of a plain branch.
	s2 := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("echo", out("one"))}},
		reply{calls: []forge.ToolCall{call("echo", out("two"))}},
		reply{calls: []forge.ToolCall{call("echo", out("three"))}},
		reply{deltas: []string{"done"}},
	)
	t2 := h.run(s2.ID, msg("go"))
	s = s2
	other := full[3].ID // of the first session
	full = h.full(s2.ID, t2.ID)
	check(modelview.PruneToolOutputs(full, budget), "msg_ghost", other)
}

// counting counts the history reads a store answers.
type counting struct {
	forge.Store
	lists atomic.Int64
}

func (c *counting) ListMessages(ctx context.Context, tenant string, q forge.MessageQuery) ([]*forge.Message, string, error) {
	c.lists.Add(1)
	return c.Store.ListMessages(ctx, tenant, q)
}

// TestForksFromRecentTurnsReadNothing: the cache keeps a session's last
// turns, so turns chained or forked from any of them read no history, and
// each has its own branch: a fork's history never writes into the one its
// base lent to the turn that chained first (A's history, five messages,
// has room past its end that B's two fill in place).
func TestForksFromRecentTurnsReadNothing(t *testing.T) {
	t.Parallel()
	var st *counting
	h := newHarness(t, func(c *engine.Config) {
		st = &counting{Store: c.Store}
		c.Store = st
	})
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}} })
	s := h.session("a")
	turn := func(text string, from *forge.Turn, calls int) *forge.Turn {
		t.Helper()
		for range calls {
			h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"x"}`)}})
		}
		h.model.push(reply{deltas: []string{"re-" + text}})
		req := msg(text)
		if from != nil {
			req.PreviousTurnID = &from.ID
		}
		return h.run(s.ID, req)
	}
	a := turn("A", nil, 3)
	before := st.lists.Load()
	b := turn("B", a, 0)
	c := turn("C", a, 0)
	turn("D", a, 0)
	e := turn("E", b, 0)
	turn("F", c, 0)
	if n := st.lists.Load() - before; n != 0 {
		t.Fatalf("%d history reads for turns chained from cached ones", n)
	}
	sent := h.model.sent()
	for i, want := range [][]string{
		{"user:B"},
		{"user:C"},
		{"user:D"},
		{"user:B", "assistant:re-B", "user:E"},
		{"user:C", "assistant:re-C", "user:F"},
	} {
		r := reqTexts(sent[4+i])
		eq(t, fmt.Sprintf("request of turn %d", 2+i), r[len(r)-len(want):], want)
		if n := len(r) - len(want); n != 8 { // A: user, 3 × (call, result), reply
			t.Fatalf("request of turn %d: %d messages before this branch's, want 8", 2+i, n)
		}
	}
	// Each turn's user message follows the last message of its branch.
	last := func(turn *forge.Turn) string {
		ms, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ms[len(ms)-1].ID
	}
	for _, tc := range []struct{ turn, base *forge.Turn }{{b, a}, {c, a}, {e, b}} {
		ms, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, tc.turn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p := ms[0].ParentID; p == nil || *p != last(tc.base) {
			t.Fatalf("turn %s: its message's parent %v, want %s", tc.turn.ID, p, last(tc.base))
		}
	}
}
