package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/forge-runtime/forge"
)

// outcome is how the loop ended.
type outcome struct {
	status  string
	err     *forge.TurnError
	actions []forge.RequiredAction
	output  *forge.TurnOutput
	// cancelReason is set when status is cancelled.
	cancelReason string
}

// execute runs the turn to its terminal write. It owns the run.
func (e *Engine) execute(r *run) {
	defer e.wg.Done()
	ctx, cancelTimeout := context.WithTimeoutCause(r.ctx, e.cfg.TurnTimeout, errTimeout)
	defer cancelTimeout()
	r.ctx = ctx

	stopCheckpoints := make(chan struct{})
	checkpointerDone := make(chan struct{})
	go func() {
		defer close(checkpointerDone)
		r.checkpointLoop(stopCheckpoints)
	}()

	r.applyAuthTokens()
	r.prepareTools()
	out := r.loop()

	close(stopCheckpoints)
	<-checkpointerDone
	r.finish(out)
	e.unregister(r)
	e.bus.EndTurn(r.session.ID, r.turn.ID)
	close(r.done)
}

func (r *run) cancelled() bool { return r.ctx.Err() != nil }

func (r *run) cancelledOutcome() outcome {
	reason := r.cancelReason()
	return outcome{status: forge.TurnCancelled, cancelReason: reason}
}

func (r *run) loop() outcome {
	if r.resolutions != nil {
		main, childActions, err := r.resumeChildren()
		if err != nil {
			return r.failure(err)
		}
		r.resolutions = main
		actions, err := r.applyResolutions()
		actions = append(childActions, actions...)
		if err != nil {
			return r.failure(err)
		}
		if r.cancelled() {
			return r.cancelledOutcome()
		}
		if len(actions) > 0 || len(r.authActions) > 0 {
			return outcome{status: forge.TurnDone, actions: append(actions, r.authActions...)}
		}
	}
	if len(r.authActions) > 0 {
		return outcome{status: forge.TurnDone, actions: r.authActions}
	}
	if r.compactOnly {
		sum, err := r.compact(compactManual)
		if err != nil {
			return r.compactFailure(err)
		}
		if sum == nil {
			return outcome{status: forge.TurnDone}
		}
		return outcome{status: forge.TurnDone, output: &forge.TurnOutput{MessageID: sum.ID, Text: textOf(sum)}}
	}
	for {
		if r.cancelled() {
			return r.cancelledOutcome()
		}
		// At most one compaction per step: before it when over the
		// threshold, else after a refusal as too long (then the step is
		// retried once).
		compacted := false
		if r.compactionEnabled() && r.overThreshold() {
			compacted = true
			if _, err := r.compact(compactThreshold); err != nil {
				return r.compactFailure(err)
			}
			if r.cancelled() {
				return r.cancelledOutcome()
			}
		}
		msg, calls, err := r.step()
		if err != nil && isOverflow(err) && !compacted && r.compactionEnabled() && !r.cancelled() {
			sum, cerr := r.compact(compactOverflow)
			if cerr != nil {
				return r.compactFailure(cerr)
			}
			if sum != nil {
				msg, calls, err = r.step()
			}
		}
		if err != nil {
			if r.cancelled() {
				return r.cancelledOutcome()
			}
			return r.failure(err)
		}
		if len(calls) == 0 {
			return outcome{status: forge.TurnDone, output: &forge.TurnOutput{MessageID: msg.ID, Text: textOf(msg)}}
		}
		if r.turn.Iterations >= r.agent.IterationLimit {
			for _, c := range calls {
				r.toolError(c.msg, c.part, "not run: the turn reached its iteration limit")
			}
			return outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: forge.CodeIterationLimit,
				Message: fmt.Sprintf("the agent used all %d model calls this turn allows; send a new message to continue", r.agent.IterationLimit)}}
		}
		actions := r.runCalls(calls)
		if r.cancelled() {
			return r.cancelledOutcome()
		}
		if len(actions) > 0 {
			return outcome{status: forge.TurnDone, actions: actions}
		}
	}
}

func (r *run) failure(err error) outcome {
	code := forge.CodeInternal
	var me *forge.ModelError
	if errors.As(err, &me) {
		code = forge.CodeModelError
		if me.ContextOverflow {
			code = forge.CodeContextOverflow
		}
	}
	if code == forge.CodeInternal {
		r.e.log.Error("turn failed", "turn", r.turn.ID, "err", err)
	}
	return outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: code, Message: err.Error()}}
}

func textOf(m *forge.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == forge.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// call is a tool call waiting to run or to be resolved.
type call struct {
	msg  *forge.Message
	part *forge.Part
	// action is set when the call pauses the turn.
	action *forge.RequiredAction
	// run is set when a server-side tool must run now.
	tool forge.Tool
}

// step makes one model call and records it as an assistant message.
func (r *run) step() (*forge.Message, []*call, error) {
	r.turn.Iterations++
	msg := r.newMessage(forge.RoleAssistant)
	msg.Model = r.agent.Model
	r.openStep(msg, r.turn.Iterations)

	model, modelID, err := r.e.models.Resolve(r.agent.Model)
	if err != nil {
		msg.Finish = forge.FinishError
		r.messageEvent(forge.EventMessageUpdated, msg)
		return msg, nil, &forge.ModelError{Provider: r.agent.Model, Message: err.Error()}
	}
	req := &forge.ModelRequest{
		Model:    modelID,
		System:   r.agent.Instructions,
		Messages: toModelMessages(r.modelHistory()),
		Tools:    r.toolDefs(),
		Params:   r.agent.ModelParams,
	}
	r.history = append(r.history, msg)
	var calls []*call
	err = r.stream(msg, model, req, r.turn.Iterations, func(toolCalls []forge.ToolCall) {
		calls = make([]*call, 0, len(toolCalls))
		for _, tc := range toolCalls {
			calls = append(calls, r.newCall(msg, tc))
		}
	})
	if err != nil {
		return msg, nil, err
	}
	return msg, calls, nil
}

// openStep adds msg's step-start part and queues message.created.
func (r *run) openStep(msg *forge.Message, iteration int) {
	start := r.newPart(msg, forge.PartStepStart)
	start.Data = mustJSON(map[string]int{"iteration": iteration})
	msg.Parts = append(msg.Parts, start)
	r.messageEvent(forge.EventMessageCreated, msg)
	r.partEvent(forge.EventStepStarted, msg, start)
}

// stream runs one model call into msg: its text and reasoning parts, then
// (through onCalls, when set) its tool calls, then its step-finish part and
// usage. On an error msg ends with finish error, its parts interrupted.
func (r *run) stream(msg *forge.Message, model forge.Model, req *forge.ModelRequest, iteration int, onCalls func([]forge.ToolCall)) error {
	var (
		text, reasoning *streamingPart
		toolCalls       []forge.ToolCall
		finish          *forge.Finish
		streamErr       error
	)
	open := func(typ string) *streamingPart {
		p := r.newPart(msg, typ)
		p.State = forge.StateStreaming
		msg.Parts = append(msg.Parts, p)
		r.partEvent(forge.EventModelMessage, msg, p)
		return r.startStreaming(p)
	}
	closePart := func(sp **streamingPart, state string, provider json.RawMessage) {
		if *sp == nil {
			return
		}
		r.endStreaming(*sp, state)
		if provider != nil {
			(*sp).part.Provider = provider
		}
		r.partEvent(forge.EventModelMessage, msg, (*sp).part)
		*sp = nil
	}
	for ev, err := range model.Stream(r.ctx, req) {
		if err != nil {
			streamErr = err
			break
		}
		slot, typ := &text, forge.PartText
		switch ev.Type {
		case forge.ReasoningStart, forge.ReasoningDelta, forge.ReasoningEnd:
			slot, typ = &reasoning, forge.PartReasoning
		}
		switch ev.Type {
		case forge.TextStart, forge.ReasoningStart:
			closePart(slot, forge.StateCompleted, nil)
			*slot = open(typ)
		case forge.TextDelta, forge.ReasoningDelta:
			if *slot == nil {
				*slot = open(typ)
			}
			streamErr = r.delta(*slot, msg.ThreadID, ev.Delta)
		case forge.TextEnd, forge.ReasoningEnd:
			closePart(slot, forge.StateCompleted, ev.Provider)
		case forge.ToolCallEvent:
			toolCalls = append(toolCalls, *ev.ToolCall)
		case forge.FinishEvent:
			finish = ev.Finish
		}
		if streamErr != nil {
			break
		}
	}
	if streamErr == nil && r.ctx.Err() != nil {
		streamErr = context.Cause(r.ctx)
	}
	if streamErr != nil {
		closePart(&text, forge.StateInterrupted, nil)
		closePart(&reasoning, forge.StateInterrupted, nil)
		msg.Finish = forge.FinishError
		r.messageEvent(forge.EventMessageUpdated, msg)
		return streamErr
	}
	closePart(&text, forge.StateCompleted, nil)
	closePart(&reasoning, forge.StateCompleted, nil)
	if finish == nil {
		finish = &forge.Finish{Reason: forge.FinishStop}
		if len(toolCalls) > 0 {
			finish.Reason = forge.FinishToolCalls
		}
	}
	if onCalls != nil {
		onCalls(toolCalls)
	}
	usage := finish.Usage
	r.turn.Usage.Add(usage)
	end := r.newPart(msg, forge.PartStepFinish)
	end.Data = mustJSON(map[string]any{"iteration": iteration, "finish": finish.Reason, "usage": usage})
	msg.Parts = append(msg.Parts, end)
	msg.Finish = finish.Reason
	msg.Usage = &usage
	r.partEvent(forge.EventStepFinished, msg, end)
	r.messageEvent(forge.EventMessageUpdated, msg)
	return nil
}

// newCall records a tool call from the model as a tool part and decides
// what happens to it: run now, pause for the client or an approval, or fail.
func (r *run) newCall(msg *forge.Message, tc forge.ToolCall) *call {
	p := r.newPart(msg, forge.PartTool)
	p.CallID = r.e.ids.New(forge.PrefixCall)
	p.Tool = tc.Name
	p.Provider = mustJSON(map[string]string{"call_id": tc.ID})
	c := &call{msg: msg, part: p}
	args := tc.Arguments
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) {
		p.Arguments = mustJSON(string(args))
		msg.Parts = append(msg.Parts, p)
		r.toolError(msg, p, fmt.Sprintf("the arguments are not valid JSON: %s; call the tool again with a JSON object", truncate(string(args), 200)))
		return c
	}
	p.Arguments = args
	msg.Parts = append(msg.Parts, p)

	spec, declared := r.agent.Tool(tc.Name)
	_, isMCP := r.extraTools[tc.Name]
	tool := r.tool(tc.Name)
	switch {
	case !(declared || isMCP) || (!spec.Client && tool == nil):
		if why := r.unavailable(tc.Name); why != "" {
			r.toolError(msg, p, why)
			return c
		}
		r.toolError(msg, p, fmt.Sprintf("unknown tool %q; the tools available are: %s", tc.Name, strings.Join(r.toolNames(), ", ")))
		return c
	}
	switch r.agent.Policy(tc.Name) {
	case forge.PolicyDeny:
		r.toolError(msg, p, fmt.Sprintf("the tool %q is denied by policy", tc.Name))
		return c
	case forge.PolicyAsk:
		c.action = &forge.RequiredAction{Type: forge.ActionApproval, CallID: p.CallID, ThreadID: msg.ThreadID, Tool: tc.Name, Arguments: args}
		p.State = forge.StatePending
	default:
		if spec.Client {
			c.action = &forge.RequiredAction{Type: forge.ActionClientTool, CallID: p.CallID, ThreadID: msg.ThreadID, Tool: tc.Name, Arguments: args}
			p.State = forge.StatePending
		} else {
			c.tool = tool
			p.State = forge.StateRunning
		}
	}
	r.partEvent(forge.EventToolCall, msg, p)
	return c
}

// toolError ends a call part with an error the model will see.
func (r *run) toolError(msg *forge.Message, p *forge.Part, text string) {
	if p.State == "" {
		p.State = forge.StatePending
		r.partEvent(forge.EventToolCall, msg, p)
	}
	p.State = forge.StateError
	p.Error = &text
	r.partEvent(forge.EventToolResponse, msg, p)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with values that always marshal
	}
	return b
}

// toolDefs is what the model is told about the agent's tools.
func (r *run) toolDefs() []forge.ToolDef {
	defs := make([]forge.ToolDef, 0, len(r.agent.Tools)+len(r.extraTools))
	for _, t := range r.agent.Tools {
		if _, ok := r.e.cfg.Capabilities[t.Name]; ok && t.BuiltIn {
			continue // its tools are among the extra tools
		}
		if tool, ok := r.tools[t.Name]; ok && !t.Client {
			defs = append(defs, tool.Def())
			continue
		}
		defs = append(defs, forge.ToolDef{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	for _, name := range slices.Sorted(maps.Keys(r.extraTools)) {
		defs = append(defs, r.extraTools[name].Def())
	}
	return defs
}

func (r *run) toolNames() []string {
	names := make([]string, 0, len(r.agent.Tools)+len(r.extraTools))
	for _, t := range r.agent.Tools {
		names = append(names, t.Name)
	}
	names = append(names, slices.Sorted(maps.Keys(r.extraTools))...)
	if len(names) == 0 {
		return []string{"(none)"}
	}
	return names
}
