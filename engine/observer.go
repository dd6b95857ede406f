package engine

import (
	"context"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// Observer watches turns, model calls and tool calls as they run, for
// metrics and traces (the metrics and opentelemetry packages implement
// it). Its methods run on the turn's goroutines and must return quickly.
//
// Each Started method gets the context of what encloses the call (for a
// turn, the request that started it, without its cancellation; for a model
// or tool call, what the turn's TurnStarted returned, or a delegation's
// ToolCallStarted for the calls of the subagent's thread) and returns the
// context the engine hands to the matching Ended method and to the calls
// nested in it: a tracer keeps its span there. The contexts carry values
// only; the engine never waits on them.
type Observer interface {
	TurnStarted(ctx context.Context, t TurnStart) context.Context
	TurnEnded(ctx context.Context, t TurnEnd)
	ModelCallStarted(ctx context.Context, c ModelCallStart) context.Context
	ModelCallEnded(ctx context.Context, c ModelCallEnd)
	ToolCallStarted(ctx context.Context, c ToolCallStart) context.Context
	ToolCallEnded(ctx context.Context, c ToolCallEnd)
}

// TurnStart describes a turn that begins executing.
type TurnStart struct {
	Tenant, SessionID, TurnID string
	Agent                     string // the agent's name
	AgentID                   string
	AgentVersion              int
	// Model is the agent's model, "provider/model".
	Model string
	Start time.Time
}

// TurnEnd describes a turn's end.
type TurnEnd struct {
	Tenant, SessionID, TurnID string
	Agent                     string
	// Status is done, cancelled or errored; CancelReason and ErrorCode
	// say more when they apply.
	Status, CancelReason, ErrorCode string
	// ErrorMessage is the turn's error message (errored).
	ErrorMessage string
	Iterations   int
	Usage        forge.Usage
	// Duration is how long the turn ran, from its creation to its
	// terminal write. Zero when Recovered.
	Duration time.Duration
	End      time.Time
	// Recovered marks a turn a dead executor left running, ended here
	// (cancelled, abandoned) without having run in this process: no
	// TurnStarted preceded it and the context is the background.
	Recovered bool
	// EndedElsewhere marks a turn whose terminal write lost to another
	// (recovery on another replica ended it first): its end was counted
	// there.
	EndedElsewhere bool
	// NotCreated marks a turn whose creation failed (a store failure)
	// after it had started running (its first model call overlaps the
	// creation's write): the turn does not exist. Status is empty and
	// ErrorMessage says why; nothing counts it as a turn.
	NotCreated bool
}

// ModelCallStart describes a model call about to be sent.
type ModelCallStart struct {
	Tenant, SessionID, TurnID, ThreadID string
	Agent                               string
	// Provider is the provider's name (the prefix of the agent's model);
	// Model is the model id as sent to it.
	Provider, Model string
	// Iteration is the thread's model call count, this one included.
	Iteration int
	// Summary marks a compaction's summary call.
	Summary bool
	Start   time.Time
}

// ModelCallEnd describes a model call's end.
type ModelCallEnd struct {
	// Tenant is the turn's tenant.
	Tenant          string
	Provider, Model string
	// Finish is the finish reason (stop, tool_calls, length,
	// content_filter), or error when the call failed or was cancelled.
	Finish string
	// Err is why the call failed; Cancelled marks a call cut by the turn's
	// cancellation (Err is then the cancel cause).
	Err       error
	Cancelled bool
	// Usage is what the provider reported, or Forge's estimate (marked
	// Estimated) for a call that ended without it; zero for a call refused
	// before any output.
	Usage forge.Usage
	// FirstToken is the time from the call's start to its first streamed
	// output (text, reasoning or a tool call); zero when there was none.
	FirstToken time.Duration
	Duration   time.Duration
	End        time.Time
}

// Tool call outcomes (ToolCallEnd.Outcome).
const (
	ToolOK           = "ok"
	ToolError        = "error"         // the tool failed or reported an error
	ToolCancelled    = "cancelled"     // cut by the turn's cancellation
	ToolAuthRequired = "auth_required" // an MCP server wants a token
	ToolPaused       = "paused"        // a delegation whose child waits for input
)

// ToolCallStart describes a server-side tool call about to run.
type ToolCallStart struct {
	Tenant, SessionID, TurnID, ThreadID string
	Tool, CallID                        string
	// Subagent is set for a delegation: the agent it hands the task to.
	Subagent string
	Start    time.Time
}

// ToolCallEnd describes a tool call's end.
type ToolCallEnd struct {
	// Tenant is the turn's tenant.
	Tenant       string
	Tool, CallID string
	Outcome      string // one of the Tool* outcomes
	// Err is the tool's failure (nil when it answered, even with an error
	// result, which Outcome says).
	Err      error
	Duration time.Duration
	End      time.Time
}

// Observers fans out to several observers, in order; nil ones are skipped.
// It returns nil when none is left.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) TurnStarted(ctx context.Context, t TurnStart) context.Context {
	for _, o := range m {
		ctx = o.TurnStarted(ctx, t)
	}
	return ctx
}

func (m multiObserver) TurnEnded(ctx context.Context, t TurnEnd) {
	for _, o := range m {
		o.TurnEnded(ctx, t)
	}
}

func (m multiObserver) ModelCallStarted(ctx context.Context, c ModelCallStart) context.Context {
	for _, o := range m {
		ctx = o.ModelCallStarted(ctx, c)
	}
	return ctx
}

func (m multiObserver) ModelCallEnded(ctx context.Context, c ModelCallEnd) {
	for _, o := range m {
		o.ModelCallEnded(ctx, c)
	}
}

func (m multiObserver) ToolCallStarted(ctx context.Context, c ToolCallStart) context.Context {
	for _, o := range m {
		ctx = o.ToolCallStarted(ctx, c)
	}
	return ctx
}

func (m multiObserver) ToolCallEnded(ctx context.Context, c ToolCallEnd) {
	for _, o := range m {
		o.ToolCallEnded(ctx, c)
	}
}

// The engine's side: each helper is a no-op without an observer, so an
// engine without one pays a nil check per call.

// observeTurnStart tells the observer the turn begins; ctx is the
// request's.
func (x *execution) observeTurnStart(ctx context.Context, agent *forge.Agent) {
	o := x.e.obs
	if o == nil {
		return
	}
	t := x.turn
	x.obsCtx = o.TurnStarted(context.WithoutCancel(ctx), TurnStart{
		Tenant: x.tenant, SessionID: x.session.ID, TurnID: t.ID, Agent: agent.Name, AgentID: agent.ID,
		AgentVersion: agent.Version, Model: agent.Model, Start: t.CreatedAt,
	})
}

// observeTurnEnd tells the observer how the turn ended (after its
// terminal write, or its loss).
func (x *execution) observeTurnEnd() {
	o := x.e.obs
	if o == nil {
		return
	}
	first := false
	x.observedEnd.Do(func() { first = true })
	if !first {
		return
	}
	t := x.turn
	end := TurnEnd{Tenant: x.tenant, SessionID: x.session.ID, TurnID: t.ID, Agent: x.main.agent.Name,
		Iterations: t.Iterations, Usage: t.Usage, EndedElsewhere: x.endedElsewhere}
	fillTurnEnd(&end, t)
	if end.Duration = end.End.Sub(t.CreatedAt); end.Duration < 0 {
		end.Duration = 0
	}
	o.TurnEnded(x.obsCtx, end)
}

// observeNotCreated tells the observer that the turn it was told had
// started was never created (its creation's write failed).
func (x *execution) observeNotCreated() {
	o := x.e.obs
	if o == nil {
		return
	}
	end := TurnEnd{Tenant: x.tenant, SessionID: x.session.ID, TurnID: x.turn.ID, Agent: x.main.agent.Name,
		NotCreated: true, End: x.e.clock.Now()}
	if x.beginErr != nil {
		end.ErrorMessage = x.beginErr.Error()
	}
	o.TurnEnded(x.obsCtx, end)
}

// fillTurnEnd copies t's outcome into end.
func fillTurnEnd(end *TurnEnd, t *forge.Turn) {
	end.Status = t.Status
	if t.CancelReason != nil {
		end.CancelReason = *t.CancelReason
	}
	if t.Error != nil {
		end.ErrorCode, end.ErrorMessage = t.Error.Code, t.Error.Message
	}
	if t.EndedAt != nil {
		end.End = *t.EndedAt
	}
}

// observeRecovered tells the observer that recovery ended t.
func (e *Engine) observeRecovered(t *forge.Turn) {
	if e.obs == nil {
		return
	}
	end := TurnEnd{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Iterations: t.Iterations,
		Usage: t.Usage, Recovered: true}
	fillTurnEnd(&end, t)
	e.obs.TurnEnded(context.Background(), end)
}

// modelCall is one model call being observed.
type modelCall struct {
	ctx        context.Context
	start      ModelCallStart
	firstToken time.Time
}

// observeModelCall tells the observer a model call starts; nil without
// an observer.
func (th *thread) observeModelCall(req *forge.ModelRequest, summary bool) *modelCall {
	o := th.x.e.obs
	if o == nil {
		return nil
	}
	x := th.x
	provider, _, _ := strings.Cut(th.agent.Model, "/")
	mc := &modelCall{start: ModelCallStart{
		Tenant: x.tenant, SessionID: x.session.ID, TurnID: x.turn.ID, ThreadID: th.id, Agent: th.agent.Name,
		Provider: provider, Model: req.Model, Iteration: th.iterations, Summary: summary, Start: x.e.clock.Now(),
	}}
	mc.ctx = o.ModelCallStarted(th.observed(), mc.start)
	return mc
}

// output notes the call's first streamed output.
func (mc *modelCall) output(clock forge.Clock) {
	if mc != nil && mc.firstToken.IsZero() {
		mc.firstToken = clock.Now()
	}
}

// ended tells the observer the call ended.
func (mc *modelCall) ended(th *thread, finish string, usage forge.Usage, err error) {
	if mc == nil {
		return
	}
	x := th.x
	end := ModelCallEnd{Tenant: mc.start.Tenant, Provider: mc.start.Provider, Model: mc.start.Model, Finish: finish, Err: err,
		Cancelled: err != nil && x.cancelled(), Usage: usage, End: x.e.clock.Now()}
	end.Duration = max(0, end.End.Sub(mc.start.Start))
	if !mc.firstToken.IsZero() {
		end.FirstToken = max(0, mc.firstToken.Sub(mc.start.Start))
	}
	x.e.obs.ModelCallEnded(mc.ctx, end)
}

// toolCall is one tool call being observed.
type toolCall struct {
	ctx   context.Context
	start ToolCallStart
}

// observeToolCall tells the observer a server-side call starts; nil
// without an observer. It runs on the call's goroutine and reads only
// what does not change while the call runs.
func (th *thread) observeToolCall(c *call, tool, callID string) *toolCall {
	o := th.x.e.obs
	if o == nil {
		return nil
	}
	x := th.x
	tc := &toolCall{start: ToolCallStart{Tenant: x.tenant, SessionID: x.session.ID, TurnID: x.turn.ID, ThreadID: th.id,
		Tool: tool, CallID: callID, Start: x.e.clock.Now()}}
	if c.run.kind == delegation {
		tc.start.Subagent = c.run.sub.Name
	}
	tc.ctx = o.ToolCallStarted(th.observed(), tc.start)
	return tc
}

// context is where the calls nested in this one are observed (a
// delegation's child thread); fallback without an observer.
func (tc *toolCall) context(fallback context.Context) context.Context {
	if tc == nil {
		return fallback
	}
	return tc.ctx
}

// ended tells the observer the call ended.
func (tc *toolCall) ended(e *Engine, outcome string, err error) {
	if tc == nil {
		return
	}
	end := ToolCallEnd{Tenant: tc.start.Tenant, Tool: tc.start.Tool, CallID: tc.start.CallID, Outcome: outcome, Err: err, End: e.clock.Now()}
	end.Duration = max(0, end.End.Sub(tc.start.Start))
	e.obs.ToolCallEnded(tc.ctx, end)
}

// observed is the context the thread's calls are observed in: its
// delegation's, or the turn's.
func (th *thread) observed() context.Context {
	if th.obsParent != nil {
		return th.obsParent
	}
	return th.x.obsCtx
}
