package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
)

// reply is what the test model answers to one call.
type reply struct {
	reasoning string
	deltas    []string
	calls     []forge.ToolCall
	usage     forge.Usage
	err       error
	// block, when set, makes the model wait after its deltas until the
	// channel closes or the call's context ends.
	block chan struct{}
	// cut ends the stream after the deltas with no finish and no error.
	cut bool
	// silent: the model does not report its waits (forge.ReportWaits),
	// so the engine writes before each delta instead of holding them
	// until the model waits (before block) or the stream ends.
	silent bool
	// waitBetween: the model reports a wait before each delta after the
	// first, and goes on at once (the next piece was on its way).
	waitBetween bool
	// gap is a pause before each delta after the first that the model
	// does not report as a wait (a reply streamed in one long burst).
	gap time.Duration
	// onCall runs when the model is called; onCancel when block ends by
	// the call's cancellation.
	onCall, onCancel func()
	// deaf: block does not end with the call's cancellation (a model
	// call that outlives a cancel).
	deaf bool
}

// testModel answers calls from a queue and records what it was sent. It
// stands in for a provider; providers have their own wire-level tests.
type testModel struct {
	mu      sync.Mutex
	replies []reply
	// byAgent queues replies for requests whose system prompt is the key
	// (an agent's instructions), so parallel threads get their own.
	byAgent  map[string][]reply
	requests []*forge.ModelRequest
	calls    int
}

func (m *testModel) push(r ...reply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replies = append(m.replies, r...)
}

func (m *testModel) sent() []*forge.ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*forge.ModelRequest(nil), m.requests...)
}

func (m *testModel) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		m.mu.Lock()
		m.requests = append(m.requests, req.Clone()) // req is reused once Stream returns
		r := reply{deltas: []string{"ok"}}
		if q := m.byAgent[req.System]; len(q) > 0 {
			r = q[0]
			m.byAgent[req.System] = q[1:]
		} else if len(m.replies) > 0 {
			r = m.replies[0]
			m.replies = m.replies[1:]
		}
		m.calls++
		m.mu.Unlock()
		if r.onCall != nil {
			r.onCall()
		}
		wait := func() {}
		if !r.silent {
			wait = forge.ReportWaits(ctx)
		}
		if r.reasoning != "" {
			if !yield(forge.ModelEvent{Type: forge.ReasoningDelta, Delta: r.reasoning}, nil) || !yield(forge.ModelEvent{Type: forge.ReasoningEnd}, nil) {
				return
			}
		}
		for i, d := range r.deltas {
			if i > 0 && r.waitBetween {
				wait()
			}
			if i > 0 && r.gap > 0 {
				time.Sleep(r.gap)
			}
			if !yield(forge.ModelEvent{Type: forge.TextDelta, Delta: d}, nil) {
				return
			}
		}
		if r.block != nil {
			wait()
			cancelled := ctx.Done()
			if r.deaf {
				cancelled = nil
			}
			select {
			case <-r.block:
			case <-cancelled:
				if r.onCancel != nil {
					r.onCancel()
				}
				yield(forge.ModelEvent{}, ctx.Err())
				return
			}
		}
		if r.err != nil {
			yield(forge.ModelEvent{}, r.err)
			return
		}
		if r.cut {
			return
		}
		if len(r.deltas) > 0 && !yield(forge.ModelEvent{Type: forge.TextEnd}, nil) {
			return
		}
		for i := range r.calls {
			if !yield(forge.ModelEvent{Type: forge.ToolCallEvent, ToolCall: &r.calls[i]}, nil) {
				return
			}
		}
		reason := forge.FinishStop
		if len(r.calls) > 0 {
			reason = forge.FinishToolCalls
		}
		yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{Reason: reason, Usage: r.usage}}, nil)
	}
}

type models struct{ m forge.Model }

func (ms models) Resolve(name string) (forge.Model, string, error) {
	p, id, err := forge.SplitModel(name)
	if err != nil {
		return nil, "", err
	}
	if p != "test" {
		return nil, "", forge.Errorf(forge.ErrInvalid, "provider %q is not configured", p)
	}
	return ms.m, id, nil
}

type harness struct {
	t     testing.TB
	path  string
	store *sqlite.Store
	eng   *engine.Engine
	model *testModel
	ctx   context.Context
}

func newHarness(t testing.TB, opts ...func(*engine.Config)) *harness {
	t.Helper()
	h := &harness{t: t, path: t.TempDir() + "/forge.db", model: &testModel{}, ctx: context.Background()}
	h.open(opts...)
	t.Cleanup(func() { h.close() })
	return h
}

func (h *harness) open(opts ...func(*engine.Config)) {
	h.t.Helper()
	st, err := sqlite.Open(h.ctx, h.path)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := engine.Config{
		Store: st, Models: models{h.model}, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger:         slog.New(slog.DiscardHandler),
		ToolCancelWait: 200 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.store = st
	h.eng = engine.New(cfg)
	if err := h.eng.Recover(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) close() {
	if h.eng != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.eng.Close(ctx)
		_ = h.store.Close(ctx)
		h.eng = nil
	}
}

// agent creates an agent named name with the given tweaks.
func (h *harness) agent(name string, tweak func(*forge.Agent)) *forge.Agent {
	h.t.Helper()
	a := &forge.Agent{Tenant: forge.DefaultTenant, Name: name, Model: "test/m", Instructions: "be brief"}
	if tweak != nil {
		tweak(a)
	}
	if err := a.Normalize(h.eng.IsBuiltin); err != nil {
		h.t.Fatal(err)
	}
	if err := h.store.CreateAgent(h.ctx, a); err != nil {
		h.t.Fatal(err)
	}
	return a
}

var idgen = forge.NewULIDGen(nil)

func (h *harness) session(agent string) *forge.Session {
	h.t.Helper()
	s := &forge.Session{ID: idgen.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect,
		Agent: agent, MainThreadID: idgen.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`),
		CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	if err := h.store.CreateSession(h.ctx, s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

func msg(text string) engine.TurnRequest {
	return engine.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: text}}}
}

func approve(callID string, ok bool, reason string) forge.Input {
	return forge.Input{Type: forge.InputApproval, CallID: callID, Approved: &ok, Reason: reason}
}

func toolResult(callID, out string) forge.Input {
	return forge.Input{Type: forge.InputToolResult, CallID: callID, Output: &out}
}

// run starts a turn and waits for its end.
func (h *harness) run(sid string, req engine.TurnRequest) *forge.Turn {
	h.t.Helper()
	t, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, sid, req)
	if err != nil {
		h.t.Fatalf("StartTurn: %v", err)
	}
	return h.wait(sid, t.ID)
}

func (h *harness) wait(sid, tid string) *forge.Turn {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	t, err := h.eng.WaitTurn(ctx, forge.DefaultTenant, sid, tid)
	if err != nil {
		h.t.Fatalf("WaitTurn: %v", err)
	}
	return t
}

func (h *harness) events(sid string, after int64) []forge.Event {
	h.t.Helper()
	evs, err := h.store.ListEvents(h.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: sid, After: after, Limit: 10000})
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

func types(evs []forge.Event) string {
	var b []string
	for _, e := range evs {
		b = append(b, e.Type)
	}
	return strings.Join(b, " ")
}

func call(name, args string) forge.ToolCall {
	return forge.ToolCall{ID: "prov_" + name, Name: name, Arguments: json.RawMessage(args)}
}

func TestTextTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"Hel", "lo"}, usage: forge.Usage{InputTokens: 10, OutputTokens: 2}})
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnDone || turn.Output == nil || turn.Output.Text != "Hello" {
		t.Fatalf("turn = %+v output %+v", turn, turn.Output)
	}
	if turn.Usage.InputTokens != 10 || turn.Iterations != 1 {
		t.Fatalf("usage %+v iterations %d", turn.Usage, turn.Iterations)
	}
	evs := h.events(s.ID, 0)
	want := "turn.created message.created message.created step.started model.message model.message step.finished message.updated turn.done"
	if got := types(evs); got != want {
		t.Fatalf("stored events:\n got %s\nwant %s", got, want)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatal("seqs not increasing")
		}
	}
	if last := evs[len(evs)-1]; last.Seq != turn.LastSeq {
		t.Fatalf("turn.last_seq %d, turn.done seq %d", turn.LastSeq, last.Seq)
	}
	req := h.model.sent()[0]
	if req.System != "be brief" || len(req.Messages) != 1 || req.Messages[0].Parts[0].Text != "hi" || req.Model != "m" {
		t.Fatalf("model was sent %+v", req)
	}
	msgs, _, err := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID})
	if err != nil || len(msgs) != 2 || msgs[1].Role != forge.RoleAssistant || textParts(msgs[1]) != "Hello" {
		t.Fatalf("messages %v %+v", err, msgs)
	}
	if *msgs[1].ParentID != msgs[0].ID {
		t.Fatal("assistant message does not point at the user message")
	}
	snap, err := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, turn.ID)
	if err != nil || snap.ContextTokens != 12 || snap.Threads[s.MainThreadID].State != forge.ThreadFinished {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
}

func textParts(m *forge.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == forge.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// rendezvous is a tool whose calls wait for each other: each returns once
// all n calls have arrived, or fails after a deadline. Calls that run one
// after the other can never all arrive.
type rendezvous struct {
	n       int
	arrived atomic.Int64
	all     chan struct{}
	once    sync.Once
}

func newRendezvous(n int) *rendezvous { return &rendezvous{n: n, all: make(chan struct{})} }

func (r *rendezvous) Def() forge.ToolDef {
	return forge.ToolDef{Name: "meet", Description: "waits for the other calls", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (r *rendezvous) Call(ctx context.Context, _ json.RawMessage) (forge.ToolResult, error) {
	if int(r.arrived.Add(1)) == r.n {
		r.once.Do(func() { close(r.all) })
	}
	select {
	case <-r.all:
		return forge.ToolResult{Output: "met"}, nil
	case <-time.After(3 * time.Second):
		return forge.ToolResult{}, fmt.Errorf("only %d of %d calls arrived: the calls do not run concurrently", r.arrived.Load(), r.n)
	case <-ctx.Done():
		return forge.ToolResult{}, ctx.Err()
	}
}

func TestServerToolRoundTripRunsCallsConcurrently(t *testing.T) {
	t.Parallel()
	meet := newRendezvous(3)
	h := newHarness(t, func(c *engine.Config) { c.Tools["meet"] = meet })
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}, {Name: "meet", BuiltIn: true}}
	})
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("meet", `{}`), call("meet", `{}`), call("echo", `{"text":"pong"}`), call("meet", `{}`)}},
		reply{deltas: []string{"done"}},
	)
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone || turn.Output.Text != "done" || turn.Iterations != 2 {
		t.Fatalf("turn %+v", turn)
	}
	second := h.model.sent()[1]
	if len(second.Messages) != 3 {
		t.Fatalf("second call got %d messages, want user, assistant, tool", len(second.Messages))
	}
	results := second.Messages[2]
	if results.Role != forge.RoleTool || len(results.Parts) != 4 {
		t.Fatalf("tool results sent: %+v", results)
	}
	for i, want := range []string{"met", "met", "pong", "met"} {
		if r := results.Parts[i]; r.IsError || r.Output != want {
			t.Fatalf("result %d (in call order) %+v, want %q", i, r, want)
		}
	}
	if assistant := second.Messages[1]; assistant.Parts[0].Type != forge.ModelPartToolCall || assistant.Parts[0].CallID != results.Parts[0].CallID {
		t.Fatalf("assistant tool calls: %+v", assistant)
	}
}

func TestInvalidArgumentsAndUnknownToolGoBackToTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":`), call("nope", `{}`)}}, reply{deltas: []string{"sorry"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	res := h.model.sent()[1].Messages[2].Parts
	if !res[0].IsError || !strings.Contains(res[0].Output, "not valid JSON") || !res[1].IsError || !strings.Contains(res[1].Output, "unknown tool") {
		t.Fatalf("results %+v", res)
	}
}

func TestApprovalAllowAndDeny(t *testing.T) {
	t.Parallel()
	for _, approved := range []bool{true, false} {
		t.Run(fmt.Sprint("approved=", approved), func(t *testing.T) {
			h := newHarness(t)
			h.agent("a", func(a *forge.Agent) {
				a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
				a.Approval = map[string]string{"echo": forge.PolicyAsk}
			})
			s := h.session("a")
			h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"x"}`)}}, reply{deltas: []string{"fin"}})
			turn := h.run(s.ID, msg("go"))
			if turn.Status != forge.TurnDone || turn.Output != nil || len(turn.RequiredActions) != 1 {
				t.Fatalf("turn %+v", turn)
			}
			act := turn.RequiredActions[0]
			if act.Type != forge.ActionApproval || act.Tool != "echo" || act.ThreadID != s.MainThreadID {
				t.Fatalf("action %+v", act)
			}
			if types(h.events(s.ID, turn.LastSeq-2)) != "action.required turn.done" {
				t.Fatalf("tail events %s", types(h.events(s.ID, turn.LastSeq-2)))
			}
			next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{approve(act.CallID, approved, "not now")}})
			if next.Status != forge.TurnDone || next.Output.Text != "fin" {
				t.Fatalf("next %+v", next)
			}
			res := h.model.sent()[1].Messages[2].Parts[0]
			if approved && (res.IsError || res.Output != "x") {
				t.Fatalf("approved result %+v", res)
			}
			if !approved && (!res.IsError || !strings.Contains(res.Output, "not now")) {
				t.Fatalf("denied result %+v", res)
			}
		})
	}
}

func TestPolicyDenyIsAnErrorResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
		a.Approval = map[string]string{"*": forge.PolicyDeny}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"x"}`)}}, reply{deltas: []string{"ok"}})
	if turn := h.run(s.ID, msg("go")); turn.Status != forge.TurnDone || turn.Iterations != 2 {
		t.Fatalf("turn %+v", turn)
	}
	if res := h.model.sent()[1].Messages[2].Parts[0]; !res.IsError || !strings.Contains(res.Output, "denied by policy") {
		t.Fatalf("result %+v", res)
	}
}

func TestClientToolPauseResumeAndValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "ask_user", Client: true, InputSchema: json.RawMessage(`{"type":"object"}`)}}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("ask_user", `{"q":1}`), call("ask_user", `{"q":2}`)}})
	turn := h.run(s.ID, msg("go"))
	if len(turn.RequiredActions) != 2 || turn.RequiredActions[0].Type != forge.ActionClientTool {
		t.Fatalf("turn %+v", turn)
	}
	a, b := turn.RequiredActions[0].CallID, turn.RequiredActions[1].CallID
	bad := []struct {
		name  string
		input []forge.Input
		want  error
	}{
		{"message while open", []forge.Input{{Type: forge.InputMessage, Text: "hi"}}, forge.ErrPendingActions},
		{"unknown call", []forge.Input{toolResult("call_nope", "x"), toolResult(b, "y")}, forge.ErrUnknownCall},
		{"duplicate", []forge.Input{toolResult(a, "x"), toolResult(a, "x")}, forge.ErrDuplicateCall},
		{"incomplete", []forge.Input{toolResult(a, "x")}, forge.ErrIncompleteResolution},
		{"wrong kind", []forge.Input{approve(a, true, ""), toolResult(b, "y")}, forge.ErrInvalid},
		{"message and resolution", []forge.Input{{Type: forge.InputMessage, Text: "x"}, toolResult(a, "x")}, forge.ErrInvalid},
	}
	for _, tt := range bad {
		before := h.events(s.ID, 0)
		_, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, engine.TurnRequest{Input: tt.input})
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
		if after := h.events(s.ID, 0); len(after) != len(before) {
			t.Errorf("%s: a rejected turn wrote %d events", tt.name, len(after)-len(before))
		}
	}
	h.model.push(reply{deltas: []string{"thanks"}})
	next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{toolResult(b, "two"), toolResult(a, "one")}})
	if next.Status != forge.TurnDone || next.Output.Text != "thanks" {
		t.Fatalf("next %+v", next)
	}
	res := h.model.sent()[1].Messages[2].Parts
	if res[0].Output != "one" || res[1].Output != "two" {
		t.Fatalf("results in call order: %+v", res)
	}
	// A message is accepted again once nothing is open.
	if turn := h.run(s.ID, msg("more")); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
}

func TestIterationLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
		a.IterationLimit = 2
	})
	s := h.session("a")
	loop := reply{calls: []forge.ToolCall{call("echo", `{"text":"again"}`)}}
	h.model.push(loop, loop, loop)
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeIterationLimit || turn.Iterations != 2 {
		t.Fatalf("turn %+v err %+v", turn, turn.Error)
	}
	if n := len(h.model.sent()); n != 2 {
		t.Fatalf("model called %d times, want 2", n)
	}
	// The session continues normally.
	h.model.push(reply{deltas: []string{"fine"}})
	if turn := h.run(s.ID, msg("next")); turn.Status != forge.TurnDone {
		t.Fatalf("after limit %+v", turn)
	}
}

func TestModelErrorEndsErroredKeepingText(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"partial "}, err: &forge.ModelError{Provider: "test", StatusCode: 500, Message: "boom"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeModelError || !strings.Contains(turn.Error.Message, "boom") {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	p := msgs[1].Parts[1]
	if p.Text != "partial " || p.State != forge.StateInterrupted {
		t.Fatalf("part %+v", p)
	}
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	block := make(chan struct{})
	h.model.push(reply{deltas: []string{"thinking..."}, block: block})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("again")); !errors.Is(err, forge.ErrTurnInProgress) {
		t.Fatalf("second turn: %v", err)
	}
	got, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s.ID, "changed my mind")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != turn.ID || got.Status != forge.TurnCancelled || *got.CancelReason != forge.CancelClient ||
		got.CancelMessage == nil || *got.CancelMessage != "changed my mind" {
		t.Fatalf("cancelled %+v", got)
	}
	if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s.ID, ""); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("second cancel: %v", err)
	}
	evs := h.events(s.ID, 0)
	if evs[len(evs)-1].Type != forge.EventTurnDone {
		t.Fatal("turn.done is not the last event")
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if p := msgs[1].Parts[1]; p.Text != "thinking..." || p.State != forge.StateInterrupted {
		t.Fatalf("part %+v", p)
	}
}

// cancelRunning ends the session's running turn in h's engine, so closing
// it does not wait for a turn blocked on the test model.
func cancelRunning(t *testing.T, h *harness, sid string) {
	t.Helper()
	if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, sid, ""); err != nil && !errors.Is(err, forge.ErrConflict) {
		t.Fatal(err)
	}
}

// waitForEvent subscribes and returns once an event of type typ is live.
func waitForEvent(t *testing.T, h *harness, sid, typ string) forge.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, sid, engine.EventsQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == typ {
			return ev
		}
	}
	t.Fatalf("no %s event", typ)
	return forge.Event{}
}

func TestSupersede(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"slow"}, block: make(chan struct{})}, reply{deltas: []string{"fast"}})
	first, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("one"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	req := msg("two")
	req.Supersede = true
	second := h.run(s.ID, req)
	if second.Status != forge.TurnDone || second.Output.Text != "fast" {
		t.Fatalf("second %+v", second)
	}
	old, _ := h.store.GetTurn(h.ctx, forge.DefaultTenant, s.ID, first.ID)
	if old.Status != forge.TurnCancelled || *old.CancelReason != forge.CancelSuperseded {
		t.Fatalf("first %+v", old)
	}
	if *second.PreviousTurnID != first.ID {
		t.Fatal("superseding turn does not chain from the cancelled one")
	}
	if old.LastSeq >= second.LastSeq {
		t.Fatal("superseded turn ended after the new one")
	}
}

func TestForkAndNewRoot(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"A"}}, reply{deltas: []string{"B"}}, reply{deltas: []string{"C"}}, reply{deltas: []string{"D"}})
	t1 := h.run(s.ID, msg("one"))
	h.run(s.ID, msg("two"))
	fork := msg("three")
	fork.PreviousTurnID = &t1.ID
	t3 := h.run(s.ID, fork)
	sent := h.model.sent()[2]
	var texts []string
	for _, m := range sent.Messages {
		texts = append(texts, m.Parts[0].Text)
	}
	if strings.Join(texts, ",") != "one,A,three" {
		t.Fatalf("fork sent %v", texts)
	}
	sess, _ := h.store.GetSession(h.ctx, forge.DefaultTenant, s.ID)
	if *sess.TipTurnID != t3.ID {
		t.Fatal("tip did not move to the fork")
	}
	root := msg("four")
	root.NewRoot = true
	h.run(s.ID, root)
	if sent := h.model.sent()[3]; len(sent.Messages) != 1 || sent.Messages[0].Parts[0].Text != "four" {
		t.Fatalf("new root sent %+v", sent.Messages)
	}
	bad := msg("x")
	bad.PreviousTurnID = &[]string{"turn_nope"}[0]
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, bad); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("unknown previous turn: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) { c.TurnTimeout = 200 * time.Millisecond })
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"x"}, block: make(chan struct{})})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnCancelled || *turn.CancelReason != forge.CancelTimeout {
		t.Fatalf("turn %+v", turn)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	req := msg("hi")
	req.IdempotencyKey = "k1"
	a := h.run(s.ID, req)
	b, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, req)
	if err != nil || b.ID != a.ID || b.Status != forge.TurnDone {
		t.Fatalf("retry: %+v %v", b, err)
	}
	if n := len(h.model.sent()); n != 1 {
		t.Fatalf("model called %d times", n)
	}
}

func TestUnconfiguredProviderErrorsTheTurnClearly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) { a.Model = "nope/x" })
	s := h.session("a")
	turn := h.run(s.ID, msg("hi"))
	if turn.Status != forge.TurnErrored || turn.Error.Code != forge.CodeModelError || !strings.Contains(turn.Error.Message, "not configured") {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	evs := h.events(s.ID, 0)
	if evs[len(evs)-1].Type != forge.EventTurnDone {
		t.Fatal("turn.done is not last")
	}
}

func TestReasoningIsStoredAndSentBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{reasoning: "let me think", deltas: []string{"answer"}}, reply{deltas: []string{"again"}})
	turn := h.run(s.ID, msg("q"))
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	var kinds []string
	for _, p := range msgs[1].Parts {
		kinds = append(kinds, p.Type+":"+p.Text+":"+p.State)
	}
	if got := strings.Join(kinds, " "); got != "step-start:: reasoning:let me think:completed text:answer:completed step-finish::" {
		t.Fatalf("parts %s", got)
	}
	h.run(s.ID, msg("q2"))
	sent := h.model.sent()[1].Messages[1]
	if sent.Parts[0].Type != forge.ModelPartReasoning || sent.Parts[0].Text != "let me think" || sent.Parts[1].Text != "answer" {
		t.Fatalf("history sent %+v", sent)
	}
}

// bigTool returns an output of n bytes.
type bigTool struct{ n int }

func (b bigTool) Def() forge.ToolDef {
	return forge.ToolDef{Name: "big", Description: "big output", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (b bigTool) Call(context.Context, json.RawMessage) (forge.ToolResult, error) {
	return forge.ToolResult{Output: "H" + strings.Repeat("x", b.n-2) + "T"}, nil
}

func TestOversizedToolOutputIsTruncatedForTheModelAndKeptWhole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) {
		c.Tools = map[string]forge.Tool{"big": bigTool{n: 10000}}
		c.MaxToolOutput = 1000
	})
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "big", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("big", `{}`)}}, reply{deltas: []string{"ok"}})
	turn := h.run(s.ID, msg("go"))
	shown := h.model.sent()[1].Messages[2].Parts[0].Output
	if len(shown) > 1200 || !strings.HasPrefix(shown, "H") || !strings.HasSuffix(shown, "T") || !strings.Contains(shown, "[output truncated: 9000 bytes omitted") {
		t.Fatalf("model was shown %d bytes: %.80q...", len(shown), shown)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	var full struct {
		Bytes int    `json:"output_bytes"`
		Full  string `json:"full_output"`
	}
	for _, p := range msgs[1].Parts {
		if p.Type == forge.PartTool {
			_ = json.Unmarshal(p.Data, &full)
		}
	}
	if full.Bytes != 10000 || len(full.Full) != 10000 {
		t.Fatalf("stored %d bytes (%d claimed)", len(full.Full), full.Bytes)
	}
}

func TestOlderToolOutputsArePrunedFromTheModelViewOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	budget := int64(10) // tokens: one 32-byte output fits, two do not
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
		a.Compaction.PruneToolOutputs = &budget
	})
	s := h.session("a")
	old := strings.Repeat("o", 32)
	recent := strings.Repeat("r", 32)
	h.model.push(
		reply{calls: []forge.ToolCall{call("echo", `{"text":"`+old+`"}`)}},
		reply{calls: []forge.ToolCall{call("echo", `{"text":"`+recent+`"}`)}},
		reply{deltas: []string{"ok"}},
	)
	turn := h.run(s.ID, msg("go"))
	last := h.model.sent()[2].Messages
	first, second := last[2].Parts[0].Output, last[4].Parts[0].Output
	if !strings.HasPrefix(first, "[output pruned") || second != recent {
		t.Fatalf("model was sent %q and %q", first, second)
	}
	view, _, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, s.ID, forge.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *view[1].Parts[1].Output; !strings.HasPrefix(got, "[output pruned") {
		t.Fatalf("view=model shows %q", got)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if got := *msgs[1].Parts[1].Output; got != old {
		t.Fatalf("stored output %q", got)
	}
}
