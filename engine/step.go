package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/modelview"
)

// call is a tool call waiting to run or to be resolved.
type call struct {
	msg  *forge.Message
	part *forge.Part
	// action is set when the call pauses the turn.
	action *forge.RequiredAction
	// run is set when the server answers the call now.
	run *callable
	// child is a delegation's child thread, set when it starts.
	child *subtask
}

// step makes one model call and records it as an assistant message.
func (th *thread) step() (*forge.Message, []*call, error) {
	th.iterations++
	msg := th.newMessage(forge.RoleAssistant)
	msg.Model = th.agent.Model
	th.openStep(msg, th.iterations)

	model, modelID, err := th.x.e.models.Resolve(th.agent.Model)
	if err != nil {
		msg.Finish = forge.FinishError
		th.messageEvent(forge.EventMessageUpdated, msg)
		return msg, nil, &forge.ModelError{Provider: th.agent.Model, Message: err.Error()}
	}
	msgs, err := th.withFiles(th.modelMessages())
	if err != nil {
		msg.Finish = forge.FinishError
		th.messageEvent(forge.EventMessageUpdated, msg)
		return msg, nil, err
	}
	req := &forge.ModelRequest{
		Model:    modelID,
		System:   th.agent.Instructions,
		Messages: msgs,
		Tools:    th.toolDefs(),
		Params:   th.agent.ModelParams,
		// Every step asks for it: the model may call tools first.
		OutputSchema: th.outputSchema(),
	}
	th.history = append(th.history, msg)
	var calls []*call
	err = th.stream(msg, model, req, th.iterations, func(toolCalls []forge.ToolCall) {
		calls = make([]*call, 0, len(toolCalls))
		for _, tc := range toolCalls {
			calls = append(calls, th.newCall(msg, tc))
		}
	})
	if err != nil {
		return msg, nil, err
	}
	return msg, calls, nil
}

// openStep adds msg's step-start part and queues message.created.
func (th *thread) openStep(msg *forge.Message, iteration int) {
	start := th.newPart(msg, forge.PartStepStart)
	start.Data = mustJSON(forge.StepStartData{Iteration: iteration})
	msg.Parts = append(msg.Parts, start)
	th.messageEvent(forge.EventMessageCreated, msg)
	th.partEvent(forge.EventStepStarted, start)
}

// stream runs one model call into msg: its text and reasoning parts, then
// (through onCalls, when set) its tool calls, then its step-finish part and
// usage. On an error msg ends with finish error, its parts interrupted.
// A step that ends without the provider's usage (cancelled, cut, failed
// after output) gets an estimate, marked estimated.
func (th *thread) stream(msg *forge.Message, model forge.Model, req *forge.ModelRequest, iteration int, onCalls func([]forge.ToolCall)) error {
	x := th.x
	var (
		text, reasoning *streamingPart
		toolCalls       []forge.ToolCall
		finish          *forge.Finish
		streamErr       error
		streamed        int // bytes of text and reasoning received
	)
	open := func(typ string) *streamingPart {
		p := th.newPart(msg, typ)
		p.State = forge.StateStreaming
		msg.Parts = append(msg.Parts, p)
		th.partEvent(forge.EventModelMessage, p)
		sp := x.streams.start(p, th.id)
		th.w.opened = append(th.w.opened, sp)
		return sp
	}
	// A provider that reports its waits lets the deltas it streams in one
	// burst share one write: they are written when it waits for the model
	// (see lingerer); when that write fails, the call is aborted.
	ctx, abort := context.WithCancelCause(x.ctx)
	defer abort(nil)
	th.heldErr = nil
	lw := &lingerer{th: th, linger: x.e.cfg.DeltaLinger, abort: abort}
	defer lw.settle()
	waits := &forge.StreamWaits{Wait: lw.wait}
	ctx = forge.WithStreamWaits(ctx, waits)
	closePart := func(sp **streamingPart, state string, provider json.RawMessage) {
		if *sp == nil {
			return
		}
		x.streams.end(*sp, state)
		if provider != nil {
			(*sp).part.Provider = provider
		}
		th.partEvent(forge.EventModelMessage, (*sp).part)
		*sp = nil
	}
	// Only a step offers tools; a summary call (compaction) does not.
	observed := th.observeModelCall(req, onCalls == nil)
	for ev, err := range model.Stream(ctx, req) {
		lw.settle()
		if th.heldErr != nil {
			streamErr = th.heldErr
			break
		}
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
			observed.output(x.e.clock)
			if *slot == nil {
				*slot = open(typ)
			}
			delta := ev.Delta
			fit, over := x.output.take(len(delta), streamed)
			if over != nil {
				// What fits of the delta is kept: the part ends
				// interrupted with the text up to the limit.
				delta = cutUTF8(delta, fit)
			}
			if delta != "" {
				streamed += len(delta)
				// Held back into the next write when the provider tells
				// when it waits (a burst's end), on any bus: over Redis as
				// far as thread.beforeStored allows.
				streamErr = th.delta(*slot, delta, waits.Reported())
			}
			if streamErr == nil && over != nil {
				streamErr = over
			}
		case forge.TextEnd, forge.ReasoningEnd:
			closePart(slot, forge.StateCompleted, ev.Provider)
		case forge.ToolCallEvent:
			observed.output(x.e.clock)
			n := len(ev.ToolCall.Name) + len(ev.ToolCall.Arguments)
			if _, over := x.output.take(n, streamed); over != nil {
				streamErr = over // a call is not cut: it is dropped
				break
			}
			toolCalls = append(toolCalls, *ev.ToolCall)
			streamed += n
		case forge.FinishEvent:
			finish = ev.Finish
		}
		if streamErr != nil {
			break
		}
	}
	lw.settle()
	if streamErr == nil && th.heldErr != nil {
		streamErr = th.heldErr
	}
	if streamErr == nil && x.ctx.Err() != nil {
		streamErr = context.Cause(x.ctx)
	}
	if streamErr != nil {
		closePart(&text, forge.StateInterrupted, nil)
		closePart(&reasoning, forge.StateInterrupted, nil)
		msg.Finish = forge.FinishError
		// The server read the prompt unless it refused the call before
		// answering; a cancel or an error after output used tokens.
		if x.cancelled() || streamed > 0 {
			u := estimateUsage(req, streamed)
			msg.Usage = &u
			th.usage.Add(u)
		}
		var used forge.Usage
		if msg.Usage != nil {
			used = *msg.Usage
		}
		// A cut step closes like any other: its step-finish holds the
		// estimate, marked so.
		end := th.newPart(msg, forge.PartStepFinish)
		end.Data = mustJSON(forge.StepFinishData{Iteration: iteration, Finish: forge.FinishError, Usage: used, Estimated: true})
		msg.Parts = append(msg.Parts, end)
		th.partEvent(forge.EventStepFinished, end)
		th.messageEvent(forge.EventMessageUpdated, msg)
		x.output.ended(used)
		observed.ended(th, forge.FinishError, used, streamErr)
		return streamErr
	}
	closePart(&text, forge.StateCompleted, nil)
	closePart(&reasoning, forge.StateCompleted, nil)
	estimated := finish == nil
	if finish == nil {
		// The stream ended without a finish: cut. Estimate its usage.
		finish = &forge.Finish{Reason: forge.FinishStop, Usage: estimateUsage(req, streamed)}
		if len(toolCalls) > 0 {
			finish.Reason = forge.FinishToolCalls
		}
	}
	if onCalls != nil {
		onCalls(toolCalls)
	}
	usage := finish.Usage
	th.usage.Add(usage)
	x.output.ended(usage)
	end := th.newPart(msg, forge.PartStepFinish)
	end.Data = mustJSON(forge.StepFinishData{Iteration: iteration, Finish: finish.Reason, Usage: usage, Estimated: estimated})
	msg.Parts = append(msg.Parts, end)
	msg.Finish = finish.Reason
	msg.Usage = &usage
	th.partEvent(forge.EventStepFinished, end)
	th.messageEvent(forge.EventMessageUpdated, msg)
	observed.ended(th, finish.Reason, usage, nil)
	return nil
}

// estimateUsage estimates a model call the provider reported no usage for:
// the request and the streamed output at about 4 characters a token.
func estimateUsage(req *forge.ModelRequest, streamed int) forge.Usage {
	return forge.Usage{
		InputTokens:  modelview.EstimateRequestTokens(req),
		OutputTokens: modelview.Tokens(int64(streamed)),
		Estimated:    true,
	}
}

// providerCallID is the opaque provider state of a tool part: the call id
// the provider gave, which is sent back with the result.
type providerCallID struct {
	CallID string `json:"call_id"`
}

// newCall records a tool call from the model as a tool part and decides
// what happens to it: run now, pause for the client or an approval, or fail.
func (th *thread) newCall(msg *forge.Message, tc forge.ToolCall) *call {
	p := th.newPart(msg, forge.PartTool)
	p.CallID = th.x.e.ids.New(forge.PrefixCall)
	p.Tool = tc.Name
	p.Provider = mustJSON(providerCallID{CallID: tc.ID})
	c := &call{msg: msg, part: p}
	args := tc.Arguments
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) {
		p.Arguments = mustJSON(string(args))
		msg.Parts = append(msg.Parts, p)
		th.toolError(p, fmt.Sprintf("the arguments are not valid JSON: %s; call the tool again with a JSON object", truncate(string(args), 200)))
		return c
	}
	p.Arguments = args
	msg.Parts = append(msg.Parts, p)

	spec, declared := th.agent.Tool(tc.Name)
	_, extra := th.tools.extra[tc.Name]
	run := th.tools.lookup(tc.Name)
	if !(declared || extra) || (!spec.Client && run == nil) {
		if why := th.unavailable(tc.Name); why != "" {
			th.toolError(p, why)
			return c
		}
		th.toolError(p, fmt.Sprintf("unknown tool %q; the tools available are: %s", tc.Name, strings.Join(th.toolNames(), ", ")))
		return c
	}
	switch th.agent.Policy(tc.Name) {
	case forge.PolicyDeny:
		th.toolError(p, fmt.Sprintf("the tool %q is denied by policy", tc.Name))
		return c
	case forge.PolicyAsk:
		c.action = &forge.RequiredAction{Type: forge.ActionApproval, CallID: p.CallID, ThreadID: msg.ThreadID, Tool: tc.Name, Arguments: args}
		p.State = forge.StatePending
	default:
		if spec.Client {
			c.action = &forge.RequiredAction{Type: forge.ActionClientTool, CallID: p.CallID, ThreadID: msg.ThreadID, Tool: tc.Name, Arguments: args}
			p.State = forge.StatePending
		} else {
			c.run = run
			p.State = forge.StateRunning
		}
	}
	th.partEvent(forge.EventToolCall, p)
	return c
}

// toolError ends a call part with an error the model will see.
func (th *thread) toolError(p *forge.Part, text string) {
	if p.State == "" {
		p.State = forge.StatePending
		th.partEvent(forge.EventToolCall, p)
	}
	p.State = forge.StateError
	p.Error = &text
	th.partEvent(forge.EventToolResponse, p)
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
