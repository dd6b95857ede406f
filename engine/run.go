package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"sync"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/mcp"
	"github.com/forge-runtime/forge/sandbox"
)

var (
	errTimeout = errors.New("turn timed out")
	errStopped = errors.New("turn stopped")
)

// run is one executing turn. The executor goroutine owns turn, history and
// the pending buffer; mu guards what the checkpointer and cancel touch.
type run struct {
	e           *Engine
	tenant      string
	session     *forge.Session
	agent       *forge.Agent
	turn        *forge.Turn
	log         *sessionLog
	history     []*forge.Message // main thread, oldest first
	resolutions []resolution
	compactOnly bool // a POST /compact turn

	// tools this turn can call, resolved by prepareTools (executor-owned)
	tools      map[string]forge.Tool
	extraTools map[string]forge.Tool
	mcpInfo    []mcp.Initialized
	// threadID is the thread this run executes: the session's main thread,
	// or a child thread for a subagent delegation (depth > 0).
	threadID string
	depth    int
	// children are the states of child threads this turn touched
	// (executor-owned), kept in the snapshot.
	children map[string]forge.ThreadState
	// baseThreads are the thread states of the turn chained from.
	baseThreads map[string]forge.ThreadState

	// caps are the states of the capabilities this turn uses; baseCaps the
	// states it started from (the chained-from turn's snapshot).
	caps     map[string]*capState
	baseCaps map[string]json.RawMessage
	// mcpErrors are the MCP servers that failed to start this turn.
	mcpErrors []error
	// authActions are MCP servers that need a token before the turn goes on.
	authActions []forge.RequiredAction
	sandbox     *sandbox.Sandbox

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed after the terminal write

	// pending writes, flushed in one transaction (executor-owned)
	pend      []pendingEvent
	pendParts map[string]*forge.Part
	partOrder []string
	pendMsgs  map[string]*forge.Message
	msgOrder  []string

	mu     sync.Mutex // guards the following
	reason string     // cancel reason, set once
	// reasonText is the client's free text given with a cancel.
	reasonText string
	streaming  map[string]*streamingPart
}

// streamingPart is a text or reasoning part receiving deltas.
type streamingPart struct {
	part  *forge.Part
	buf   []byte
	dirty bool // text changed since the last checkpoint
}

func (e *Engine) newRun(tenant string, sess *forge.Session, agent *forge.Agent, turn *forge.Turn, history []*forge.Message, res []resolution) *run {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &run{
		e: e, tenant: tenant, session: sess, agent: agent, turn: turn,
		log:         e.sessionLog(tenant, sess.ID),
		threadID:    sess.MainThreadID,
		children:    map[string]forge.ThreadState{},
		history:     history,
		resolutions: res,
		ctx:         ctx,
		cancel:      cancel,
		done:        make(chan struct{}),
		pendParts:   map[string]*forge.Part{},
		pendMsgs:    map[string]*forge.Message{},
		streaming:   map[string]*streamingPart{},
	}
}

// stop cancels the run; the first reason given wins.
func (r *run) stop(reason string) { r.stopWith(reason, "") }

// stopWith cancels the run with a reason code and the client's free text.
func (r *run) stopWith(reason, message string) {
	r.mu.Lock()
	if r.reason == "" {
		r.reason, r.reasonText = reason, message
	}
	r.mu.Unlock()
	r.cancel(errStopped)
}

// cancelReason is why the run's context ended.
func (r *run) cancelReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason != "" {
		return r.reason
	}
	if errors.Is(context.Cause(r.ctx), errTimeout) {
		return forge.CancelTimeout
	}
	return forge.CancelClient
}

func (r *run) lastMessageID() *string {
	if n := len(r.history); n > 0 {
		id := r.history[n-1].ID
		return &id
	}
	return nil
}

func (r *run) newMessage(role string) *forge.Message {
	return &forge.Message{
		ID:        r.e.ids.New(forge.PrefixMessage),
		Tenant:    r.tenant,
		SessionID: r.session.ID,
		TurnID:    r.turn.ID,
		ThreadID:  r.threadID,
		Role:      role,
		ParentID:  r.lastMessageID(),
		CreatedAt: r.e.clock.Now(),
		Parts:     []*forge.Part{},
	}
}

func (r *run) newPart(m *forge.Message, typ string) *forge.Part {
	now := r.e.clock.Now()
	return &forge.Part{
		ID: r.e.ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: m.SessionID,
		TurnID: m.TurnID, Type: typ, CreatedAt: now, UpdatedAt: now,
	}
}

// event queues an event and the row it describes for the next flush.
func (r *run) event(typ, id, threadID string, data any) {
	r.pend = append(r.pend, pendingEvent{typ: typ, id: id, turnID: r.turn.ID, threadID: threadID, data: data})
}

func (r *run) putPart(p *forge.Part) {
	c := p.Clone()
	c.UpdatedAt = r.e.clock.Now()
	if _, ok := r.pendParts[p.ID]; !ok {
		r.partOrder = append(r.partOrder, p.ID)
	}
	r.pendParts[p.ID] = c
}

func (r *run) putMessage(m *forge.Message) {
	c := *m
	c.Parts = nil
	if _, ok := r.pendMsgs[m.ID]; !ok {
		r.msgOrder = append(r.msgOrder, m.ID)
	}
	r.pendMsgs[m.ID] = &c
}

// partEvent queues a part row and its event (the part as it is now).
func (r *run) partEvent(typ string, m *forge.Message, p *forge.Part) {
	r.putPart(p)
	r.event(typ, p.ID, m.ThreadID, p.Clone())
}

// messageEvent queues a message envelope row and its event.
func (r *run) messageEvent(typ string, m *forge.Message) {
	r.putMessage(m)
	r.event(typ, m.ID, m.ThreadID, m.Clone())
}

func (r *run) hasPending() bool {
	return len(r.pend) > 0 || len(r.partOrder) > 0 || len(r.msgOrder) > 0
}

// flush commits the pending rows and events in one fenced transaction,
// then publishes the events. terminal, when set, is the turn's terminal
// write (with its snapshot).
func (r *run) flush(terminal *forge.Snapshot) error {
	if !r.hasPending() && terminal == nil {
		return nil
	}
	b := &forge.Batch{Tenant: r.tenant, SessionID: r.session.ID, TurnID: r.turn.ID, Snapshot: terminal}
	for _, id := range r.msgOrder {
		b.Messages = append(b.Messages, r.pendMsgs[id])
	}
	for _, id := range r.partOrder {
		b.Parts = append(b.Parts, r.pendParts[id])
	}
	events := r.pend
	r.pend, r.partOrder, r.msgOrder = nil, nil, nil
	clear(r.pendParts)
	clear(r.pendMsgs)
	_, err := r.e.write(r.ctx, r.log, events, func(ctx context.Context, evs []forge.Event) error {
		b.Events = evs
		if terminal != nil {
			b.Turn = r.turn
		}
		if err := r.e.store.Commit(ctx, b); err != nil {
			return err
		}
		if terminal != nil {
			// The turn has ended in the store: a client that sees turn.done
			// (published right after this) may start the next turn at once.
			r.e.histories.put(r.session.ID, r.turn.ID, r.history)
			r.e.unregister(r)
		}
		return nil
	})
	return err
}

// delta publishes a text or reasoning delta, after flushing what came
// before it so seqs and the stored rows stay in order.
func (r *run) delta(sp *streamingPart, threadID, text string) error {
	if r.hasPending() {
		if err := r.flush(nil); err != nil {
			return err
		}
	}
	// Published first, then added: under the session log's lock a part's
	// text is exactly what its published deltas say (see subscribe).
	if err := r.e.publishDelta(r.ctx, r.log, pendingEvent{
		typ: forge.EventModelDelta, id: sp.part.ID, turnID: r.turn.ID, threadID: threadID,
		data: forge.DeltaData{Delta: text},
	}); err != nil {
		return err
	}
	r.mu.Lock()
	sp.buf = append(sp.buf, text...)
	sp.dirty = true
	r.mu.Unlock()
	return nil
}

// streamingRows returns the rows of the parts still streaming, with the
// text published so far. Call it holding the session log's lock.
func (r *run) streamingRows() []*forge.Part {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := make([]*forge.Part, 0, len(r.streaming))
	for _, sp := range r.streaming {
		c := sp.part.Clone()
		c.Text = string(sp.buf)
		rows = append(rows, c)
	}
	return rows
}

// startStreaming registers a part receiving deltas.
func (r *run) startStreaming(p *forge.Part) *streamingPart {
	sp := &streamingPart{part: p}
	r.mu.Lock()
	r.streaming[p.ID] = sp
	r.mu.Unlock()
	return sp
}

// endStreaming moves the streamed text onto the part and stops
// checkpointing it.
func (r *run) endStreaming(sp *streamingPart, state string) {
	r.mu.Lock()
	sp.part.Text = string(sp.buf)
	sp.part.State = state
	delete(r.streaming, sp.part.ID)
	r.mu.Unlock()
}

// checkpointLoop rewrites streaming parts' rows with their text so far about
// once per interval, so a crash loses at most that much text.
func (r *run) checkpointLoop(stop <-chan struct{}) {
	t := time.NewTicker(r.e.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.checkpoint()
		}
	}
}

func (r *run) checkpoint() {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []*forge.Part
	r.mu.Lock()
	for _, sp := range r.streaming {
		if !sp.dirty {
			continue
		}
		c := sp.part.Clone()
		c.Text = string(sp.buf)
		c.UpdatedAt = r.e.clock.Now()
		parts = append(parts, c)
		sp.dirty = false
	}
	r.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	err := r.e.store.Commit(context.WithoutCancel(r.ctx), &forge.Batch{Tenant: r.tenant, SessionID: r.session.ID, TurnID: r.turn.ID, Parts: parts})
	if err != nil && !errors.Is(err, forge.ErrTurnEnded) {
		r.e.log.Warn("checkpoint failed", "turn", r.turn.ID, "err", err)
	}
}
