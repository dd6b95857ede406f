package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
)

// beginGate is the real store whose BeginTurn first waits, up to window,
// for the model to be called (called is closed by the model's onCall),
// recording whether it was, and fails while failures is above zero.
type beginGate struct {
	forge.Store

	mu          sync.Mutex
	called      chan struct{}
	window      time.Duration
	failures    int
	modelCalled []bool // per BeginTurn: the model was called while it waited
}

// arm sets what the next BeginTurn waits for; the returned func is the
// reply's onCall.
func (g *beginGate) arm(window time.Duration) func() {
	ch := make(chan struct{})
	g.mu.Lock()
	g.called, g.window = ch, window
	g.mu.Unlock()
	return func() { close(ch) }
}

func (g *beginGate) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	g.mu.Lock()
	ch, window := g.called, g.window
	fail := g.failures > 0
	if fail {
		g.failures--
	}
	g.mu.Unlock()
	called := false
	if ch != nil {
		select {
		case <-ch:
			called = true
		case <-time.After(window):
		}
	}
	g.mu.Lock()
	g.modelCalled = append(g.modelCalled, called)
	g.mu.Unlock()
	if fail {
		return errDisk
	}
	return g.Store.BeginTurn(ctx, b)
}

func (g *beginGate) calledDuringCreation() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]bool(nil), g.modelCalled...)
}

func newGated(t *testing.T, tweak func(*engine.Config)) (*harness, *beginGate, *writeLog) {
	g := &beginGate{}
	wl := &writeLog{}
	h := newHarness(t, func(c *engine.Config) {
		g.Store = c.Store
		wl.Store = g
		c.Store = wl
		c.StoreRetryDelays = []time.Duration{} // no retry
		if tweak != nil {
			tweak(c)
		}
	})
	return h, g, wl
}

// TestModelCallOverlapsTheTurnsCreation: a plain message turn calls the
// model while its creation is being written, and writes nothing before
// that write landed.
func TestModelCallOverlapsTheTurnsCreation(t *testing.T) {
	t.Parallel()
	h, g, wl := newGated(t, nil)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"ok"}, onCall: g.arm(10 * time.Second)})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnDone || turn.Output == nil || turn.Output.Text != "ok" {
		t.Fatalf("turn %+v", turn)
	}
	if got := g.calledDuringCreation(); len(got) != 1 || !got[0] {
		t.Fatalf("model called while the turn was created: %v", got)
	}
	if writes := wl.take(); len(writes) != 2 || writes[0][0] != forge.EventTurnCreated {
		t.Fatalf("writes %v: the creation first, then the end", writes)
	}
}

// TestFailedCreationLeavesNoTrace: when a turn's creation fails, the model
// call it began is cancelled, nothing of the turn is written or published,
// StartTurn reports the failure, and the session runs its next turn.
func TestFailedCreationLeavesNoTrace(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h, g, _ := newGated(t, func(c *engine.Config) { c.Observer = rec })
	g.failures = 1
	h.agent("a", nil)
	s := h.session("a")
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	sub := make(chan []forge.Event, 1)
	go func() {
		var evs []forge.Event
		for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{}) {
			if err != nil {
				break
			}
			if evs = append(evs, ev); ev.Type == forge.EventTurnDone {
				break
			}
		}
		sub <- evs
	}()
	cancelled := make(chan struct{})
	h.model.push(reply{deltas: []string{"never"}, block: make(chan struct{}),
		onCall: g.arm(10 * time.Second), onCancel: func() { close(cancelled) }})
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("hi")); !errors.Is(err, errDisk) {
		t.Fatalf("StartTurn: %v", err)
	}
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("the model call of the turn that was never created was not cancelled")
	}
	if evs := h.events(s.ID, 0); len(evs) != 0 {
		t.Fatalf("stored %s", types(evs))
	}
	// Observers were told the turn started (its model call ran under it)
	// and then that it was never created: nothing counts it as a turn.
	nodes := rec.all()
	if len(nodes) == 0 || nodes[0].kind != "turn" || nodes[0].turnEnd == nil || !nodes[0].turnEnd.NotCreated ||
		nodes[0].turnEnd.Status != "" || !strings.Contains(nodes[0].turnEnd.ErrorMessage, errDisk.Error()) {
		t.Fatalf("observed %v, first turn end %+v", rec.tree(), nodes[0].turnEnd)
	}
	for _, n := range nodes[1:] {
		if n.kind == "model" && n.parent != nodes[0].id {
			t.Fatalf("the model call was observed outside its turn: %v", rec.tree())
		}
	}
	h.model.push(reply{deltas: []string{"ok"}, onCall: g.arm(10 * time.Second)})
	next := h.run(s.ID, msg("again"))
	if next.Status != forge.TurnDone {
		t.Fatalf("the next turn: %+v", next)
	}
	evs := <-sub
	if len(evs) == 0 || evs[0].Type != forge.EventTurnCreated {
		t.Fatalf("the subscriber got %s", types(evs))
	}
	for _, ev := range evs {
		if ev.TurnID == nil || *ev.TurnID != next.ID {
			t.Fatalf("a subscriber got %s of another turn than the next one", ev.Type)
		}
	}
}

// TestSomeTurnsCallTheModelOnlyOnceCreated: a turn resolving open calls
// does not call the model before it exists, nor does any turn when the bus
// may have readers in other processes (another process could be running a
// turn in the session: its creation would fail). The model is given
// 200 ms to be called early.
func TestSomeTurnsCallTheModelOnlyOnceCreated(t *testing.T) {
	t.Parallel()
	h, g, _ := newGated(t, func(c *engine.Config) { c.Bus = remoteBus{bus.New(0, 0)} })
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"ok"}, onCall: g.arm(200 * time.Millisecond)})
	if turn := h.run(s.ID, msg("hi")); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	if got := g.calledDuringCreation(); len(got) != 1 || got[0] {
		t.Fatalf("over a remote bus, model called while the turn was created: %v", got)
	}

	h2, g2, _ := newGated(t, nil)
	h2.agent("b", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "ask_user", Client: true, InputSchema: []byte(`{"type":"object"}`)}}
	})
	s2 := h2.session("b")
	h2.model.push(reply{calls: []forge.ToolCall{call("ask_user", `{}`)}, onCall: g2.arm(10 * time.Second)})
	paused := h2.run(s2.ID, msg("go"))
	h2.model.push(reply{deltas: []string{"thanks"}, onCall: g2.arm(200 * time.Millisecond)})
	resumed := h2.run(s2.ID, engine.TurnRequest{Input: []forge.Input{toolResult(paused.RequiredActions[0].CallID, "yes")}})
	if resumed.Status != forge.TurnDone {
		t.Fatalf("resumed %+v", resumed)
	}
	if got := g2.calledDuringCreation(); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("model called while the turns were created: %v, want [true false]", got)
	}
}

// remoteBus is the in-process bus not saying it is process-local, as a
// bus shared by several processes would not.
type remoteBus struct{ forge.Bus }

// heldBegin is the real store whose BeginTurn, once armed, waits for
// release: a turn's creation that has not landed yet.
type heldBegin struct {
	forge.Store
	entered chan struct{} // closed when the held BeginTurn is entered
	release chan struct{}
	once    sync.Once
}

func (s *heldBegin) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	s.once.Do(func() { close(s.entered); <-s.release })
	return s.Store.BeginTurn(ctx, b)
}

// TestRepeatDuringCreationGetsTheTurn: a request repeating an idempotency
// key while the first request's turn is still being created is not told the
// session is busy with that very turn: it gets the turn.
func TestRepeatDuringCreationGetsTheTurn(t *testing.T) {
	t.Parallel()
	held := &heldBegin{entered: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, func(c *engine.Config) { held.Store = c.Store; c.Store = held })
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"ok"}})
	req := msg("hi")
	req.IdempotencyKey = "k"
	type result struct {
		turn *forge.Turn
		err  error
	}
	first, repeat := make(chan result, 1), make(chan result, 1)
	go func() {
		t, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, req)
		first <- result{t, err}
	}()
	<-held.entered
	go func() {
		t, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, req)
		repeat <- result{t, err}
	}()
	// Without the creation landing, the repeat has nothing to answer with
	// but the busy session; give it the time to say so.
	var early *result
	select {
	case r := <-repeat:
		early = &r
	case <-time.After(time.Second):
	}
	close(held.release)
	a := <-first
	if a.err != nil {
		t.Fatalf("first: %v", a.err)
	}
	b := early
	if b == nil {
		r := <-repeat
		b = &r
	}
	if b.err != nil || b.turn == nil || b.turn.ID != a.turn.ID {
		t.Fatalf("repeat: %+v, %v; want turn %s", b.turn, b.err, a.turn.ID)
	}
	h.wait(s.ID, a.turn.ID)
}
