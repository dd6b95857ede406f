package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forge-runtime/forge"
)

// subagentPrefix names the tool that delegates to a subagent.
const subagentPrefix = "subagent_"

// subagentTool is how the model delegates to a subagent. It is never
// called as an ordinary tool: runCalls runs a child thread for it.
type subagentTool struct{ agent *forge.Agent }

func (t *subagentTool) Def() forge.ToolDef {
	desc := fmt.Sprintf("Delegates a task to the %q agent, which works on it on its own and answers with its final text.", t.agent.Name)
	if t.agent.Instructions != "" {
		desc += " Its instructions: " + truncate(t.agent.Instructions, 300)
	}
	return forge.ToolDef{
		Name:        subagentPrefix + t.agent.Name,
		Description: desc,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","description":"What the agent should do, with everything it needs to know."}},"required":["task"]}`),
	}
}

func (t *subagentTool) Call(context.Context, json.RawMessage) (forge.ToolResult, error) {
	return forge.ToolResult{}, errors.New("a subagent runs as a child thread, not as a tool call")
}

// prepareSubagents offers the agent's subagents as tools while the
// delegation depth allows.
func (r *run) prepareSubagents() {
	if r.depth >= r.e.cfg.SubagentDepth {
		return
	}
	for _, name := range r.agent.Subagents {
		a, err := r.e.store.GetAgent(r.ctx, r.tenant, name)
		if err != nil {
			r.e.log.Warn("subagent unavailable", "agent", name, "err", err)
			continue
		}
		t := &subagentTool{agent: a}
		r.extraTools[t.Def().Name] = t
	}
}

// newChild returns a run executing a child thread of r for agent, in the
// same turn: it shares the turn id, the session log and the cancellation,
// and keeps its own messages, buffer and iteration count.
func (r *run) newChild(agent *forge.Agent, threadID string, history []*forge.Message) *run {
	turn := &forge.Turn{ID: r.turn.ID, Tenant: r.tenant, SessionID: r.session.ID, Status: forge.TurnRunning}
	c := &run{
		e: r.e, tenant: r.tenant, session: r.session, agent: agent, turn: turn,
		log: r.log, threadID: threadID, depth: r.depth + 1,
		children:  map[string]forge.ThreadState{},
		history:   history,
		ctx:       r.ctx,
		cancel:    r.cancel,
		done:      make(chan struct{}),
		pendParts: map[string]*forge.Part{},
		pendMsgs:  map[string]*forge.Message{},
		streaming: map[string]*streamingPart{},
	}
	c.prepareTools()
	return c
}

// childResult is what a child thread ended with.
type childResult struct {
	thread string
	agent  string
	out    outcome
	usage  forge.Usage
}

// delegate runs a new child thread for call c (a subagent tool call).
func (r *run) delegate(c *call, agent *forge.Agent) childResult {
	var in struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal(c.part.Arguments, &in); err != nil || in.Task == "" {
		return childResult{out: outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: forge.CodeToolError,
			Message: `a subagent needs {"task": "..."}`}}}
	}
	thread := r.e.ids.New(forge.PrefixThread)
	child := r.newChild(agent, thread, nil)
	child.event(forge.EventThreadCreated, thread, thread, map[string]any{
		"thread_id": thread, "parent_thread_id": r.threadID, "agent": agent.Name, "call_id": c.part.CallID,
	})
	m := child.newMessage(forge.RoleUser)
	p := child.newPart(m, forge.PartText)
	p.Text, p.State = in.Task, forge.StateCompleted
	m.Parts = append(m.Parts, p)
	child.messageEvent(forge.EventMessageCreated, m)
	child.putPart(p)
	child.history = append(child.history, m)
	return child.finishChild(child.loop())
}

// finishChild records thread.done (or the pause) and flushes the child.
func (c *run) finishChild(out outcome) childResult {
	data := map[string]any{"thread_id": c.threadID, "status": out.status}
	switch {
	case len(out.actions) > 0:
		data["required_actions"] = out.actions
	case out.output != nil:
		data["result"] = out.output.Text
	case out.err != nil:
		data["error"] = out.err
	}
	if len(out.actions) == 0 {
		c.event(forge.EventThreadDone, c.threadID, c.threadID, data)
	}
	if err := c.flush(nil); err != nil && !errors.Is(err, forge.ErrTurnEnded) {
		c.e.log.Warn("flush child thread failed", "thread", c.threadID, "err", err)
	}
	return childResult{thread: c.threadID, agent: c.agent.Name, out: out, usage: c.turn.Usage}
}

// recordChild turns a child's end into the delegating call's result, or
// into the actions that pause the turn.
func (r *run) recordChild(c *call, res childResult) []forge.RequiredAction {
	p := c.part
	r.noteChild(res, p.CallID)
	switch {
	case len(res.out.actions) > 0:
		p.State = forge.StatePending
		r.partEvent(forge.EventToolCall, c.msg, p)
		return res.out.actions
	case res.out.output != nil:
		out := r.limitOutput(p, res.out.output.Text)
		p.State = forge.StateCompleted
		p.Output = &out
		r.partEvent(forge.EventToolResponse, c.msg, p)
	case res.out.status == forge.TurnCancelled:
		r.toolError(c.msg, p, "the subagent was cancelled")
	default:
		r.toolError(c.msg, p, subagentFailure(res.out))
	}
	return nil
}

// noteChild adds the child's usage to the turn and records its thread
// state (kept in the snapshot so a paused child can be resumed).
func (r *run) noteChild(res childResult, callID string) {
	r.turn.Usage.Add(res.usage)
	if res.thread == "" {
		return
	}
	st := forge.ThreadState{ID: res.thread, ParentID: &r.threadID, Agent: res.agent, State: forge.ThreadFinished, CallID: callID}
	if len(res.out.actions) > 0 {
		st.State = forge.ThreadUserInputRequired
		for _, a := range res.out.actions {
			st.OpenCall = append(st.OpenCall, a.CallID)
		}
	}
	r.children[res.thread] = st
}

func subagentFailure(out outcome) string {
	msg := "the subagent failed"
	if out.err != nil {
		msg += ": " + out.err.Message
	}
	return msg
}

// resumeChildren runs the child threads that the resolutions answer (they
// paused in an earlier turn) and returns, per delegating call, a
// resolution carrying the child's result, plus the actions of children
// that pause again. Main-thread resolutions are returned unchanged.
func (r *run) resumeChildren() (main []resolution, actions []forge.RequiredAction, err error) {
	byThread := map[string][]resolution{}
	var order []string
	for _, res := range r.resolutions {
		if res.action.ThreadID == r.threadID {
			main = append(main, res)
			continue
		}
		if _, ok := byThread[res.action.ThreadID]; !ok {
			order = append(order, res.action.ThreadID)
		}
		byThread[res.action.ThreadID] = append(byThread[res.action.ThreadID], res)
	}
	for _, thread := range order {
		st, ok := r.baseThreads[thread]
		if !ok {
			return nil, nil, fmt.Errorf("thread %s is not a child thread of the turn chained from", thread)
		}
		agent, err := r.e.store.GetAgent(r.ctx, r.tenant, st.Agent)
		if err != nil {
			return nil, nil, fmt.Errorf("subagent %q: %w", st.Agent, err)
		}
		history, err := r.e.loadThread(r.ctx, r.tenant, r.session, *r.turn.PreviousTurnID, thread)
		if err != nil {
			return nil, nil, err
		}
		child := r.newChild(agent, thread, history)
		child.resolutions = byThread[thread]
		res := child.finishChild(child.loop())
		parentCall := r.findCall(st.CallID)
		if parentCall == nil {
			return nil, nil, fmt.Errorf("the call %s that delegated to thread %s is not in this branch", st.CallID, thread)
		}
		r.noteChild(res, st.CallID)
		if len(res.out.actions) > 0 {
			actions = append(actions, res.out.actions...)
			continue
		}
		in := forge.Input{Type: forge.InputToolResult, CallID: st.CallID}
		if res.out.output != nil {
			text := res.out.output.Text
			in.Output = &text
		} else {
			text := subagentFailure(res.out)
			in.Output, in.IsError = &text, true
		}
		main = append(main, resolution{input: in, action: forge.RequiredAction{
			Type: forge.ActionClientTool, CallID: st.CallID, ThreadID: r.threadID, Tool: parentCall.Tool, Arguments: parentCall.Arguments,
		}})
	}
	return main, actions, nil
}

// findCall returns the latest tool part of the thread's history for callID.
func (r *run) findCall(callID string) *forge.Part {
	for i := len(r.history) - 1; i >= 0; i-- {
		for _, p := range r.history[i].Parts {
			if p.Type == forge.PartTool && p.CallID == callID {
				return p
			}
		}
	}
	return nil
}

// loadThread reads a thread's messages along the branch ending at tip.
func (e *Engine) loadThread(ctx context.Context, tenant string, sess *forge.Session, tip, thread string) ([]*forge.Message, error) {
	return e.viewFrom(ctx, tenant, forge.MessageQuery{SessionID: sess.ID, TipTurnID: tip, ThreadID: thread}, nil)
}
