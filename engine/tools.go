package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/mcp"
)

// toolResult is a finished server-side call.
type toolResult struct {
	c   *call
	res forge.ToolResult
	err error
	// child is set for a subagent delegation.
	child *childResult
}

// runCalls runs the server-side calls of a step concurrently and returns
// the required actions of the calls that pause the turn.
func (r *run) runCalls(calls []*call) []forge.RequiredAction {
	var actions []forge.RequiredAction
	var toRun []*call
	for _, c := range calls {
		switch {
		case c.action != nil:
			actions = append(actions, *c.action)
		case c.tool != nil:
			toRun = append(toRun, c)
		}
	}
	// The running state is durable before any side effect happens.
	if err := r.flush(nil); err != nil {
		r.e.log.Warn("flush before tools failed", "turn", r.turn.ID, "err", err)
	}
	if len(toRun) == 0 {
		return actions
	}
	defer r.recordPatch(toRun)()
	// Tools get a context that outlives a cancel by ToolCancelWait: a running
	// call may finish and record its real result.
	toolCtx, cancelTools := context.WithCancel(context.WithoutCancel(r.ctx))
	defer cancelTools()
	results := make(chan toolResult, len(toRun))
	for _, c := range toRun {
		r.e.wg.Add(1)
		go func() {
			defer r.e.wg.Done()
			if st, ok := c.tool.(*subagentTool); ok {
				child := r.delegate(c, st.agent)
				results <- toolResult{c: c, child: &child}
				return
			}
			res, err := callTool(toolCtx, c.tool, c.part)
			results <- toolResult{c: c, res: res, err: err}
		}()
	}
	var deadline <-chan time.Time
	cancelled := r.ctx.Done()
	for remaining := len(toRun); remaining > 0; {
		select {
		case tr := <-results:
			remaining--
			if tr.child != nil {
				actions = append(actions, r.recordChild(tr.c, *tr.child)...)
			} else if a := r.recordResult(tr); a != nil {
				actions = append(actions, *a)
			}
			if err := r.flush(nil); err != nil {
				r.e.log.Warn("flush tool result failed", "turn", r.turn.ID, "err", err)
			}
		case <-cancelled:
			cancelled = nil
			timer := time.NewTimer(r.e.cfg.ToolCancelWait)
			defer timer.Stop()
			deadline = timer.C
		case <-deadline:
			cancelTools()
			for _, c := range toRun {
				if c.part.State == forge.StateRunning {
					r.toolError(c.msg, c.part, "in_doubt: the turn was cancelled while this call ran; it may have had its effect")
				}
			}
			return actions
		}
	}
	return actions
}

func callTool(ctx context.Context, t forge.Tool, p *forge.Part) (res forge.ToolResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the tool panicked: %v", v)
		}
	}()
	return t.Call(ctx, p.Arguments)
}

func (r *run) recordResult(tr toolResult) *forge.RequiredAction {
	p := tr.c.part
	var auth *mcp.AuthRequiredError
	switch {
	case errors.As(tr.err, &auth):
		// The server wants a (new) token: the call waits for it.
		p.State = forge.StatePending
		r.partEvent(forge.EventToolCall, tr.c.msg, p)
		return &forge.RequiredAction{Type: forge.ActionAuth, CallID: p.CallID, ThreadID: tr.c.msg.ThreadID,
			Tool: p.Tool, Arguments: p.Arguments, Server: auth.Server, AuthURL: auth.AuthURL}
	case tr.err != nil:
		r.toolError(tr.c.msg, p, r.limitOutput(p, tr.err.Error()))
	case tr.res.IsError:
		r.toolError(tr.c.msg, p, r.limitOutput(p, tr.res.Output))
	default:
		out := r.limitOutput(p, tr.res.Output)
		p.State = forge.StateCompleted
		p.Output = &out
		r.partEvent(forge.EventToolResponse, tr.c.msg, p)
	}
	return nil
}

// limitOutput returns what the model is shown of a tool's output: all of
// it, or its head and tail around a marker when it is longer than
// MaxToolOutput, in which case the whole output is kept on the part.
func (r *run) limitOutput(p *forge.Part, out string) string {
	limit := r.e.cfg.MaxToolOutput
	if len(out) <= limit {
		return out
	}
	p.Data = mustJSON(map[string]any{"output_bytes": len(out), "full_output": out})
	head, tail := limit*3/4, limit/4
	return fmt.Sprintf("%s\n[output truncated: %d bytes omitted; the full output is kept on the tool part]\n%s",
		strings.ToValidUTF8(out[:head], ""), len(out)-head-tail, strings.ToValidUTF8(out[len(out)-tail:], ""))
}

// applyResolutions records the answers to the calls the previous turn left
// open, as a tool message of this turn, and runs the approved calls.
func (r *run) applyResolutions() ([]forge.RequiredAction, error) {
	msg := r.newMessage(forge.RoleTool)
	r.messageEvent(forge.EventMessageCreated, msg)
	calls := make([]*call, 0, len(r.resolutions))
	for _, res := range r.resolutions {
		a := res.action
		p := r.newPart(msg, forge.PartTool)
		p.CallID, p.Tool, p.Arguments = a.CallID, a.Tool, a.Arguments
		msg.Parts = append(msg.Parts, p)
		c := &call{msg: msg, part: p}
		calls = append(calls, c)
		in := res.input
		switch in.Type {
		case forge.InputApproval:
			if !*in.Approved {
				reason := "the user denied this call"
				if in.Reason != "" {
					reason += ": " + in.Reason
				}
				r.toolError(msg, p, reason)
				continue
			}
			spec, _ := r.agent.Tool(a.Tool)
			tool := r.tool(a.Tool)
			switch {
			case spec.Client:
				c.action = &forge.RequiredAction{Type: forge.ActionClientTool, CallID: a.CallID, ThreadID: a.ThreadID, Tool: a.Tool, Arguments: a.Arguments}
				p.State = forge.StatePending
			case tool == nil:
				r.toolError(msg, p, fmt.Sprintf("the tool %q is not available in this agent version", a.Tool))
				continue
			default:
				c.tool = tool
				p.State = forge.StateRunning
			}
			r.partEvent(forge.EventToolCall, msg, p)
		case forge.InputToolResult:
			p.State = forge.StateRunning
			r.partEvent(forge.EventToolCall, msg, p)
			if in.IsError {
				p.State = forge.StatePending // toolError emits the response
				r.toolError(msg, p, *in.Output)
				continue
			}
			out := *in.Output
			p.State = forge.StateCompleted
			p.Output = &out
			r.partEvent(forge.EventToolResponse, msg, p)
		case forge.InputAuth:
			// The token went to the MCP manager before tools were listed
			// (applyAuthTokens); it is never written anywhere.
			if a.Tool == "" {
				out := fmt.Sprintf("authorized MCP server %q", a.Server)
				p.State = forge.StateCompleted
				p.Output = &out
				r.partEvent(forge.EventToolResponse, msg, p)
				continue
			}
			if c.tool = r.tool(a.Tool); c.tool == nil {
				r.toolError(msg, p, fmt.Sprintf("the tools of MCP server %q are still unavailable", a.Server))
				continue
			}
			p.State = forge.StateRunning
			r.partEvent(forge.EventToolCall, msg, p)
		default:
			r.toolError(msg, p, fmt.Sprintf("%s resolutions are not supported for this call", in.Type))
		}
	}
	r.history = append(r.history, msg)
	return r.runCalls(calls), nil
}

// recordPatch snapshots the sandbox when calls may change files, and
// returns a func that, after they ran, records what changed as a patch
// part of the step's message (with its event).
func (r *run) recordPatch(calls []*call) func() {
	if r.sandbox == nil || !slices.ContainsFunc(calls, func(c *call) bool { return sandboxTools[c.part.Tool] }) {
		return func() {}
	}
	before, err := r.sandbox.Snapshot()
	if err != nil {
		r.e.log.Warn("sandbox snapshot failed", "session", r.session.ID, "err", err)
		return func() {}
	}
	return func() {
		patch, _, err := r.sandbox.Diff(before)
		if err != nil {
			r.e.log.Warn("sandbox diff failed", "session", r.session.ID, "err", err)
			return
		}
		if patch.Empty() {
			return
		}
		msg := calls[0].msg
		p := r.newPart(msg, forge.PartPatch)
		p.Data = mustJSON(patch)
		msg.Parts = append(msg.Parts, p)
		r.partEvent(forge.EventPatch, msg, p)
		if err := r.flush(nil); err != nil {
			r.e.log.Warn("flush patch failed", "turn", r.turn.ID, "err", err)
		}
	}
}
