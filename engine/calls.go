package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// callResult is a finished server-side call.
type callResult struct {
	c   *call
	res forge.ToolResult
	err error
	// child is set for a delegation.
	child *childResult
}

// runCalls runs the server-side calls of a step concurrently and returns
// the required actions of the calls that pause the turn. The calls'
// running state is durable before any of them starts: when that write
// fails, none runs (the turn then ends store_error).
func (th *thread) runCalls(calls []*call) []forge.RequiredAction {
	x := th.x
	var actions []forge.RequiredAction
	var toRun []*call
	for _, c := range calls {
		switch {
		case c.action != nil:
			actions = append(actions, *c.action)
		case c.run != nil:
			toRun = append(toRun, c)
		}
	}
	th.startSubtasks(toRun)
	if err := th.flush(); err != nil {
		for _, c := range toRun {
			th.toolError(c.part, "not run: the turn could not be saved before this call")
			th.endSubtask(c, forge.TurnErrored)
		}
		return actions
	}
	if len(toRun) == 0 {
		return actions
	}
	defer th.recordPatch(toRun)()
	// Tools get a context that outlives a cancel by ToolCancelWait: a running
	// call may finish and record its real result.
	toolCtx, cancelTools := context.WithCancel(context.WithoutCancel(x.ctx))
	defer cancelTools()
	results := make(chan callResult, len(toRun))
	// At most MaxParallelTools calls run at once; the others start in
	// their order as running ones end.
	next := 0
	start := func() {
		c := toRun[next]
		next++
		x.e.wg.Add(1)
		tool, callID := c.part.Tool, c.part.CallID
		go func() {
			defer x.e.wg.Done()
			observed := th.observeToolCall(c, tool, callID)
			switch c.run.kind {
			case delegation:
				child := th.delegate(c, c.run.sub, observed.context(nil))
				observed.ended(x.e, delegationOutcome(child.out), nil)
				results <- callResult{c: c, child: &child}
			default:
				res, err := callTool(toolCtx, c.run.tool, c.part)
				observed.ended(x.e, toolOutcome(toolCtx, res, err), err)
				results <- callResult{c: c, res: res, err: err}
			}
		}()
	}
	for next < len(toRun) && next < x.e.cfg.MaxParallelTools {
		start()
	}
	var deadline <-chan time.Time
	cancelled := x.ctx.Done()
	for remaining := len(toRun); remaining > 0; {
		select {
		case cr := <-results:
			remaining--
			if cr.child != nil {
				actions = append(actions, th.recordChild(cr.c, *cr.child)...)
			} else if a := th.recordResult(cr); a != nil {
				actions = append(actions, *a)
			}
			if next < len(toRun) && cancelled != nil {
				start()
			}
			// A failure is recorded; the loop ends the turn after the calls.
			_ = th.flush()
		case <-cancelled:
			cancelled = nil
			// Calls still waiting for their turn never start.
			for ; next < len(toRun); next++ {
				th.toolError(toRun[next].part, "not run: the turn was cancelled before this call started")
				th.endSubtask(toRun[next], forge.TurnCancelled)
				remaining--
			}
			_ = th.flush()
			timer := time.NewTimer(x.e.cfg.ToolCancelWait)
			defer timer.Stop()
			deadline = timer.C
		case <-deadline:
			cancelTools()
			for _, c := range toRun {
				if c.part.State == forge.StateRunning {
					th.toolError(c.part, "in_doubt: the turn was cancelled while this call ran; it may have had its effect")
					th.endSubtask(c, forge.TurnCancelled)
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

// toolOutcome classifies a tool call's end for the observer.
func toolOutcome(ctx context.Context, res forge.ToolResult, err error) string {
	var auth *forge.AuthRequiredError
	switch {
	case errors.As(err, &auth):
		return ToolAuthRequired
	case err != nil && ctx.Err() != nil:
		return ToolCancelled
	case err != nil || res.IsError:
		return ToolError
	}
	return ToolOK
}

// delegationOutcome classifies a delegation's end for the observer.
func delegationOutcome(out outcome) string {
	switch {
	case len(out.actions) > 0:
		return ToolPaused
	case out.status == forge.TurnCancelled:
		return ToolCancelled
	case out.status == forge.TurnDone:
		return ToolOK
	}
	return ToolError
}

func (th *thread) recordResult(cr callResult) *forge.RequiredAction {
	p := cr.c.part
	var auth *forge.AuthRequiredError
	switch {
	case errors.As(cr.err, &auth):
		// The server wants a (new) token: the call waits for it.
		p.State = forge.StatePending
		th.partEvent(forge.EventToolCall, p)
		return &forge.RequiredAction{Type: forge.ActionAuth, CallID: p.CallID, ThreadID: cr.c.msg.ThreadID,
			Tool: p.Tool, Arguments: p.Arguments, Server: auth.Server, AuthURL: auth.AuthURL}
	case cr.err != nil:
		th.toolError(p, th.limitOutput(p, cr.err.Error()))
	case cr.res.IsError:
		th.toolError(p, th.limitOutput(p, cr.res.Output))
	default:
		out := th.recordFiles(p, th.limitOutput(p, cr.res.Output), cr.res.Files)
		p.State = forge.StateCompleted
		p.Output = &out
		th.partEvent(forge.EventToolResponse, p)
	}
	return nil
}

// limitOutput returns what the model is shown of a tool's output: all of
// it, or its head and tail around a marker when it is longer than
// MaxToolOutput, in which case the whole output is kept on the part.
func (th *thread) limitOutput(p *forge.Part, out string) string {
	limit := th.x.e.cfg.MaxToolOutput
	if len(out) <= limit {
		return out
	}
	p.Data = mustJSON(forge.ToolOutputData{OutputBytes: len(out), FullOutput: out})
	head, tail := limit*3/4, limit/4
	return fmt.Sprintf("%s\n[output truncated: %d bytes omitted; the full output is kept on the tool part]\n%s",
		strings.ToValidUTF8(out[:head], ""), len(out)-head-tail, strings.ToValidUTF8(out[len(out)-tail:], ""))
}

// applyResolutions records the answers to the calls the previous turn left
// open, as a tool message of this turn, and runs the approved calls.
func (th *thread) applyResolutions() []forge.RequiredAction {
	msg := th.newMessage(forge.RoleTool)
	th.messageEvent(forge.EventMessageCreated, msg)
	calls := make([]*call, 0, len(th.resolutions))
	for _, res := range th.resolutions {
		a := res.action
		p := th.newPart(msg, forge.PartTool)
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
				th.toolError(p, reason)
				continue
			}
			spec, _ := th.agent.Tool(a.Tool)
			run := th.tools.lookup(a.Tool)
			switch {
			case spec.Client:
				c.action = &forge.RequiredAction{Type: forge.ActionClientTool, CallID: a.CallID, ThreadID: a.ThreadID, Tool: a.Tool, Arguments: a.Arguments}
				p.State = forge.StatePending
			case run == nil:
				th.toolError(p, fmt.Sprintf("the tool %q is not available in this agent version", a.Tool))
				continue
			default:
				c.run = run
				p.State = forge.StateRunning
			}
			th.partEvent(forge.EventToolCall, p)
		case forge.InputToolResult:
			p.State = forge.StateRunning
			th.partEvent(forge.EventToolCall, p)
			th.resumedSubtask(msg, res.subtask)
			if in.IsError {
				p.State = forge.StatePending // toolError emits the response
				th.toolError(p, *in.Output)
				continue
			}
			out := *in.Output
			p.State = forge.StateCompleted
			p.Output = &out
			th.partEvent(forge.EventToolResponse, p)
		case forge.InputAuth:
			// The token went to the MCP manager before tools were listed
			// (applyAuthTokens); it is never written anywhere.
			if a.Tool == "" {
				out := fmt.Sprintf("authorized MCP server %q", a.Server)
				p.State = forge.StateCompleted
				p.Output = &out
				th.partEvent(forge.EventToolResponse, p)
				continue
			}
			if c.run = th.tools.lookup(a.Tool); c.run == nil {
				th.toolError(p, fmt.Sprintf("the tools of MCP server %q are still unavailable", a.Server))
				continue
			}
			p.State = forge.StateRunning
			th.partEvent(forge.EventToolCall, p)
		default:
			th.toolError(p, fmt.Sprintf("%s resolutions are not supported for this call", in.Type))
		}
	}
	th.history = append(th.history, msg)
	return th.runCalls(calls)
}

// recordPatch tracks the sandbox's files when calls may change them, and
// returns a func that, after they ran, records what changed as a patch
// part of the step's message (with its event). When they changed files
// and the sandbox keeps workspace snapshots, the step's step-finish part
// gets the id of the snapshot kept (a message.updated event carries it);
// a snapshot that could not be kept leaves the step as it was.
func (th *thread) recordPatch(calls []*call) func() {
	sb := th.tools.sandbox
	if sb == nil || !slices.ContainsFunc(calls, func(c *call) bool { return c.run.inSandbox }) {
		return func() {}
	}
	log := th.x.e.log.With("session_id", th.x.session.ID)
	// The turn's context: a cancel ends a snapshot of a large workspace
	// at once (the patch of a cancelled step is then not recorded).
	ctx := th.x.ctx
	var changes func(context.Context, func() string) (forge.Patch, *forge.WorkspaceSnapshot, error)
	var err error
	if ss, ok := sb.(forge.SnapshotSandbox); ok {
		changes, err = ss.TrackSnapshot(ctx)
	} else {
		var plain func(context.Context) (forge.Patch, error)
		plain, err = sb.Track(ctx)
		changes = func(ctx context.Context, _ func() string) (forge.Patch, *forge.WorkspaceSnapshot, error) {
			p, err := plain(ctx)
			return p, nil, err
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("sandbox snapshot failed", "err", err)
		}
		return func() {}
	}
	return func() {
		patch, snap, err := changes(ctx, func() string { return th.x.e.ids.New(forge.PrefixSnapshot) })
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("sandbox diff failed", "err", err)
			}
			return
		}
		if patch.Empty() {
			return
		}
		msg := calls[0].msg
		p := th.newPart(msg, forge.PartPatch)
		p.Data = mustJSON(patch)
		msg.Parts = append(msg.Parts, p)
		th.partEvent(forge.EventPatch, p)
		if snap != nil {
			th.x.noteSnapshot(snap)
			th.markSnapshot(msg, snap)
		}
		_ = th.flush() // a failure is recorded; the loop ends the turn
	}
}

// markSnapshot records the workspace snapshot on the step-finish part of
// the step's message, which was written before its calls ran.
func (th *thread) markSnapshot(msg *forge.Message, snap *forge.WorkspaceSnapshot) {
	for i := len(msg.Parts) - 1; i >= 0; i-- {
		end := msg.Parts[i]
		if end.Type != forge.PartStepFinish {
			continue
		}
		var d forge.StepFinishData
		if err := json.Unmarshal(end.Data, &d); err != nil {
			return
		}
		d.Snapshot, d.SnapshotPartial = snap.ID, snap.Partial
		end.Data = mustJSON(d)
		end.UpdatedAt = th.x.e.clock.Now()
		th.putPart(end)
		th.messageEvent(forge.EventMessageUpdated, msg)
		return
	}
}
