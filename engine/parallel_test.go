package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// gauge is a tool that records how many of its calls run at once, and,
// for each call as it starts, how many had finished.
type gauge struct {
	limit int // calls wait until this many run (or a while passes)

	mu       sync.Mutex // guards the following
	running  int
	most     int
	finished int
	started  map[int]int // call number -> calls finished when it started
	full     chan struct{}
	release  chan struct{} // closed: calls return at once (nil: they wait for limit)
}

func newGauge(limit int) *gauge {
	return &gauge{limit: limit, started: map[int]int{}, full: make(chan struct{})}
}

func (g *gauge) Def() forge.ToolDef {
	return forge.ToolDef{Name: "gauge", Description: "counts", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (g *gauge) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct{ I int }
	if err := json.Unmarshal(args, &in); err != nil {
		return forge.ToolResult{}, err
	}
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	g.started[in.I] = g.finished
	if g.running == g.limit {
		close(g.full)
		g.full = make(chan struct{})
	}
	full, release := g.full, g.release
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.finished++
		g.mu.Unlock()
	}()
	// Each call holds its slot until the limit is reached and a little
	// longer (so that calls a cap does not hold back would pile up), or
	// for a while at the end of the list.
	select {
	case <-full:
		time.Sleep(50 * time.Millisecond)
	case <-release:
		<-ctx.Done()
		return forge.ToolResult{}, ctx.Err()
	case <-time.After(200 * time.Millisecond):
	}
	return forge.ToolResult{Output: fmt.Sprint("call ", in.I)}, nil
}

// seen returns the most calls that ran at once and, per call number, how
// many calls had finished when it started.
func (g *gauge) seen() (most int, started map[int]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most, maps.Clone(g.started)
}

func gaugeCalls(n int) []forge.ToolCall {
	calls := make([]forge.ToolCall, n)
	for i := range calls {
		calls[i] = forge.ToolCall{ID: fmt.Sprint("prov_", i), Name: "gauge", Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return calls
}

// A step's calls run at most MaxParallelTools at once; the others wait and
// start in their order as running ones end.
func TestMaxParallelTools(t *testing.T) {
	t.Parallel()
	g := newGauge(3)
	h := newHarness(t, func(c *engine.Config) { c.Tools["gauge"] = g; c.MaxParallelTools = 3 })
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "gauge", BuiltIn: true}} })
	s := h.session("a")
	const n = 12
	h.model.push(reply{calls: gaugeCalls(n)}, reply{deltas: []string{"done"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	most, started := g.seen()
	if most != 3 {
		t.Fatalf("%d calls ran at once, want 3", most)
	}
	for i := 3; i < n; i++ {
		if started[i] < i-3+1 {
			t.Errorf("call %d started when %d calls had finished: it jumped the queue", i, started[i])
		}
	}
	results := h.model.sent()[1].Messages[2].Parts
	for i, r := range results {
		if r.IsError || r.Output != fmt.Sprint("call ", i) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
}

// The default is 16.
func TestMaxParallelToolsDefault(t *testing.T) {
	t.Parallel()
	g := newGauge(engine.DefaultMaxParallelTools)
	h := newHarness(t, func(c *engine.Config) { c.Tools["gauge"] = g })
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "gauge", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(reply{calls: gaugeCalls(40)}, reply{deltas: []string{"done"}})
	if turn := h.run(s.ID, msg("go")); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	if most, _ := g.seen(); most != engine.DefaultMaxParallelTools {
		t.Fatalf("%d calls ran at once, want %d", most, engine.DefaultMaxParallelTools)
	}
}

// Cancelled, a step's waiting calls never start: they end "not run"; the
// running ones get ToolCancelWait and then end in doubt as before.
func TestMaxParallelToolsCancel(t *testing.T) {
	t.Parallel()
	g := newGauge(2)
	g.release = make(chan struct{})
	close(g.release) // calls hold until cancelled
	h := newHarness(t, func(c *engine.Config) { c.Tools["gauge"] = g; c.MaxParallelTools = 2 })
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "gauge", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(reply{calls: gaugeCalls(5)})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, started := g.seen(); len(started) == 2 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d calls started", len(started))
		}
	}
	if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnCancelled {
		t.Fatalf("turn %+v", got)
	}
	if _, started := g.seen(); len(started) != 2 {
		t.Fatalf("%d calls started, want the first 2", len(started))
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	var outcomes []string
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool {
				out := ""
				if p.Error != nil {
					out = *p.Error
				}
				outcomes = append(outcomes, fmt.Sprintf("%s:%s", p.State, strings.SplitN(out, ":", 2)[0]))
			}
		}
	}
	want := "error:in_doubt error:in_doubt error:not run error:not run error:not run"
	if got := strings.Join(outcomes, " "); got != want {
		t.Fatalf("calls ended %q, want %q", got, want)
	}
}
