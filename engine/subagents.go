package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// subagentPrefix names the tool that delegates to a subagent.
const subagentPrefix = parts.SubagentPrefix

var delegationSchema = json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","description":"What the agent should do, with everything it needs to know."}},"required":["task"]}`)

// delegationTo is the callable through which the model hands a task to
// agent: a call runs a child thread of the caller.
func delegationTo(agent *forge.Agent) *callable {
	desc := fmt.Sprintf("Delegates a task to the %q agent, which works on it on its own and answers with its final text.", agent.Name)
	if agent.Instructions != "" {
		desc += " Its instructions: " + truncate(agent.Instructions, 300)
	}
	return &callable{kind: delegation, sub: agent,
		def: forge.ToolDef{Name: subagentPrefix + agent.Name, Description: desc, InputSchema: delegationSchema}}
}

// prepareSubagents offers the agent's subagents while the delegation depth
// allows.
func (th *thread) prepareSubagents() {
	x := th.x
	if th.depth >= x.e.cfg.SubagentDepth {
		return
	}
	for _, name := range th.agent.Subagents {
		a, err := x.e.store.GetAgent(x.ctx, x.tenant, name)
		if err != nil {
			x.e.log.Warn("subagent unavailable", "session_id", x.session.ID, "agent", name, "err", err)
			continue
		}
		c := delegationTo(a)
		th.tools.extra[c.def.Name] = c
	}
}

// addAgentParts adds to msg, a user message of th with text, an agent part
// per @mention of one of th's subagents (parts.Mentions), which asks the
// model to delegate to it. Only a direct session's messages have them (a
// forum's copies carry their own), and only where th may delegate.
func (th *thread) addAgentParts(msg *forge.Message, text string) {
	if th.x.session.Kind != forge.KindDirect || th.depth >= th.x.e.cfg.SubagentDepth {
		return
	}
	for _, d := range parts.Mentions(text, th.agent.Subagents) {
		p := th.newPart(msg, forge.PartAgent)
		p.State, p.Data = forge.StateCompleted, mustJSON(d)
		msg.Parts = append(msg.Parts, p)
	}
}

// newChild returns the executor of a child thread of th running agent, in
// the same turn: it shares the turn, its cancellation and its
// checkpointer, and keeps its own messages, writes and iteration count.
func (th *thread) newChild(agent *forge.Agent, threadID string, history []*forge.Message) *thread {
	c := th.x.newThread(threadID, agent, th.depth+1, history)
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

// subtask is a delegation's child thread and the subtask part that
// records it on the message of the call.
type subtask struct {
	thread string
	part   *forge.Part
	data   forge.SubtaskData
}

// startSubtasks gives each delegation among calls its child thread's id
// and a running subtask part (one message.updated per message), written
// with the calls' running state before any of them starts. A delegation
// without a task starts no thread and has none.
func (th *thread) startSubtasks(calls []*call) {
	var msgs []*forge.Message
	for _, c := range calls {
		if c.run.kind != delegation {
			continue
		}
		var in struct {
			Task string `json:"task"`
		}
		if json.Unmarshal(c.part.Arguments, &in) != nil || in.Task == "" {
			continue
		}
		id := th.x.e.ids.New(forge.PrefixThread)
		st := &subtask{thread: id, part: th.newPart(c.msg, forge.PartSubtask),
			data: forge.SubtaskData{Agent: c.run.sub.Name, ThreadID: id, CallID: c.part.CallID, Prompt: in.Task, Status: forge.TurnRunning}}
		st.part.State, st.part.Data = forge.StateRunning, mustJSON(st.data)
		c.child = st
		c.msg.Parts = append(c.msg.Parts, st.part)
		th.putPart(st.part)
		if !slices.Contains(msgs, c.msg) {
			msgs = append(msgs, c.msg)
		}
	}
	for _, m := range msgs {
		th.messageEvent(forge.EventMessageUpdated, m)
	}
}

// endSubtask records the end of c's child thread, status, on its subtask
// part (the same part), with message.updated. A delegation that started
// no thread, or whose part has ended, changes nothing.
func (th *thread) endSubtask(c *call, status string) {
	st := c.child
	if st == nil || st.part.State != forge.StateRunning {
		return
	}
	st.data.Status = status
	st.part.State, st.part.Data = forge.StateCompleted, mustJSON(st.data)
	st.part.UpdatedAt = th.x.e.clock.Now()
	th.putPart(st.part)
	th.messageEvent(forge.EventMessageUpdated, c.msg)
}

// resumedSubtask records how a child resumed in this turn ended, d, as a
// subtask part of msg, the tool message that carries its result: the
// message that delegated is an earlier turn's, whose rows never change
// (other branches may fork from it), as a client tool's result joins the
// resuming turn's tool message. Nothing for a nil d.
func (th *thread) resumedSubtask(msg *forge.Message, d *forge.SubtaskData) {
	if d == nil {
		return
	}
	p := th.newPart(msg, forge.PartSubtask)
	p.State, p.Data = forge.StateCompleted, mustJSON(d)
	msg.Parts = append(msg.Parts, p)
	th.putPart(p)
	th.messageEvent(forge.EventMessageUpdated, msg)
}

// subtaskStatus is a subtask's status for a child's end: done,
// user-input-required when it paused, else the child's status (errored,
// cancelled).
func subtaskStatus(out outcome) string {
	switch {
	case len(out.actions) > 0:
		return forge.ThreadUserInputRequired
	case out.output != nil:
		return forge.TurnDone
	}
	return out.status
}

// delegate runs the child thread of call c (a delegation, started by
// startSubtasks); its calls are observed in obs (nil: the turn's context).
func (th *thread) delegate(c *call, agent *forge.Agent, obs context.Context) childResult {
	if c.child == nil {
		return childResult{out: outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: forge.CodeToolError,
			Message: `a subagent needs {"task": "..."}`}}}
	}
	id := c.child.thread
	child := th.x.newThread(id, agent, th.depth+1, nil)
	child.obsParent = obs
	child.event(forge.EventThreadCreated, id, forge.ThreadCreatedData{
		ThreadID: id, ParentThreadID: th.id, Agent: agent.Name, CallID: c.part.CallID,
	})
	child.prepareTools()
	m := child.newMessage(forge.RoleUser)
	p := child.newPart(m, forge.PartText)
	p.Text, p.State = c.child.data.Prompt, forge.StateCompleted
	m.Parts = append(m.Parts, p)
	child.messageEvent(forge.EventMessageCreated, m)
	child.putPart(p)
	child.history = append(child.history, m)
	return child.finishChild(child.loop())
}

// finishChild records thread.done (unless the child pauses) and flushes
// the child's writes.
func (th *thread) finishChild(out outcome) childResult {
	if len(out.actions) == 0 {
		data := forge.ThreadDoneData{ThreadID: th.id, Status: out.status, Error: out.err}
		if out.output != nil {
			text := out.output.Text
			data.Result, data.Error = &text, nil
		}
		th.event(forge.EventThreadDone, th.id, data)
	}
	if err := th.flush(); err != nil && !errors.Is(err, forge.ErrTurnEnded) {
		th.x.e.log.Warn("flush child thread failed", "session_id", th.x.session.ID, "thread", th.id, "err", err)
	}
	return childResult{thread: th.id, agent: th.agent.Name, out: out, usage: th.usage}
}

// recordChild turns a child's end into the delegating call's result, or
// into the actions that pause the turn.
func (th *thread) recordChild(c *call, res childResult) []forge.RequiredAction {
	p := c.part
	th.noteChild(res, p.CallID)
	th.endSubtask(c, subtaskStatus(res.out))
	switch {
	case len(res.out.actions) > 0:
		p.State = forge.StatePending
		th.partEvent(forge.EventToolCall, p)
		return res.out.actions
	case res.out.output != nil:
		out := th.limitOutput(p, res.out.output.Text)
		p.State = forge.StateCompleted
		p.Output = &out
		th.partEvent(forge.EventToolResponse, p)
	case res.out.status == forge.TurnCancelled:
		th.toolError(p, "the subagent was cancelled")
	default:
		th.toolError(p, subagentFailure(res.out))
	}
	return nil
}

// noteChild adds the child's usage to th's and records the child's state
// (kept in the snapshot so a paused child can be resumed).
func (th *thread) noteChild(res childResult, callID string) {
	th.usage.Add(res.usage)
	if res.thread == "" {
		return
	}
	parent := th.id
	st := forge.ThreadState{ID: res.thread, ParentID: &parent, Agent: res.agent, State: forge.ThreadFinished, CallID: callID}
	if len(res.out.actions) > 0 {
		st.State = forge.ThreadUserInputRequired
		for _, a := range res.out.actions {
			st.OpenCall = append(st.OpenCall, a.CallID)
		}
	}
	th.children[res.thread] = st
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
// that pause again. Resolutions of th's own calls are returned unchanged.
func (th *thread) resumeChildren() (own []resolution, actions []forge.RequiredAction, err error) {
	x := th.x
	byThread := map[string][]resolution{}
	var order []string
	for _, res := range th.resolutions {
		if res.action.ThreadID == th.id {
			own = append(own, res)
			continue
		}
		if _, ok := byThread[res.action.ThreadID]; !ok {
			order = append(order, res.action.ThreadID)
		}
		byThread[res.action.ThreadID] = append(byThread[res.action.ThreadID], res)
	}
	for _, id := range order {
		st, ok := x.base.Threads[id]
		if !ok {
			return nil, nil, fmt.Errorf("thread %s is not a child thread of the turn chained from", id)
		}
		agent, err := x.e.store.GetAgent(x.ctx, x.tenant, st.Agent)
		if err != nil {
			return nil, nil, fmt.Errorf("subagent %q: %w", st.Agent, err)
		}
		history, err := x.e.loadThread(x.ctx, x.tenant, x.session, *x.turn.PreviousTurnID, id)
		if err != nil {
			return nil, nil, err
		}
		child := th.newChild(agent, id, history)
		child.resolutions = byThread[id]
		res := child.finishChild(child.loop())
		parentCall := th.findCall(st.CallID)
		if parentCall == nil {
			return nil, nil, fmt.Errorf("the call %s that delegated to thread %s is not in this branch", st.CallID, id)
		}
		th.noteChild(res, st.CallID)
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
		var task struct {
			Task string `json:"task"`
		}
		_ = json.Unmarshal(parentCall.Arguments, &task)
		own = append(own, resolution{input: in, action: forge.RequiredAction{
			Type: forge.ActionClientTool, CallID: st.CallID, ThreadID: th.id, Tool: parentCall.Tool, Arguments: parentCall.Arguments,
		}, subtask: &forge.SubtaskData{Agent: st.Agent, ThreadID: id, CallID: st.CallID, Prompt: task.Task, Status: subtaskStatus(res.out)}})
	}
	return own, actions, nil
}

// findCall returns the latest tool part of the thread's history for callID.
func (th *thread) findCall(callID string) *forge.Part {
	for i := len(th.history) - 1; i >= 0; i-- {
		for _, p := range th.history[i].Parts {
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
