package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
)

// withScripted makes the harness resolve scripted/* with the scripted
// provider (and test/* with the test model, read from *h when called).
func withScripted(h **harness) func(*engine.Config) {
	return func(c *engine.Config) {
		r := provider.NewRegistry()
		r.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
		r.Register("test", func(string) (forge.Model, error) { return (*h).model, nil })
		c.Models = r
	}
}

// scriptedAgent creates an agent of the scripted provider playing steps.
func (h *harness) scriptedAgent(name string, steps ...scripted.Step) {
	h.t.Helper()
	h.agent(name, func(a *forge.Agent) {
		a.Model = "scripted/" + name
		a.ModelParams.Script = scripted.Script(steps...)
	})
}

// turnText is the text of the turn's assistant messages, in order, and
// the state of the last text part.
func (h *harness) turnText(tid string) (text string, lastState string) {
	h.t.Helper()
	msgs, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, tid)
	if err != nil {
		h.t.Fatal(err)
	}
	var b strings.Builder
	for _, m := range msgs {
		if m.Role != forge.RoleAssistant {
			continue
		}
		for _, p := range m.Parts {
			if p.Type == forge.PartText {
				b.WriteString(p.Text)
				lastState = p.State
			}
		}
	}
	return b.String(), lastState
}

// TestTurnOutputByteLimitEndsTheTurn: a scripted model that streams past
// the turn's byte limit is cut at the limit: the turn ends errored with
// output_limit naming the limit, the text up to it is stored in a part
// ended interrupted, and its events say the same.
func TestTurnOutputByteLimitEndsTheTurn(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, func(c *engine.Config) { withScripted(&h)(c); c.MaxTurnOutputBytes = 1000 })
	h.scriptedAgent("flood", scripted.Step{Text: strings.Repeat("é", 1500), Chunk: 7})
	s := h.session("flood")
	// Streamed live: the deltas stop at the limit.
	started, events, err := h.eng.StreamTurn(h.ctx, forge.DefaultTenant, s.ID, msg("talk"))
	if err != nil {
		t.Fatal(err)
	}
	var deltas strings.Builder
	for ev, err := range events {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == forge.EventModelDelta {
			var d forge.DeltaData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			deltas.WriteString(d.Delta)
		}
	}
	turn := h.wait(s.ID, started.ID)
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeOutputLimit {
		t.Fatalf("turn: %s %+v", turn.Status, turn.Error)
	}
	if !strings.Contains(turn.Error.Message, "1000 bytes") {
		t.Errorf("message does not name the limit: %q", turn.Error.Message)
	}
	want := strings.Repeat("é", 500)
	if deltas.String() != want {
		t.Errorf("streamed %d bytes, want the 1000 up to the limit", deltas.Len())
	}
	text, state := h.turnText(turn.ID)
	if text != want || state != forge.StateInterrupted {
		t.Errorf("kept %d bytes (%s), want 1000 bytes of é, interrupted", len(text), state)
	}
	var last forge.Part
	for _, ev := range h.events(s.ID, 0) {
		if ev.Type == forge.EventModelMessage {
			if err := json.Unmarshal(ev.Data, &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if last.State != forge.StateInterrupted || last.Text != want {
		t.Errorf("the part's last event: %s, %d bytes", last.State, len(last.Text))
	}
}

// TestTurnOutputByteLimitCountsEveryStep: the limit is the turn's, across
// its model calls: a step repeated after each tool round trip reaches it
// on the third call.
func TestTurnOutputByteLimitCountsEveryStep(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, func(c *engine.Config) { withScripted(&h)(c); c.MaxTurnOutputBytes = 1000 })
	h.scriptedAgent("loop", scripted.Step{Text: strings.Repeat("x", 400), Chunk: 50,
		ToolCalls: []scripted.ToolCall{{Name: "echo", Arguments: []byte(`{"text":"a"}`)}}})
	if err := h.store.UpdateAgent(h.ctx, withTools(h, "loop", "echo")); err != nil {
		t.Fatal(err)
	}
	s := h.session("loop")
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeOutputLimit {
		t.Fatalf("turn: %s %+v", turn.Status, turn.Error)
	}
	if turn.Iterations != 3 {
		t.Errorf("iterations %d, want 3", turn.Iterations)
	}
	// Two calls of 400 text bytes and an echo call (4 + 12 bytes) each,
	// then 168 bytes of the third call's text.
	text, state := h.turnText(turn.ID)
	if len(text) != 1000-2*(4+12) || state != forge.StateInterrupted {
		t.Errorf("kept %d bytes (%s), want %d, interrupted", len(text), state, 1000-2*(4+12))
	}
}

// TestTurnOutputTokenLimit: a call whose reported output tokens reach the
// limit runs no tool and makes no further call: the turn ends errored with
// output_limit; a final answer that reaches it stands.
func TestTurnOutputTokenLimit(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, func(c *engine.Config) { withScripted(&h)(c); c.MaxTurnOutputTokens = 50 })
	h.scriptedAgent("tok", scripted.Step{Text: "thinking", Usage: &scripted.Usage{InputTokens: 10, OutputTokens: 30},
		ToolCalls: []scripted.ToolCall{{Name: "echo", Arguments: []byte(`{"text":"a"}`)}}})
	if err := h.store.UpdateAgent(h.ctx, withTools(h, "tok", "echo")); err != nil {
		t.Fatal(err)
	}
	s := h.session("tok")
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeOutputLimit || !strings.Contains(turn.Error.Message, "50 output tokens") {
		t.Fatalf("turn: %s %+v", turn.Status, turn.Error)
	}
	if turn.Iterations != 2 || turn.Usage.OutputTokens != 60 {
		t.Errorf("iterations %d, output tokens %d; want 2, 60", turn.Iterations, turn.Usage.OutputTokens)
	}
	msgs, err := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool {
				states = append(states, p.State)
			}
		}
	}
	if len(states) != 2 || states[0] != forge.StateCompleted || states[1] != forge.StateError {
		t.Errorf("tool parts %v: the second call must not run", states)
	}

	h.scriptedAgent("final", scripted.Step{Text: "done", Usage: &scripted.Usage{InputTokens: 1, OutputTokens: 80}})
	if turn := h.run(h.session("final").ID, msg("go")); turn.Status != forge.TurnDone {
		t.Errorf("a final answer over the token limit: %s %+v", turn.Status, turn.Error)
	}
}

// TestTurnOutputTokenLimitCutsAStream: while a call streams, its tokens
// are estimated at 4 bytes each, so a call that would pass the limit is
// cut there.
func TestTurnOutputTokenLimitCutsAStream(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, func(c *engine.Config) { withScripted(&h)(c); c.MaxTurnOutputTokens = 10 })
	h.scriptedAgent("long", scripted.Step{Text: strings.Repeat("y", 100), Chunk: 3})
	turn := h.run(h.session("long").ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeOutputLimit {
		t.Fatalf("turn: %s %+v", turn.Status, turn.Error)
	}
	if text, state := h.turnText(turn.ID); len(text) != 40 || state != forge.StateInterrupted {
		t.Errorf("kept %d bytes (%s), want 40, interrupted", len(text), state)
	}
}

// TestNoOutputLimit: a negative limit is none.
func TestNoOutputLimit(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, func(c *engine.Config) {
		withScripted(&h)(c)
		c.MaxTurnOutputBytes, c.MaxTurnOutputTokens = -1, -1
	})
	h.scriptedAgent("flood", scripted.Step{Text: strings.Repeat("z", 20000), Chunk: 500})
	turn := h.run(h.session("flood").ID, msg("go"))
	if text, _ := h.turnText(turn.ID); turn.Status != forge.TurnDone || len(text) != 20000 {
		t.Fatalf("turn %s, %d bytes", turn.Status, len(text))
	}
}

// withTools returns agent name's current version with tools set.
func withTools(h *harness, name string, tools ...string) *forge.Agent {
	h.t.Helper()
	a, err := h.store.GetAgent(h.ctx, forge.DefaultTenant, name)
	if err != nil {
		h.t.Fatal(err)
	}
	a.Tools = nil
	for _, tool := range tools {
		a.Tools = append(a.Tools, forge.ToolSpec{Name: tool, BuiltIn: true})
	}
	if err := a.Normalize(h.eng.IsBuiltin); err != nil {
		h.t.Fatal(err)
	}
	return a
}

// TestScriptedQuotaRefusesBeforeStoring: over its tenant's quota of
// running scripted turns, a turn is refused with rate_limited and a retry
// delay, and nothing of it is stored; other tenants, other providers and
// the same tenant once a turn ended are not refused.
func TestScriptedQuotaRefusesBeforeStoring(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, func(c *engine.Config) {
		withScripted(&h)(c)
		c.Quota = &engine.TurnQuota{Providers: []string{"scripted"}, Running: 1}
	})
	h.scriptedAgent("slow", scripted.Step{Text: "a", Hang: true})
	h.agent("plain", nil)
	busy, idle := h.session("slow"), h.session("slow")
	first, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, busy.ID, msg("one"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.eng.StartTurn(h.ctx, forge.DefaultTenant, idle.ID, msg("two"))
	if !errors.Is(err, forge.ErrRateLimited) {
		t.Fatalf("second scripted turn: %v", err)
	}
	if d, ok := forge.RetryAfter(err); !ok || d <= 0 {
		t.Errorf("no retry delay: %v %v", d, ok)
	}
	if turns, _, err := h.store.ListTurns(h.ctx, forge.DefaultTenant, idle.ID, forge.ListOptions{}); err != nil || len(turns) != 0 {
		t.Errorf("refused turn stored: %v %v", turns, err)
	}
	if evs := h.events(idle.ID, 0); len(evs) != 0 {
		t.Errorf("refused turn has events: %v", evs)
	}
	if turn := h.run(h.session("plain").ID, msg("other provider")); turn.Status != forge.TurnDone {
		t.Errorf("a turn of another provider: %s", turn.Status)
	}
	if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, busy.ID, ""); err != nil {
		t.Fatal(err)
	}
	h.wait(busy.ID, first.ID)
	h.scriptedAgent("quick", scripted.Step{Text: "hi"})
	if turn := h.run(h.session("quick").ID, msg("after")); turn.Status != forge.TurnDone {
		t.Errorf("after the running turn ended: %s %+v", turn.Status, turn.Error)
	}
}

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestScriptedQuotaPerMinute: a tenant starts at most PerMinute scripted
// turns per minute; the refusal says when the next may start, and it may
// then.
func TestScriptedQuotaPerMinute(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	var h *harness
	h = newHarness(t, func(c *engine.Config) {
		withScripted(&h)(c)
		c.Clock = clock
		c.Quota = &engine.TurnQuota{Providers: []string{"scripted"}, PerMinute: 3}
	})
	h.scriptedAgent("echo")
	s := h.session("echo")
	for i := range 3 {
		if turn := h.run(s.ID, msg("hi")); turn.Status != forge.TurnDone {
			t.Fatalf("turn %d: %s", i, turn.Status)
		}
	}
	_, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("fourth"))
	d, ok := forge.RetryAfter(err)
	if !errors.Is(err, forge.ErrRateLimited) || !ok || d < 19*time.Second || d > 20*time.Second {
		t.Fatalf("fourth turn: %v (retry after %s)", err, d)
	}
	clock.add(d)
	if turn := h.run(s.ID, msg("later")); turn.Status != forge.TurnDone {
		t.Fatalf("after the delay: %s", turn.Status)
	}
	// Another tenant has its own bucket.
	other := &forge.Agent{Tenant: "globex", Name: "echo", Model: "scripted/echo"}
	if err := other.Normalize(nil); err != nil {
		t.Fatal(err)
	}
	if err := h.store.CreateAgent(h.ctx, other); err != nil {
		t.Fatal(err)
	}
	gs := &forge.Session{ID: idgen.New(forge.PrefixSession), Tenant: "globex", Kind: forge.KindDirect, Agent: "echo",
		MainThreadID: idgen.New(forge.PrefixThread), Metadata: []byte(`{}`), CreatedAt: clock.Now(), UpdatedAt: clock.Now()}
	if err := h.store.CreateSession(h.ctx, gs); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.StartTurn(h.ctx, "globex", gs.ID, msg("hi")); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}
