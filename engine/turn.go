package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// ErrShuttingDown refuses new turns while the engine closes.
var ErrShuttingDown = forge.Errorf(forge.ErrUnavailable, "the server is shutting down: retry the request (on another replica, or once it has restarted)")

// StartTurn validates req against the session, creates the turn atomically
// (turn row, input message, tip move, turn.created) and starts running it.
// It returns the turn as created. A reused idempotency key returns the turn
// the key first created, in whatever state it is now.
func (e *Engine) StartTurn(ctx context.Context, tenant, sessionID string, req TurnRequest) (*forge.Turn, error) {
	if req.Compact || req.Trigger != nil {
		req.Input = []forge.Input{}
	} else if len(req.Input) == 0 {
		return nil, forge.Errorf(forge.ErrInvalid, "input must hold at least one item")
	}
	if req.NewRoot && req.PreviousTurnID != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "previous_turn_id and new_root cannot be used together")
	}
	if err := forge.CheckIfBusy(req.IfBusy, "if_busy"); err != nil {
		return nil, err
	}
	if req.Supersede && req.IfBusy != "" && req.IfBusy != forge.IfBusyInterrupt {
		return nil, forge.Errorf(forge.ErrInvalid, "supersede: true is if_busy interrupt; it cannot be used with if_busy %s", req.IfBusy)
	}
	if req.promote == nil {
		// (A queued turn's own key names it: it is not a repeat.)
		if t, err := e.turnByKey(ctx, tenant, sessionID, req.IdempotencyKey); t != nil || err != nil {
			return t, err
		}
	}
	var release func() // set once an interrupt holds the session's queue
	defer func() {
		if release != nil {
			release()
			e.kickQueue(tenant, sessionID)
		}
	}()
	for i := range 5 {
		// A retry reads the session from the store: the cached row may be
		// what was stale.
		t, retry, err := e.tryStartTurn(ctx, tenant, sessionID, req, &release, i > 0)
		if !retry {
			return t, err
		}
	}
	return nil, forge.Errorf(forge.ErrConflict, "the session kept changing while the turn was being created; retry the request")
}

func (e *Engine) turnByKey(ctx context.Context, tenant, sessionID, key string) (*forge.Turn, error) {
	if key == "" {
		return nil, nil
	}
	t, err := e.store.TurnByIdempotencyKey(ctx, tenant, sessionID, key)
	if errors.Is(err, forge.ErrNotFound) {
		return nil, nil
	}
	return t, err
}

// tryStartTurn makes one attempt; retry is true when the session moved
// under it (its tip changed, or a superseded turn had to end first).
func (e *Engine) tryStartTurn(ctx context.Context, tenant, sessionID string, req TurnRequest, release *func(), reread bool) (_ *forge.Turn, retry bool, _ error) {
	e.mu.Lock()
	closing := e.closing
	current := e.running[sessionID]
	e.mu.Unlock()
	if closing {
		return nil, false, ErrShuttingDown
	}
	// The session and agent rows may come from the store's cache, maybe
	// stale (another replica ran a turn, or changed the agent): BeginTurn
	// fences both (ExpectTip, AgentName), and a refusal drops them, so the
	// retry below reads them afresh (issue 22: no read the writer knows).
	var (
		sess *forge.Session
		tip  *forge.Turn // the session's tip turn, when read with it
		err  error
	)
	if reread {
		sess, tip, err = e.store.SessionWithTip(ctx, tenant, sessionID)
	} else {
		sess, err = e.store.SessionForTurn(ctx, tenant, sessionID)
	}
	if err != nil {
		return nil, false, err
	}
	kind := e.kind(sess)
	if err := e.checkKind(sess, &req); err != nil {
		return nil, false, err
	}
	if current != nil && req.promote == nil && req.IdempotencyKey != "" && current.turn.IdempotencyKey == req.IdempotencyKey {
		// A repeat racing the request that is creating the turn: once
		// that creation lands, the key names the turn.
		select {
		case <-current.begun:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if t, err := e.turnByKey(ctx, tenant, sessionID, req.IdempotencyKey); t != nil || err != nil {
			return t, false, err
		}
		return nil, true, nil // the creation failed; look again
	}
	if current != nil {
		mode, err := e.busyMode(ctx, tenant, sess, req)
		if err != nil {
			return nil, false, err
		}
		switch mode {
		case forge.IfBusyEnqueue:
			t, err := e.enqueue(ctx, tenant, sess, req)
			return t, false, err
		case forge.IfBusySteer:
			t, err := e.steerInto(ctx, current, tenant, sess, req)
			return t, false, err
		case forge.IfBusyInterrupt:
		default:
			return nil, false, forge.Errorf(forge.ErrTurnInProgress, "turn %s is still running in this session; wait for it, cancel it, or send if_busy: enqueue (or interrupt)", current.turn.ID)
		}
		if *release == nil {
			// The queued turns wait: this request takes the running
			// turn's place.
			*release = e.holdQueue(sessionID)
		}
		current.stop(forge.CancelSuperseded, "")
		select {
		case <-current.done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		return nil, true, nil
	}

	base, err := e.baseTurn(ctx, tenant, sess, tip, req)
	if err != nil {
		return nil, false, err
	}
	agent, agentCurrent, err := e.agentLookup(ctx, tenant, sess, true)
	if err != nil {
		return nil, false, err
	}
	var open []forge.RequiredAction
	if base != nil && base.Status == forge.TurnDone {
		open = base.RequiredActions
	}
	var resolutions []resolution
	if req.Compact {
		if err := canCompact(agent, base, open); err != nil {
			return nil, false, err
		}
	} else if req.Trigger != nil {
		if len(open) > 0 {
			return nil, false, forge.Errorf(forge.ErrPendingActions, "%d call(s) await resolution (first: %s %s)", len(open), open[0].Type, open[0].CallID)
		}
	} else if resolutions, err = validateInput(req.Input, open); err != nil {
		return nil, false, err
	}
	attachments, err := e.resolveAttachments(ctx, tenant, agent, req)
	if err != nil {
		return nil, false, err
	}
	overrides, err := e.turnOverrides(agent, base, req, resolutions != nil)
	if err != nil {
		return nil, false, err
	}
	req.OutputSchema = nil
	if overrides != nil {
		req.OutputSchema = overrides.OutputSchema
	}
	answer, err := e.answerSpecFor(agent, req)
	if err != nil {
		return nil, false, err
	}
	var history []*forge.Message
	var snap *forge.Snapshot
	var memo modelMemo
	if kind.readsWhole() {
		// Messages arrive between turns (a monologue's copies): the
		// history is read whole each time, never from the cache.
		tip := ""
		if base != nil {
			tip = base.ID
		}
		if history, err = e.loadHistory(ctx, tenant, sess, tip); err != nil {
			return nil, false, err
		}
		history = kind.Order(history)
		if base != nil {
			switch snap, err = e.store.GetSnapshot(ctx, tenant, base.ID); {
			case errors.Is(err, forge.ErrNotFound):
				snap = nil
			case err != nil:
				return nil, false, fmt.Errorf("snapshot of %s: %w", base.ID, err)
			}
		}
	} else if base != nil {
		var ok bool
		if history, snap, memo, ok = e.histories.get(sess.ID, base.ID); !ok {
			if history, snap, err = e.historyForTurn(ctx, tenant, sess, base); err != nil {
				return nil, false, err
			}
			if base.Ended() {
				// Its rows no longer change: kept for a retry of this
				// start (the first hold of a session on this replica is
				// refused as stale, eventlog.ErrStaleView) and for the
				// turns after it here, which then read none of it again.
				// Clipped: this turn appends to its own copy.
				e.histories.put(sess.ID, base, slices.Clip(history), snap, modelMemo{})
			}
		}
	} else if kind == nil {
		// A direct session's first turn (or a new root) sees the
		// messages imported into it outside turns (a Chat Completions
		// history Forge had not seen): they are on every branch, so the
		// turns after it read them along their branch as usual.
		if history, err = e.loadHistory(ctx, tenant, sess, ""); err != nil {
			return nil, false, err
		}
	}

	if base != nil && base.Status == forge.TurnQueued {
		return nil, false, forge.Errorf(forge.ErrInvalid, "previous_turn_id %q names a queued turn: a turn chains only from one that has run", base.ID)
	}
	now := e.clock.Now()
	turn := &forge.Turn{
		ID:              e.ids.New(forge.PrefixTurn),
		Tenant:          tenant,
		SessionID:       sessionID,
		AgentID:         agent.ID,
		AgentVersion:    agent.Version,
		Status:          forge.TurnRunning,
		Input:           inputWithFiles(redactTokens(req.Input), attachments),
		RequiredActions: []forge.RequiredAction{},
		IdempotencyKey:  req.IdempotencyKey,
		CreatedAt:       now,
		Trigger:         req.Trigger,
		Overrides:       overrides,
	}
	if req.ScheduleID != "" {
		turn.Trigger = &forge.TurnTrigger{Type: forge.TriggerSchedule, ScheduleID: req.ScheduleID}
	}
	if kind != nil && kind.ResolutionKeepsTrigger && resolutions != nil && base != nil && base.Trigger != nil {
		// A resolution answers the same message (a forum's) as the turn
		// it resumes.
		tr := *base.Trigger
		tr.Retry = false
		turn.Trigger = &tr
	}
	if base != nil {
		id := base.ID
		turn.PreviousTurnID = &id
	}
	if q := req.promote; q != nil {
		// A queued turn starts as itself: its id, key and creation time.
		turn.ID, turn.IdempotencyKey, turn.CreatedAt = q.ID, q.IdempotencyKey, q.CreatedAt
	}
	x := e.newExecution(tenant, sess, turn, snap)
	x.compactOnly = req.Compact
	// Only the main thread runs with the request's settings: subagents
	// keep their own definitions.
	th := x.newThread(sess.MainThreadID, agent.WithOverrides(overrides), 0, history)
	th.memo = memo
	th.resolutions = resolutions
	th.answer = answer
	x.main = th
	drafts := []eventlog.Draft{{Type: forge.EventTurnCreated, ID: turn.ID, TurnID: turn.ID, Data: turn}}
	var msgs []*forge.Message
	if resolutions == nil && !req.Compact && req.Trigger == nil {
		msg := th.newMessage(forge.RoleUser)
		if text := req.Input[0].Text; text != "" { // a message of files alone has none
			p := th.newPart(msg, forge.PartText)
			p.Text, p.State = text, forge.StateCompleted
			msg.Parts = []*forge.Part{p}
		}
		th.fileParts(msg, attachments)
		th.addAgentParts(msg, req.Input[0].Text)
		msgs = append(msgs, msg)
		th.history = append(th.history, msg)
		drafts = append(drafts, eventlog.Draft{Type: forge.EventMessageCreated, ID: msg.ID, TurnID: turn.ID, ThreadID: msg.ThreadID, Data: msg})
	}

	// The quota is taken last, once the request is known to be valid, and
	// before anything is stored: a refused turn leaves no trace.
	if x.releaseQuota, err = e.quotas.acquire(tenant, agent.Model); err != nil {
		return nil, false, err
	}
	if ok, deleting := e.register(x); !ok {
		x.freeQuota()
		if e.isClosing() {
			return nil, false, ErrShuttingDown
		}
		if deleting != nil {
			// The session is being deleted: look again once it is done
			// (not found, unless the delete failed).
			select {
			case <-deleting:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		}
		return nil, true, nil // another request won the race; look again
	}
	// Inline attachments are stored last, once the turn is sure to begin
	// but for its write; should that fail, they are deleted again.
	madeFiles, err := e.storePending(ctx, tenant, attachments)
	if err != nil {
		e.unregister(x)
		x.freeQuota()
		return nil, false, err
	}
	turn.Input = inputWithFiles(turn.Input, attachments)
	expectTip := ""
	if sess.TipTurnID != nil {
		expectTip = *sess.TipTurnID
	}
	// The turn starts running while its creation is being written (its
	// first model call overlaps that write); it writes and publishes
	// nothing, and causes no other effect, before the creation landed
	// (execution.awaitBegun).
	created := *turn
	x.observeTurnStart(ctx, agent)
	e.wg.Add(1)
	e.workers.run(func() { e.execute(x) })
	begin := &forge.BeginTurn{Turn: turn, Messages: msgs, ExpectTip: &expectTip, Lease: e.lease(), Promote: req.promote != nil,
		SeqsRead: sess.SeqReserved}
	if agentCurrent {
		begin.AgentName = sess.Agent
	}
	// Across replicas, a session another one wrote since this one did is
	// refused before the store's round trip (eventlog.ErrStaleView, an
	// ErrConflict: retried below from the store).
	_, err = e.events.BeginPrepared(ctx, tenant, begin, drafts...)
	if err == nil {
		created.LastSeq = turn.LastSeq
	}
	x.began(err)
	if err != nil {
		<-x.done // it stopped without a trace
		e.deleteFiles(ctx, tenant, madeFiles)
		if errors.Is(err, forge.ErrConflict) {
			// The tip moved or the idempotency key was just used.
			if req.promote == nil {
				if t, kerr := e.turnByKey(ctx, tenant, sessionID, req.IdempotencyKey); t != nil || kerr != nil {
					return t, false, kerr
				}
			}
			return nil, true, nil
		}
		mode := forge.IfBusyReject
		if errors.Is(err, forge.ErrTurnInProgress) && req.promote == nil {
			// The turn running on another replica may be this key's
			// (a repeat sent there too): then it is the answer.
			if t, kerr := e.turnByKey(ctx, tenant, sessionID, req.IdempotencyKey); t != nil || kerr != nil {
				return t, false, kerr
			}
		}
		if errors.Is(err, forge.ErrTurnInProgress) {
			var merr error
			if mode, merr = e.busyMode(ctx, tenant, sess, req); merr != nil {
				return nil, false, merr
			}
			if mode == forge.IfBusyEnqueue || mode == forge.IfBusySteer {
				// It runs on another replica: wait behind it (a steer
				// cannot reach it there; it runs as the next turn).
				t, err := e.enqueue(ctx, tenant, sess, req)
				return t, false, err
			}
		}
		if errors.Is(err, forge.ErrTurnInProgress) && mode == forge.IfBusyInterrupt {
			if *release == nil {
				*release = e.holdQueue(sessionID)
			}
			// It runs on another replica: cancel it there first.
			t, rerr := e.runningElsewhere(ctx, tenant, sessionID)
			if rerr != nil {
				return nil, false, rerr
			}
			if t != nil {
				if _, rerr := e.cancelRemote(ctx, t, forge.CancelSuperseded, ""); rerr != nil {
					return nil, false, rerr
				}
			}
			return nil, true, nil
		}
		return nil, false, err
	}
	x.leased.Store(true)
	if req.began != nil {
		*req.began = true
	}
	return &created, false, nil
}

// baseTurn is the turn the new one chains from, or nil for a new root or a
// session's first turn. tip is the session's tip turn when it was read
// with the session (nil: not read).
func (e *Engine) baseTurn(ctx context.Context, tenant string, sess *forge.Session, tip *forge.Turn, req TurnRequest) (*forge.Turn, error) {
	switch {
	case req.NewRoot:
		return nil, nil
	case req.PreviousTurnID != nil:
		t, err := e.store.GetTurn(ctx, tenant, sess.ID, *req.PreviousTurnID)
		if errors.Is(err, forge.ErrNotFound) {
			return nil, forge.Errorf(forge.ErrNotFound, "previous_turn_id %q is not a turn of this session", *req.PreviousTurnID)
		}
		return t, err
	case sess.TipTurnID != nil:
		if t := e.histories.ended(tenant, sess.ID, *sess.TipTurnID); t != nil {
			return t, nil // it ended here: no read
		}
		if tip != nil && tip.ID == *sess.TipTurnID {
			return tip, nil
		}
		return e.store.GetTurn(ctx, tenant, sess.ID, *sess.TipTurnID)
	}
	return nil, nil
}

// agentFor returns the agent version a new turn runs with: the current one,
// or, for a deleted agent, the version the session last ran with.
func (e *Engine) agentFor(ctx context.Context, tenant string, sess *forge.Session) (*forge.Agent, error) {
	a, _, err := e.agentLookup(ctx, tenant, sess, false)
	return a, err
}

// agentLookup is agentFor; current tells it is the current version. With
// forTurn, that version may come from the store's cache (AgentForTurn),
// for a turn whose BeginTurn.AgentName checks it.
func (e *Engine) agentLookup(ctx context.Context, tenant string, sess *forge.Session, forTurn bool) (_ *forge.Agent, current bool, _ error) {
	get := e.store.GetAgent
	if forTurn {
		get = e.store.AgentForTurn
	}
	a, err := get(ctx, tenant, sess.Agent)
	if err == nil || !errors.Is(err, forge.ErrNotFound) || sess.TipTurnID == nil {
		if errors.Is(err, forge.ErrNotFound) {
			return nil, false, forge.Errorf(forge.ErrNotFound, "agent %q of this session no longer exists", sess.Agent)
		}
		return a, err == nil, err
	}
	tip, err := e.store.GetTurn(ctx, tenant, sess.ID, *sess.TipTurnID)
	if err != nil {
		return nil, false, err
	}
	a, err = e.store.GetAgentVersion(ctx, tenant, tip.AgentID, tip.AgentVersion)
	return a, false, err
}

// resolution is a validated input item resolving an open call.
type resolution struct {
	input  forge.Input
	action forge.RequiredAction
	// subtask is set when the result is a resumed child's: its subtask
	// as it ended.
	subtask *forge.SubtaskData
}

// validateInput checks the input against the open calls of the turn chained
// from, in the order API.md gives. It returns the resolutions (nil for a
// plain message).
func validateInput(input []forge.Input, open []forge.RequiredAction) ([]resolution, error) {
	messages := 0
	for i, in := range input {
		switch in.Type {
		case forge.InputMessage:
			messages++
			if in.Text == "" && len(in.Files) == 0 {
				return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: a message needs text or files", i)
			}
		case forge.InputApproval:
			if in.CallID == "" || in.Approved == nil {
				return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: an approval needs call_id and approved", i)
			}
		case forge.InputToolResult:
			if in.CallID == "" || in.Output == nil {
				return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: a tool_result needs call_id and output", i)
			}
		case forge.InputAuth:
			if in.CallID == "" || in.Token == "" {
				return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: an auth item needs call_id and token", i)
			}
		default:
			return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: type must be message, approval, tool_result or auth, got %q", i, in.Type)
		}
	}
	if messages > 0 && (messages > 1 || len(input) > 1) {
		return nil, forge.Errorf(forge.ErrInvalid, "input holds either one message or resolutions of open calls, not both")
	}
	if messages == 1 {
		if len(open) > 0 {
			return nil, forge.Errorf(forge.ErrPendingActions, "%d call(s) await resolution (first: %s %s); resolve them before sending a message", len(open), open[0].Type, open[0].CallID)
		}
		return nil, nil
	}
	byCall := make(map[string]forge.RequiredAction, len(open))
	for _, a := range open {
		byCall[a.CallID] = a
	}
	seen := map[string]bool{}
	out := make([]resolution, 0, len(input))
	for i, in := range input {
		a, ok := byCall[in.CallID]
		if !ok {
			return nil, forge.Errorf(forge.ErrUnknownCall, "input[%d]: call %q is not open in this session", i, in.CallID)
		}
		if seen[in.CallID] {
			return nil, forge.Errorf(forge.ErrDuplicateCall, "input[%d]: call %q is resolved twice", i, in.CallID)
		}
		seen[in.CallID] = true
		want := map[string]string{forge.ActionApproval: forge.InputApproval, forge.ActionClientTool: forge.InputToolResult, forge.ActionAuth: forge.InputAuth}[a.Type]
		if in.Type != want {
			return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: call %q awaits %s, answer it with an item of type %s", i, in.CallID, a.Type, want)
		}
		out = append(out, resolution{input: in, action: a})
	}
	for _, a := range open {
		if !seen[a.CallID] {
			return nil, forge.Errorf(forge.ErrIncompleteResolution, "call %q (%s of %s) of thread %s is left unresolved; resolve every open call of the thread in one turn", a.CallID, a.Type, a.Tool, a.ThreadID)
		}
	}
	return out, nil
}

// register makes x the session's running turn. It refuses while another
// runs, while the engine closes, and while the session is being deleted
// (then deleting is closed once the delete is done).
func (e *Engine) register(x *execution) (ok bool, deleting <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch := e.deleting[x.session.ID]; ch != nil {
		return false, ch
	}
	if e.closing || e.running[x.session.ID] != nil {
		return false, nil
	}
	e.running[x.session.ID] = x
	return true, nil
}

func (e *Engine) unregister(x *execution) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running[x.session.ID] == x {
		delete(e.running, x.session.ID)
	}
}

func (e *Engine) isClosing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closing
}

// loadHistory reads the main thread's model view along the branch ending
// at tip, oldest first (filterCompacted).
func (e *Engine) loadHistory(ctx context.Context, tenant string, sess *forge.Session, tip string) ([]*forge.Message, error) {
	return e.modelView(ctx, tenant, sess, tip)
}

// canCompact checks that a compaction turn (POST /compact) may run.
func canCompact(agent *forge.Agent, base *forge.Turn, open []forge.RequiredAction) error {
	if agent.Compaction.Enabled != nil && !*agent.Compaction.Enabled {
		return forge.Errorf(forge.ErrInvalid, "compaction is disabled for agent %q (compaction.enabled is false)", agent.Name)
	}
	if base == nil {
		return forge.Errorf(forge.ErrInvalid, "the session has no history to compact")
	}
	if len(open) > 0 {
		return forge.Errorf(forge.ErrPendingActions, "%d call(s) await resolution (first: %s %s); resolve them before compacting", len(open), open[0].Type, open[0].CallID)
	}
	return nil
}

// redactTokens returns input with auth tokens replaced: tokens are handed
// to the MCP manager and never stored or echoed back.
func redactTokens(input []forge.Input) []forge.Input {
	out := make([]forge.Input, len(input))
	for i, in := range input {
		if in.Token != "" {
			in.Token = "[redacted]"
		}
		out[i] = in
	}
	return out
}

// turnOverrides returns the settings the turn runs with, checked: the
// request's (its output_schema among them), or, for a turn that only
// resolves calls and brings none, those of the turn it resolves, so that
// the model that called a request's tool still has it. nil: none.
func (e *Engine) turnOverrides(agent *forge.Agent, base *forge.Turn, req TurnRequest, resolving bool) (*forge.TurnOverrides, error) {
	o, err := requestOverrides(req)
	if err != nil {
		return nil, err
	}
	if o == nil && resolving && base != nil && base.Overrides != nil {
		if inherited := base.Overrides; inherited.Check(agent) == nil {
			// (An agent locked or changed since runs with its own.)
			return inherited, nil
		}
		return nil, nil
	}
	if o == nil {
		return nil, nil
	}
	if err := o.Check(agent); err != nil {
		return nil, err
	}
	return o, nil
}

// requestOverrides merges the request's output_schema into its
// overrides; nil when it sets nothing.
func requestOverrides(req TurnRequest) (*forge.TurnOverrides, error) {
	if req.OutputSchema == nil {
		if req.Overrides.Empty() {
			return nil, nil
		}
		return req.Overrides, nil
	}
	var o forge.TurnOverrides
	if req.Overrides != nil {
		if req.Overrides.OutputSchema != nil {
			return nil, forge.Errorf(forge.ErrInvalid, "output_schema is given twice (on the request and in overrides): give it once")
		}
		o = *req.Overrides
	}
	o.OutputSchema = req.OutputSchema
	return &o, nil
}
