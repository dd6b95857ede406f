package engine

import (
	"context"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// thread executes one thread of a turn: the main thread, or a child thread
// running a subagent delegation. Its executor goroutine owns its fields.
type thread struct {
	x     *execution
	id    string
	agent *forge.Agent
	// depth is how many delegations lead to this thread (0: main).
	depth   int
	history []*forge.Message // this thread's model view, oldest first
	// memo holds the model messages of history's settled prefix.
	memo        modelMemo
	resolutions []resolution
	tools       *toolSet
	w           batch
	// heldErr is the failure of a flush made while the model stream was
	// running (releaseHeld); the stream ends with it.
	heldErr error
	// heldSince is when the batch's first held delta was queued.
	heldSince time.Time
	// withheld are deltas streamed while the store lagged, not yet
	// published (thread.delta).
	withheld []withheldDelta
	// iterations counts this thread's model calls; usage sums its calls'
	// usage and its children's.
	iterations int
	usage      forge.Usage
	// obsParent is where a delegated thread's calls are observed (the
	// delegation's tool call); nil for the turn's (observed).
	obsParent context.Context
	// children are the states of the child threads this thread delegated
	// to in this turn (kept in the snapshot, so a paused one resumes).
	children map[string]forge.ThreadState
	// answer, when set, is what the final answer must be (structured
	// output); repairs counts the repair steps taken for it.
	answer  *answerSpec
	repairs int
}

func (x *execution) newThread(id string, agent *forge.Agent, depth int, history []*forge.Message) *thread {
	return &thread{x: x, id: id, agent: agent, depth: depth, history: history, children: map[string]forge.ThreadState{}}
}

func (th *thread) lastMessageID() *string {
	if n := len(th.history); n > 0 {
		id := th.history[n-1].ID
		return &id
	}
	return nil
}

func (th *thread) newMessage(role string) *forge.Message {
	x := th.x
	return &forge.Message{
		ID:        x.e.ids.New(forge.PrefixMessage),
		Tenant:    x.tenant,
		SessionID: x.session.ID,
		TurnID:    x.turn.ID,
		ThreadID:  th.id,
		Role:      role,
		ParentID:  th.lastMessageID(),
		CreatedAt: x.e.clock.Now(),
		Parts:     []*forge.Part{},
	}
}

func (th *thread) newPart(m *forge.Message, typ string) *forge.Part {
	now := th.x.e.clock.Now()
	return &forge.Part{
		ID: th.x.e.ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: m.SessionID,
		TurnID: m.TurnID, Type: typ, CreatedAt: now, UpdatedAt: now,
	}
}

// event queues an event of this thread for the next flush.
func (th *thread) event(typ, id string, data any) {
	th.beforeStored(id, false)
	th.queue(typ, id, data)
}

func (th *thread) queue(typ, id string, data any) {
	th.w.event(eventlog.Draft{Type: typ, ID: id, TurnID: th.x.turn.ID, ThreadID: th.id, Data: data})
}

func (th *thread) putPart(p *forge.Part) { th.w.part(p, th.x.e.clock.Now()) }

// partEvent queues a part row and its event (the part as it is now).
func (th *thread) partEvent(typ string, p *forge.Part) {
	th.beforeStored(p.ID, p.State != forge.StateStreaming)
	th.putPart(p)
	th.queue(typ, p.ID, p.Clone())
}

// messageEvent queues a message envelope row and its event.
func (th *thread) messageEvent(typ string, m *forge.Message) {
	th.beforeStored(m.ID, false)
	th.w.message(m)
	th.queue(typ, m.ID, m.Clone())
}

// beforeStored runs before a stored event about id (and its row) joins the
// batch. On a bus shared by replicas a batch may hold deltas back only
// where a reader on another replica, taking the batch's stored events from
// the store before Redis has the deltas, loses no text
// (eventlog.heldAcrossProcesses): each held delta's part is completed in
// the same batch, or no stored event follows the delta. So when deltas of
// a part still streaming are held and this event does not complete that
// part, the batch is written first (its held deltas then lie above its
// stored events). A reply streamed in one burst completes its part before
// anything else is queued: it shares the turn's terminal write (issue 22).
// completes: the event is id's part, no longer streaming. A failed write
// is recorded (the turn ends store_error) and the batch keeps it all for
// the terminal write, which completes every part.
func (th *thread) beforeStored(id string, completes bool) {
	if len(th.withheld) > 0 {
		th.foldWithheld()
	}
	w := &th.w
	if len(w.heldOpen) == 0 {
		return
	}
	if completes {
		delete(w.heldOpen, id)
	}
	if len(w.heldOpen) > 0 && !th.x.e.events.Local() && th.x.failedWrite() == nil {
		_ = th.flush()
	}
}

// flush commits the thread's pending writes (see execution.commit).
func (th *thread) flush() error {
	if len(th.withheld) > 0 {
		th.foldWithheld()
	}
	return th.x.commit(&th.w, nil, nil)
}

// delta publishes a text or reasoning delta. When the thread has nothing
// pending (the part's row and everything before it are committed) it is
// published at once, on the bus alone: a delta never costs a store write
// (DESIGN.md), and over a bus shared by replicas it is queued for a
// flusher rather than waited for (eventlog.Log.QueueDelta). Otherwise what came before it is written first, so seqs and
// the stored rows stay in order: with hold (over a bus shared by replicas
// too, as beforeStored keeps it safe), the delta is queued in the
// batch instead (the next flush assigns its seq among the rows before and
// after it and publishes it after the commit, eventlog.Draft.BusOnly), and
// that flush comes at the provider's next wait (lingerer) or once deltas
// have been held Config.DeltaMaxHold, whichever is first: a reply that
// fits one burst shares the turn's terminal write, and a long burst's
// first delta is not held until its end.
func (th *thread) delta(sp *streamingPart, text string, hold bool) error {
	x := th.x
	if x.uncovered(time.Now()) {
		// The store is not keeping up (an outage): what is not stored is
		// not shown either, until a checkpoint lands.
		x.streams.append(sp, text)
		th.withhold(sp, text)
		return nil
	}
	if len(th.withheld) > 0 {
		if err := th.releaseWithheld(); err != nil {
			return err
		}
	}
	d := th.deltaDraft(sp, text)
	if th.w.empty() {
		if err := x.e.events.QueueDelta(x.ctx, x.tenant, x.session.ID, d); err != nil {
			return x.writeFailed(err)
		}
		x.streams.append(sp, text)
		return nil
	}
	if hold {
		now := time.Now()
		th.holdDelta(d, now)
		x.streams.append(sp, text)
		if maxHold := x.e.cfg.DeltaMaxHold; maxHold >= 0 && now.Sub(th.heldSince) >= maxHold {
			return th.flush()
		}
		return nil
	}
	if err := th.flush(); err != nil {
		return err
	}
	if err := x.e.events.QueueDelta(x.ctx, x.tenant, x.session.ID, d); err != nil {
		return x.writeFailed(err)
	}
	x.streams.append(sp, text)
	return nil
}

// deltaDraft is the model.delta event of text streamed into sp's part.
func (th *thread) deltaDraft(sp *streamingPart, text string) eventlog.Draft {
	return eventlog.Draft{Type: forge.EventModelDelta, ID: sp.part.ID, TurnID: th.x.turn.ID, ThreadID: th.id,
		Data: forge.DeltaData{Delta: text}}
}

// holdDelta queues d in the thread's batch, held back until it commits
// (eventlog.Draft.BusOnly); now is when it was streamed.
func (th *thread) holdDelta(d eventlog.Draft, now time.Time) {
	d.BusOnly = true
	w := &th.w
	if w.held == 0 {
		th.heldSince = now
	}
	w.event(d)
	w.held++
	if w.heldOpen == nil {
		w.heldOpen = map[string]bool{}
	}
	w.heldOpen[d.ID] = true
}

// withheldDelta is text streamed while the store lagged (execution.uncovered),
// not yet published; the checkpointer has it already.
type withheldDelta struct {
	sp   *streamingPart
	text []byte
}

// withhold keeps text back, joined to the last withheld delta when that is
// of the same part (appended in place: an outage may last a long reply).
func (th *thread) withhold(sp *streamingPart, text string) {
	if n := len(th.withheld); n > 0 && th.withheld[n-1].sp == sp {
		th.withheld[n-1].text = append(th.withheld[n-1].text, text...)
		return
	}
	th.withheld = append(th.withheld, withheldDelta{sp: sp, text: []byte(text)})
}

// releaseWithheld publishes the withheld deltas, the store having caught
// up, as deltas are published (the checkpointer has their text already).
func (th *thread) releaseWithheld() error {
	x := th.x
	if !th.w.empty() {
		return th.flush() // it publishes them after what is pending
	}
	for len(th.withheld) > 0 {
		wd := th.withheld[0]
		if err := x.e.events.QueueDelta(x.ctx, x.tenant, x.session.ID, th.deltaDraft(wd.sp, string(wd.text))); err != nil {
			return x.writeFailed(err)
		}
		th.withheld = th.withheld[1:]
	}
	th.withheld = nil
	return nil
}

// foldWithheld moves the withheld deltas into the thread's batch, held
// back until it commits: a stored event is about to join it, and the
// deltas must keep their place before it. Shown once that write lands,
// they are shown only if stored.
func (th *thread) foldWithheld() {
	now := time.Now()
	for _, wd := range th.withheld {
		th.holdDelta(th.deltaDraft(wd.sp, string(wd.text)), now)
	}
	th.withheld = nil
}

// releaseHeld flushes the thread's writes when they hold deltas back: the
// provider is about to wait for its model, so the deltas it streamed so
// far are written and published now. A failure is kept in th.heldErr.
func (th *thread) releaseHeld() {
	if th.w.held == 0 || th.heldErr != nil {
		return
	}
	if err := th.flush(); err != nil {
		th.heldErr = err
	}
}
