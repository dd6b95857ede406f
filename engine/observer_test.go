package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// node is one observed turn, model call or tool call, with the node whose
// context it was started in.
type node struct {
	id, parent int
	kind       string // turn, model, tool
	turnStart  engine.TurnStart
	turnEnd    *engine.TurnEnd
	modelStart engine.ModelCallStart
	modelEnd   *engine.ModelCallEnd
	toolStart  engine.ToolCallStart
	toolEnd    *engine.ToolCallEnd
}

type nodeKey struct{}

// recorder is an engine.Observer that records the tree of what it saw,
// through the contexts the engine hands back.
type recorder struct {
	mu    sync.Mutex
	nodes []*node
	// ended counts TurnEnded calls without a TurnStarted (recovery).
	recovered []engine.TurnEnd
}

func (r *recorder) start(ctx context.Context, n *node) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	n.id = len(r.nodes) + 1
	if p, ok := ctx.Value(nodeKey{}).(*node); ok {
		n.parent = p.id
	}
	r.nodes = append(r.nodes, n)
	return context.WithValue(ctx, nodeKey{}, n)
}

func (r *recorder) end(ctx context.Context, f func(n *node)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, _ := ctx.Value(nodeKey{}).(*node)
	if n == nil {
		panic("an Ended call without its Started context")
	}
	f(n)
}

func (r *recorder) TurnStarted(ctx context.Context, t engine.TurnStart) context.Context {
	if ctx.Done() != nil {
		panic("the turn's observer context can be cancelled")
	}
	return r.start(ctx, &node{kind: "turn", turnStart: t})
}

func (r *recorder) TurnEnded(ctx context.Context, t engine.TurnEnd) {
	if t.Recovered {
		r.mu.Lock()
		r.recovered = append(r.recovered, t)
		r.mu.Unlock()
		return
	}
	r.end(ctx, func(n *node) { n.turnEnd = &t })
}

func (r *recorder) ModelCallStarted(ctx context.Context, c engine.ModelCallStart) context.Context {
	return r.start(ctx, &node{kind: "model", modelStart: c})
}

func (r *recorder) ModelCallEnded(ctx context.Context, c engine.ModelCallEnd) {
	r.end(ctx, func(n *node) { n.modelEnd = &c })
}

func (r *recorder) ToolCallStarted(ctx context.Context, c engine.ToolCallStart) context.Context {
	return r.start(ctx, &node{kind: "tool", toolStart: c})
}

func (r *recorder) ToolCallEnded(ctx context.Context, c engine.ToolCallEnd) {
	r.end(ctx, func(n *node) { n.toolEnd = &c })
}

// tree renders the nodes as "kind name <- parent" lines, in start order.
func (r *recorder) tree() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.nodes {
		name := n.turnStart.Agent
		switch n.kind {
		case "model":
			name = n.modelStart.Agent + "/" + n.modelStart.Model
		case "tool":
			name = n.toolStart.Tool
		}
		out = append(out, fmt.Sprintf("%d %s %s <- %d", n.id, n.kind, name, n.parent))
	}
	return out
}

func (r *recorder) all() []*node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*node(nil), r.nodes...)
}

// steppingClock advances a millisecond on every reading, so every
// duration the engine measures is positive and deterministic in sign.
type steppingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func observed(rec *recorder) func(*engine.Config) {
	return func(c *engine.Config) {
		c.Observer = rec
		c.Clock = &steppingClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
}

func TestObserverSeesTurnModelAndToolCallsNested(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, observed(rec))
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("echo", `{"text":"x"}`)}, usage: forge.Usage{InputTokens: 7, OutputTokens: 3, Cost: 0.5}},
		reply{deltas: []string{"do", "ne"}, usage: forge.Usage{InputTokens: 12, OutputTokens: 2}},
	)
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	want := []string{"1 turn a <- 0", "2 model a/m <- 1", "3 tool echo <- 1", "4 model a/m <- 1"}
	if got := rec.tree(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("observed\n got %v\nwant %v", got, want)
	}
	n := rec.all()
	ts, te := n[0].turnStart, n[0].turnEnd
	if ts.SessionID != s.ID || ts.TurnID != turn.ID || ts.Model != "test/m" || ts.Tenant != forge.DefaultTenant {
		t.Fatalf("turn start %+v", ts)
	}
	if te == nil || te.Status != forge.TurnDone || te.Iterations != 2 || te.Usage.InputTokens != 19 || te.Duration <= 0 {
		t.Fatalf("turn end %+v", te)
	}
	m1, m2 := n[1], n[3]
	if m1.modelStart.Provider != "test" || m1.modelStart.Iteration != 1 || m2.modelStart.Iteration != 2 {
		t.Fatalf("model starts %+v %+v", m1.modelStart, m2.modelStart)
	}
	if e := m1.modelEnd; e == nil || e.Finish != forge.FinishToolCalls || e.Usage.OutputTokens != 3 || e.Usage.Cost != 0.5 ||
		e.FirstToken <= 0 || e.Duration < e.FirstToken || e.Err != nil {
		t.Fatalf("first model call end %+v", e)
	}
	if e := m2.modelEnd; e == nil || e.Finish != forge.FinishStop || e.Usage.InputTokens != 12 || e.FirstToken <= 0 {
		t.Fatalf("second model call end %+v", e)
	}
	tool := n[2]
	if tool.toolStart.CallID == "" || tool.toolStart.ThreadID != s.MainThreadID || tool.toolEnd == nil ||
		tool.toolEnd.Outcome != engine.ToolOK || tool.toolEnd.Duration <= 0 {
		t.Fatalf("tool call %+v %+v", tool.toolStart, tool.toolEnd)
	}
}

func TestObserverNestsSubagentCallsUnderTheDelegation(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, observed(rec))
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"write"}`)}}, reply{deltas: []string{"ok"}})
	h.model.pushFor("you write", reply{deltas: []string{"prose"}})
	if turn := h.run(s.ID, msg("go")); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	want := []string{"1 turn lead <- 0", "2 model lead/m <- 1", "3 tool subagent_writer <- 1", "4 model writer/m <- 3", "5 model lead/m <- 1"}
	if got := rec.tree(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("observed\n got %v\nwant %v", got, want)
	}
	n := rec.all()
	if n[2].toolStart.Subagent != "writer" || n[2].toolEnd.Outcome != engine.ToolOK {
		t.Fatalf("delegation %+v %+v", n[2].toolStart, n[2].toolEnd)
	}
	if n[3].modelStart.ThreadID == s.MainThreadID {
		t.Fatal("the subagent's call is observed on the main thread")
	}
}

func TestObserverSeesFailuresAndCancels(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, observed(rec))
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}} })

	// A model error after some output: an errored turn, an estimated usage.
	s := h.session("a")
	h.model.push(reply{deltas: []string{"partial "}, err: &forge.ModelError{Provider: "test", StatusCode: 500, Message: "boom"}})
	if turn := h.run(s.ID, msg("go")); turn.Status != forge.TurnErrored {
		t.Fatalf("turn %+v", turn)
	}
	n := rec.all()
	if e := n[1].modelEnd; e == nil || e.Finish != forge.FinishError || e.Err == nil || e.Cancelled || !e.Usage.Estimated || e.FirstToken <= 0 {
		t.Fatalf("failed call %+v", e)
	}
	if e := n[0].turnEnd; e.Status != forge.TurnErrored || e.ErrorCode != forge.CodeModelError {
		t.Fatalf("errored turn %+v", e)
	}

	// A cancel while the model streams.
	s2 := h.session("a")
	h.model.push(reply{deltas: []string{"thinking"}, block: make(chan struct{})})
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s2.ID, msg("go")); err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s2.ID, forge.EventModelDelta)
	if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s2.ID, ""); err != nil {
		t.Fatal(err)
	}
	n = rec.all()
	if e := n[3].modelEnd; e == nil || !e.Cancelled || e.Finish != forge.FinishError {
		t.Fatalf("cancelled call %+v", e)
	}
	if e := n[2].turnEnd; e.Status != forge.TurnCancelled || e.CancelReason != forge.CancelClient {
		t.Fatalf("cancelled turn %+v", e)
	}
	// A tool failing is a tool outcome, not a failed turn.
	s3 := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"no":`)}}, reply{deltas: []string{"ok"}})
	h.run(s3.ID, msg("go"))
	for _, n := range rec.all() {
		if n.kind == "tool" {
			t.Fatalf("a call with invalid arguments never runs, yet was observed: %+v", n.toolStart)
		}
	}
}

// failing is a tool that fails.
type failing struct{}

func (failing) Def() forge.ToolDef {
	return forge.ToolDef{Name: "fail", Description: "fails", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (failing) Call(context.Context, json.RawMessage) (forge.ToolResult, error) {
	return forge.ToolResult{}, errors.New("disk on fire")
}

func TestObserverToolErrorOutcome(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, observed(rec), func(c *engine.Config) { c.Tools["fail"] = failing{} })
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "fail", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("fail", `{}`)}}, reply{deltas: []string{"ok"}})
	h.run(s.ID, msg("go"))
	tool := rec.all()[2]
	if tool.kind != "tool" || tool.toolEnd.Outcome != engine.ToolError || tool.toolEnd.Err == nil {
		t.Fatalf("failing tool %+v %+v", tool.toolStart, tool.toolEnd)
	}
}

func TestObserverSeesRecoveredTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"partial"}, block: make(chan struct{})})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	copyDB(t, h.path) // what a crash leaves: the turn is running
	cancelRunning(t, h, s.ID)

	rec := &recorder{}
	h2 := &harness{t: t, path: h.path + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open(observed(rec))
	defer h2.close()
	if len(rec.recovered) != 1 {
		t.Fatalf("recovered %+v", rec.recovered)
	}
	if r := rec.recovered[0]; r.TurnID != turn.ID || r.SessionID != s.ID || r.Status != forge.TurnCancelled ||
		r.CancelReason != forge.CancelAbandoned || r.Duration != 0 {
		t.Fatalf("recovered %+v", r)
	}
}
