package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// Busy sessions (API.md): a turn asked for while another runs, with
// if_busy enqueue, is stored queued (forge.TurnStore.EnqueueTurn) with the
// request it will run with. When a turn of the session ends here, on
// recovery, and on every lease sweep, the session's oldest queued turn is
// started (promoted: BeginTurn with Promote, so one replica starts it,
// once). Its turn.created is written when it starts, so its events are
// those of any turn; a queued turn that never runs (cancelled, or refused
// when its turn came) gets a turn.created and a turn.done when it ends.

// queuedRequest is what a queued turn keeps of its request.
type queuedRequest struct {
	Input          []forge.Input       `json:"input"`
	PreviousTurnID *string             `json:"previous_turn_id,omitempty"`
	NewRoot        bool                `json:"new_root,omitempty"`
	OutputSchema   *forge.OutputSchema `json:"output_schema,omitempty"`
	// Overrides are the request's settings, its output schema among
	// them (then OutputSchema is unset).
	Overrides *forge.TurnOverrides `json:"overrides,omitempty"`
	// ScheduleID: a schedule's run, queued behind a busy session's turn.
	ScheduleID string `json:"schedule_id,omitempty"`
}

// busyMode is what req does while another turn of the session runs: the
// request's if_busy, supersede: true's interrupt, or the agent's default.
func (e *Engine) busyMode(ctx context.Context, tenant string, sess *forge.Session, req TurnRequest) (string, error) {
	switch {
	case req.promote != nil:
		return forge.IfBusyReject, nil // a queued turn waits its turn again
	case req.Supersede:
		return forge.IfBusyInterrupt, nil
	case req.IfBusy != "":
		return req.IfBusy, nil
	case req.Compact || req.Trigger != nil || req.Owner:
		return forge.IfBusyReject, nil
	}
	a, err := e.agentFor(ctx, tenant, sess)
	if err != nil {
		return "", err
	}
	if a.IfBusy != "" {
		return a.IfBusy, nil
	}
	return forge.IfBusyReject, nil
}

// enqueue stores req as a queued turn of sess, once what can be checked
// before its turn comes is valid (the rest, open calls included, is
// checked when it starts), and returns it.
func (e *Engine) enqueue(ctx context.Context, tenant string, sess *forge.Session, req TurnRequest) (*forge.Turn, error) {
	if req.Compact || req.Trigger != nil || req.Owner {
		return nil, forge.Errorf(forge.ErrInvalid, "only turns of a message or resolutions can be enqueued")
	}
	for i, in := range req.Input {
		if in.Type == forge.InputAuth {
			return nil, forge.Errorf(forge.ErrInvalid, "input[%d]: an auth item cannot be enqueued (its token is never stored); send it once the running turn has ended", i)
		}
	}
	if err := validateShape(req.Input); err != nil {
		return nil, err
	}
	if req.PreviousTurnID != nil {
		prev, err := e.store.GetTurn(ctx, tenant, sess.ID, *req.PreviousTurnID)
		if errors.Is(err, forge.ErrNotFound) {
			return nil, forge.Errorf(forge.ErrNotFound, "previous_turn_id %q is not a turn of this session", *req.PreviousTurnID)
		}
		if err != nil {
			return nil, err
		}
		if prev.Status == forge.TurnQueued {
			return nil, forge.Errorf(forge.ErrInvalid, "previous_turn_id %q names a queued turn: a turn chains only from one that has run (omit previous_turn_id to chain from the turn before it)", prev.ID)
		}
	}
	agent, err := e.agentFor(ctx, tenant, sess)
	if err != nil {
		return nil, err
	}
	overrides, err := requestOverrides(req)
	if err == nil && overrides != nil {
		err = overrides.Check(agent)
	}
	if err != nil {
		return nil, err
	}
	req.OutputSchema = nil
	if overrides != nil {
		req.OutputSchema = overrides.OutputSchema
	}
	if _, err := e.answerSpecFor(agent, req); err != nil {
		return nil, err
	}
	atts, err := e.resolveAttachments(ctx, tenant, agent, req)
	if err != nil {
		return nil, err
	}
	// Inline attachments are stored now: the queued request names them
	// by id (the spooled content does not outlive this request).
	made, err := e.storePending(ctx, tenant, atts)
	if err != nil {
		return nil, err
	}
	input := inputWithFiles(req.Input, atts)
	raw, err := json.Marshal(queuedRequest{Input: input, PreviousTurnID: req.PreviousTurnID, NewRoot: req.NewRoot,
		Overrides: overrides, ScheduleID: req.ScheduleID})
	if err != nil {
		e.deleteFiles(ctx, tenant, made)
		return nil, err
	}
	var trigger *forge.TurnTrigger
	if req.ScheduleID != "" {
		trigger = &forge.TurnTrigger{Type: forge.TriggerSchedule, ScheduleID: req.ScheduleID}
	}
	turn := &forge.Turn{
		ID:              e.ids.New(forge.PrefixTurn),
		Tenant:          tenant,
		SessionID:       sess.ID,
		PreviousTurnID:  req.PreviousTurnID,
		Trigger:         trigger,
		AgentID:         agent.ID,
		AgentVersion:    agent.Version,
		Status:          forge.TurnQueued,
		Input:           input,
		RequiredActions: []forge.RequiredAction{},
		IdempotencyKey:  req.IdempotencyKey,
		Overrides:       overrides,
		CreatedAt:       e.clock.Now(),
	}
	e.mu.Lock()
	if x := e.running[sess.ID]; x != nil {
		// Its terminal write may look for queued turns before this one
		// is stored: its end then looks again (execution.enqueued).
		x.enqueued.Store(true)
	}
	e.mu.Unlock()
	if err := e.store.EnqueueTurn(ctx, turn, raw); err != nil {
		e.deleteFiles(ctx, tenant, made)
		if errors.Is(err, forge.ErrConflict) {
			if t, kerr := e.turnByKey(ctx, tenant, sess.ID, req.IdempotencyKey); t != nil || kerr != nil {
				return t, kerr
			}
		}
		return nil, err
	}
	// The running turn may have ended while this was written (its end
	// found nothing queued): look now. Nothing starts while one runs.
	e.kickQueue(tenant, sess.ID)
	return turn, nil
}

// validateShape checks each input item's own fields (validateInput's
// first pass) and the message/resolution mix, not the open calls.
func validateShape(input []forge.Input) error {
	if len(input) == 0 {
		return forge.Errorf(forge.ErrInvalid, "input must hold at least one item")
	}
	if len(input) == 1 && input[0].Type == forge.InputMessage {
		_, err := validateInput(input, nil)
		return err
	}
	for _, in := range input {
		if in.Type == forge.InputMessage {
			return forge.Errorf(forge.ErrInvalid, "input holds either one message or resolutions of open calls, not both")
		}
	}
	return nil
}

// holdQueue keeps the session's queued turns from starting while a
// request interrupts its running turn (it takes the turn's place, ahead
// of the queue); the release lets them start again.
func (e *Engine) holdQueue(sessionID string) (release func()) {
	e.mu.Lock()
	e.queueHolds[sessionID]++
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		if e.queueHolds[sessionID]--; e.queueHolds[sessionID] <= 0 {
			delete(e.queueHolds, sessionID)
		}
		e.mu.Unlock()
	}
}

func (e *Engine) queueHeld(sessionID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queueHolds[sessionID] > 0
}

// kickQueue starts the session's oldest queued turn in the background,
// unless a turn runs here (its end kicks again) or the engine closes (the
// next start's recovery does it).
func (e *Engine) kickQueue(tenant, sessionID string) {
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		e.startQueued(context.Background(), tenant, sessionID)
	}()
}

// startQueued starts the session's oldest queued turn, if no turn runs:
// a queued turn that cannot start (its input no longer fits the session)
// ends errored, and the next one is tried.
func (e *Engine) startQueued(ctx context.Context, tenant, sessionID string) {
	for range 100 { // each round ends or passes one queued turn
		if e.runningTurn(sessionID) != nil || e.queueHeld(sessionID) {
			return
		}
		q, err := e.store.NextQueuedTurn(ctx, tenant, sessionID)
		if err != nil {
			if !errors.Is(err, forge.ErrNotFound) {
				e.log.Warn("reading a session's queued turns failed; they start at the next sweep or start", "session_id", sessionID, "err", err)
			}
			return
		}
		var qr queuedRequest
		if err = json.Unmarshal(q.Request, &qr); err != nil {
			err = forge.Errorf(forge.ErrInvalid, "the queued request cannot be read: %v", err)
		} else {
			req := TurnRequest{Input: qr.Input, PreviousTurnID: qr.PreviousTurnID, NewRoot: qr.NewRoot,
				OutputSchema: qr.OutputSchema, Overrides: qr.Overrides, ScheduleID: qr.ScheduleID, IdempotencyKey: q.Turn.IdempotencyKey, promote: q.Turn}
			_, err = e.StartTurn(ctx, tenant, sessionID, req)
		}
		switch {
		case err == nil:
			return
		case errors.Is(err, forge.ErrTurnInProgress), errors.Is(err, forge.ErrUnavailable),
			errors.Is(err, forge.ErrStore), ctx.Err() != nil:
			// Another turn runs (its end starts this one), the engine
			// closes, or the store fails: the sweep or the next start
			// tries again.
			if !errors.Is(err, forge.ErrTurnInProgress) && !errors.Is(err, forge.ErrUnavailable) {
				e.log.Warn("starting a queued turn failed", "session_id", sessionID, "turn_id", q.Turn.ID, "err", err)
			}
			return
		case errors.Is(err, forge.ErrTurnEnded), errors.Is(err, forge.ErrConflict):
			continue // started or cancelled meanwhile, or the session moved: look again
		}
		// Its input does not fit the session now (open calls, a previous
		// turn gone, a quota): it ends errored, and the next one's turn
		// comes.
		t := *q.Turn
		t.Status = forge.TurnErrored
		t.Error = &forge.TurnError{Code: forge.ErrorCode(err), Message: err.Error()}
		if _, eerr := e.endQueued(ctx, &t); eerr != nil && !errors.Is(eerr, forge.ErrTurnEnded) {
			e.log.Warn("ending a queued turn that could not start failed", "session_id", sessionID, "turn_id", t.ID, "err", eerr)
			return
		}
		e.log.Info("queued turn could not start; ended errored", "session_id", sessionID, "turn_id", t.ID, "code", t.Error.Code, "err", err)
	}
}

// endQueued ends a queued turn that never ran (t holds its terminal
// fields), writing its turn.created (as queued) and turn.done.
func (e *Engine) endQueued(ctx context.Context, t *forge.Turn) (*forge.Turn, error) {
	now := e.clock.Now()
	t.EndedAt = &now
	created := *t
	created.Status, created.Error, created.CancelReason, created.CancelMessage, created.EndedAt = forge.TurnQueued, nil, nil, nil, nil
	final := *t
	drafts := []eventlog.Draft{
		{Type: forge.EventTurnCreated, ID: t.ID, TurnID: t.ID, Data: &created},
		{Type: forge.EventTurnDone, ID: t.ID, TurnID: t.ID, Data: &final, OnSeq: func(seq int64) {
			final.LastSeq, t.LastSeq = seq, seq
		}},
	}
	_, err := e.events.Write(ctx, t.Tenant, t.SessionID, drafts, func(ctx context.Context, evs []forge.Event) error {
		return e.store.EndQueuedTurn(ctx, t, evs)
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// startAllQueued kicks every session whose queued turns wait with no turn
// running (recovery; the lease sweep: a replica that died, or ended its
// turn without starting the next).
func (e *Engine) startAllQueued(ctx context.Context) error {
	refs, err := e.store.QueuedSessions(ctx)
	if err != nil {
		return fmt.Errorf("queued turns: %w", err)
	}
	for _, r := range refs {
		if e.runningTurn(r.SessionID) != nil {
			continue
		}
		e.kickQueue(r.Tenant, r.SessionID)
	}
	return nil
}

// CancelTurn cancels one turn of the session: a queued turn ends
// cancelled (reason client) without ever running; the running turn is
// cancelled as Cancel does. ErrConflict when the turn has ended.
func (e *Engine) CancelTurn(ctx context.Context, tenant, sessionID, turnID, reason string) (*forge.Turn, error) {
	for range 3 {
		t, err := e.store.GetTurn(ctx, tenant, sessionID, turnID)
		if err != nil {
			return nil, err
		}
		switch t.Status {
		case forge.TurnQueued:
			why := forge.CancelClient
			t.Status, t.CancelReason = forge.TurnCancelled, &why
			if reason != "" {
				t.CancelMessage = &reason
			}
			ended, err := e.endQueued(ctx, t)
			if errors.Is(err, forge.ErrTurnEnded) {
				continue // it started meanwhile: cancel it running
			}
			return ended, err
		case forge.TurnRunning:
			if x := e.runningTurn(sessionID); x != nil && x.tenant == tenant && x.turn.ID == turnID {
				x.stop(forge.CancelClient, reason)
				select {
				case <-x.done:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return e.store.GetTurn(ctx, tenant, sessionID, turnID)
			}
			if e.cfg.Leases != nil || e.cfg.Peers != nil {
				return e.cancelRemote(ctx, t, forge.CancelClient, reason)
			}
			return nil, forge.Errorf(forge.ErrConflict, "turn %s is not running in this server", turnID)
		default:
			return nil, forge.Errorf(forge.ErrConflict, "turn %s has already ended (%s)", turnID, t.Status)
		}
	}
	return nil, forge.Errorf(forge.ErrConflict, "turn %s kept changing while being cancelled; retry", turnID)
}

// steer is an if_busy steer request's message waiting for the running
// turn: joined receives true once the message is in the turn, false when
// the turn's loop ended before its next model call.
type steer struct {
	text   string
	joined chan bool
}

// addSteer queues text for the turn's next model call; false when the
// loop has ended.
func (x *execution) addSteer(text string) (*steer, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.steersOff {
		return nil, false
	}
	s := &steer{text: text, joined: make(chan bool, 1)}
	x.steers = append(x.steers, s)
	return s, true
}

// takeSteers joins the waiting steer messages to the main thread, as user
// messages of this turn (message.created), before its next model call.
func (th *thread) takeSteers() {
	x := th.x
	if th != x.main {
		return
	}
	x.mu.Lock()
	steers := x.steers
	x.steers = nil
	x.mu.Unlock()
	for _, s := range steers {
		msg := th.newMessage(forge.RoleUser)
		p := th.newPart(msg, forge.PartText)
		p.Text, p.State = s.text, forge.StateCompleted
		msg.Parts = []*forge.Part{p}
		th.addAgentParts(msg, s.text)
		th.messageEvent(forge.EventMessageCreated, msg)
		for _, p := range msg.Parts {
			th.putPart(p)
		}
		th.history = append(th.history, msg)
		s.joined <- true
	}
}

// refuseSteers ends steering once the loop has ended: the messages still
// waiting run as the next turns (their requests enqueue them).
func (x *execution) refuseSteers() {
	x.mu.Lock()
	steers := x.steers
	x.steers, x.steersOff = nil, true
	x.mu.Unlock()
	for _, s := range steers {
		s.joined <- false
	}
}

// steerInto joins req's message to the running turn x before its next
// model call and returns that turn; when x's loop ends first, the message
// is enqueued and runs as the next turn (API.md, "Busy sessions").
func (e *Engine) steerInto(ctx context.Context, x *execution, tenant string, sess *forge.Session, req TurnRequest) (*forge.Turn, error) {
	if len(req.Input) != 1 || req.Input[0].Type != forge.InputMessage {
		return nil, forge.Errorf(forge.ErrInvalid, "if_busy steer takes one message (resolutions of open calls start a turn of their own)")
	}
	if len(req.Input[0].Files) > 0 || req.PreviousTurnID != nil || req.NewRoot || req.OutputSchema != nil || !req.Overrides.Empty() {
		return nil, forge.Errorf(forge.ErrInvalid, "if_busy steer joins the running turn: files, previous_turn_id, new_root, output_schema and overrides do not apply (use enqueue)")
	}
	if err := validateShape(req.Input); err != nil {
		return nil, err
	}
	if s, ok := x.addSteer(req.Input[0].Text); ok {
		e.log.Debug("steer message waiting for the running turn's next model call", "session_id", sess.ID, "turn_id", x.turn.ID)
		select {
		case joined := <-s.joined:
			if joined {
				return e.store.GetTurn(ctx, tenant, sess.ID, x.turn.ID)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.enqueue(ctx, tenant, sess, req)
}
