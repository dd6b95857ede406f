package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
)

// outcome is how a thread's loop ended.
type outcome struct {
	status  string
	err     *forge.TurnError
	actions []forge.RequiredAction
	output  *forge.TurnOutput
	// cancelReason is set when status is cancelled.
	cancelReason string
}

// execute runs the turn to its terminal write. It owns the execution.
func (e *Engine) execute(x *execution) {
	defer e.wg.Done()
	ctx, cancelTimeout := context.WithTimeoutCause(x.ctx, e.cfg.TurnTimeout, errTimeout)
	defer cancelTimeout()
	x.ctx = ctx

	th := x.main
	if !x.speculative() && !x.awaitBegun() {
		x.refuseSteers()
		e.unregister(x)
		x.freeQuota()
		x.markEnded()
		close(x.done)
		return
	}
	th.applyAuthTokens()
	th.prepareTools()
	out := th.loop()
	x.refuseSteers() // too late for this turn: they run as the next

	x.stopCheckpoints()
	created := x.awaitBegun()
	if created {
		x.finish(out)
		x.reportEnd()
	} else {
		x.observeNotCreated()
	}
	e.unregister(x)
	x.freeQuota() // landed freed it already, unless the terminal write failed
	x.markEnded()
	close(x.done)
	if created && !x.lost.Load() && (!x.noneQueued.Load() || x.enqueued.Load()) {
		// The session's next queued turn, if any, starts (API.md, "Busy
		// sessions"). A turn lost to another replica is that replica's
		// to follow. (enqueued is read after unregister: a request that
		// queues a turn later finds none running, and starts it itself.)
		e.kickQueue(x.tenant, x.session.ID)
	}
}

func (th *thread) cancelledOutcome() outcome {
	return outcome{status: forge.TurnCancelled, cancelReason: th.x.cancelReason()}
}

// loop runs the thread's state machine (DESIGN.md, the turn loop) until it
// finishes, pauses for input, fails or is cancelled.
func (th *thread) loop() outcome {
	x := th.x
	if th.resolutions != nil {
		main, childActions, err := th.resumeChildren()
		if err != nil {
			return th.failure(err)
		}
		th.resolutions = main
		actions := append(childActions, th.applyResolutions()...)
		if err := x.failedWrite(); err != nil {
			return th.failure(err)
		}
		if x.cancelled() {
			return th.cancelledOutcome()
		}
		if len(actions) > 0 || len(th.tools.authActions) > 0 {
			return outcome{status: forge.TurnDone, actions: append(actions, th.tools.authActions...)}
		}
	}
	if len(th.tools.authActions) > 0 {
		return outcome{status: forge.TurnDone, actions: th.tools.authActions}
	}
	if x.compactOnly {
		sum, err := th.compact(compactManual)
		if err != nil {
			return th.compactFailure(err)
		}
		if sum == nil {
			return outcome{status: forge.TurnDone}
		}
		return outcome{status: forge.TurnDone, output: &forge.TurnOutput{MessageID: sum.ID, Text: textOf(sum)}}
	}
	for {
		if err := x.failedWrite(); err != nil {
			return th.failure(err)
		}
		if x.cancelled() {
			return th.cancelledOutcome()
		}
		if err := x.output.reached(); err != nil {
			// Reached in this thread's last call, or in a child's.
			return th.failure(err)
		}
		// At most one compaction per step: before it when over the
		// threshold, else after a refusal as too long (then the step is
		// retried once).
		compacted := false
		if th.compactionEnabled() && th.overThreshold() {
			compacted = true
			if _, err := th.compact(compactThreshold); err != nil {
				return th.compactFailure(err)
			}
			if x.cancelled() {
				return th.cancelledOutcome()
			}
		}
		th.takeSteers() // if_busy steer: messages sent meanwhile join here
		msg, calls, err := th.step()
		if err != nil && isOverflow(err) && !compacted && th.compactionEnabled() && !x.cancelled() {
			sum, cerr := th.compact(compactOverflow)
			if cerr != nil {
				return th.compactFailure(cerr)
			}
			if sum != nil {
				msg, calls, err = th.step()
			}
		}
		if err != nil {
			if x.cancelled() {
				return th.cancelledOutcome()
			}
			return th.failure(err)
		}
		if len(calls) == 0 {
			if out, done := th.checkAnswer(msg); done {
				return out
			}
			continue
		}
		if err := x.output.reached(); err != nil {
			for _, c := range calls {
				th.toolError(c.part, "not run: the turn reached its output limit")
			}
			return th.failure(err)
		}
		if th.iterations >= th.agent.IterationLimit {
			for _, c := range calls {
				th.toolError(c.part, "not run: the turn reached its iteration limit")
			}
			return outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: forge.CodeIterationLimit,
				Message: fmt.Sprintf("the agent used all %d model calls this turn allows; send a new message to continue", th.agent.IterationLimit)}}
		}
		actions := th.runCalls(calls)
		if err := x.failedWrite(); err != nil {
			return th.failure(err)
		}
		if x.cancelled() {
			return th.cancelledOutcome()
		}
		if len(actions) > 0 {
			return outcome{status: forge.TurnDone, actions: actions}
		}
	}
}

func (th *thread) failure(err error) outcome {
	code := forge.CodeInternal
	var me *forge.ModelError
	var se *storeError
	var le *outputLimitError
	switch {
	case errors.As(err, &se):
		code = forge.CodeStoreError
	case errors.As(err, &le):
		code = forge.CodeOutputLimit
	case errors.As(err, &me):
		code = forge.CodeModelError
		if me.ContextOverflow {
			code = forge.CodeContextOverflow
		}
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
