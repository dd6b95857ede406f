package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

var (
	errTimeout = errors.New("turn timed out")
	errStopped = errors.New("turn stopped")
	errLost    = errors.New("turn lost to another replica")
)

// storeError is a write that still failed after its retries: the turn
// ends errored with code store_error, and nothing that depends on the
// unsaved state (a tool call) happens.
type storeError struct{ err error }

func (e *storeError) Error() string { return "the turn could not be saved: " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// execution is one executing turn: what its threads share. The main
// thread's executor goroutine owns turn; child threads run inside the
// main thread's tool calls.
type execution struct {
	e       *Engine
	tenant  string
	session *forge.Session
	turn    *forge.Turn
	// base is what the turn chained from left: thread states, capability
	// states and extra snapshot state (MCP info), carried forward.
	base        *forge.Snapshot
	compactOnly bool // a POST /compact turn
	main        *thread

	ctx    context.Context
	cancel context.CancelCauseFunc
	// files are the attachments' contents read for this turn's model
	// calls (each file is read from the store once per turn).
	files fileCache
	done  chan struct{} // closed after the terminal write and its publishing
	// ended is closed once the turn has ended in the store (its terminal
	// write committed, or it ended elsewhere), before anything of that
	// write is published: a waiter may answer then.
	ended chan struct{}
	// observedEnd makes the observer hear of the end once.
	observedEnd sync.Once
	endedOnce   sync.Once
	// begun is closed once the turn's creation landed or failed (then
	// beginErr is set, before).
	begun    chan struct{}
	beginErr error

	// leased is set once the turn is in the store (its lease with it):
	// the lease keeper renews it from then on.
	leased atomic.Bool
	// lost is set when the turn ended elsewhere: another replica took its
	// lease (or ended it). The execution stops and writes nothing more.
	lost atomic.Bool
	// finishing is set once the terminal write has begun: it deletes the
	// lease, so a renewal that finds none proves nothing, and the write's
	// own fence says whether the turn was still this process's.
	finishing atomic.Bool
	// noneQueued is set when the terminal write found no queued turn in
	// the session (forge.Batch.NoneQueued); enqueued when a request of
	// this process queued one while the turn was registered as running
	// (its own look for it, when it was queued, found the turn running).
	// The end looks for a queued turn unless noneQueued and not enqueued.
	noneQueued, enqueued atomic.Bool

	// obsCtx is the observer's context of the turn (observer.go); nil
	// without an observer. endedElsewhere marks a terminal write that lost.
	// Both belong to the executor.
	obsCtx         context.Context
	endedElsewhere bool

	// streams are the parts of every thread receiving deltas, checkpointed
	// about once per CheckpointInterval.
	streams checkpointer
	// coveredAt (unix nanoseconds, 0 until the checkpoint loop starts) is
	// when the streamed text last was all stored: the last checkpoint
	// taken that committed. Deltas are withheld while it lags (see
	// uncovered).
	coveredAt atomic.Int64
	// rows orders the commits of the turn's rows: its batches (taken
	// inside the session's sequencer) and its checkpoints (which do not
	// take the sequencer).
	rows sync.Mutex
	// output counts what the turn's model calls produce against the
	// server's limits.
	output *outputBudget
	// releaseQuota gives back the turn's slot of its tenant's quota (nil:
	// it took none); the executor calls it once the turn has ended.
	releaseQuota func()

	mu sync.Mutex // guards the following
	// reason is the cancel reason, set once; reasonText the client's text.
	reason, reasonText string
	// storeErr is the first write that failed after its retries.
	storeErr error
	// mcpInits are the MCP servers started by this turn's threads.
	mcpInits []forge.MCPInitialized
	// sandbox is the session's sandbox once a thread of the turn opened
	// it; workspace the last workspace snapshot a step of the turn kept.
	sandbox   forge.Sandbox
	workspace *forge.WorkspaceSnapshot
	// checkpoints runs the checkpointer's loop once a streaming part's row
	// is stored; checkpointsOff is set when the turn's loop has ended.
	checkpoints    *checkpointLoop
	checkpointsOff bool
	// steers are messages of if_busy steer requests waiting to join the
	// main thread before its next model call; steersOff is set once the
	// loop has ended (they then run as the next turns).
	steers    []*steer
	steersOff bool
}

func (e *Engine) newExecution(tenant string, sess *forge.Session, turn *forge.Turn, base *forge.Snapshot) *execution {
	ctx, cancel := context.WithCancelCause(context.Background())
	if base == nil {
		base = &forge.Snapshot{}
	}
	return &execution{
		e: e, tenant: tenant, session: sess, turn: turn, base: base,
		ctx: ctx, cancel: cancel, done: make(chan struct{}), ended: make(chan struct{}), begun: make(chan struct{}),
		streams: checkpointer{parts: map[string]*streamingPart{}},
		output:  newOutputBudget(e.cfg.MaxTurnOutputBytes, e.cfg.MaxTurnOutputTokens),
	}
}

// errNotBegun ends an execution whose turn's creation failed to commit.
var errNotBegun = errors.New("the turn could not be created")

// began records the outcome of the turn's creation, which the execution
// waits for before its first write (awaitBegun).
func (x *execution) began(err error) {
	if err != nil {
		x.beginErr = err
		x.cancel(errNotBegun)
	}
	close(x.begun)
}

// awaitBegun blocks until the turn's creation is committed; false when it
// failed: the turn does not exist, and nothing may be written for it.
func (x *execution) awaitBegun() bool {
	<-x.begun
	return x.beginErr == nil
}

// speculative reports whether the turn may run before its creation is
// committed, its first model call overlapping that write: only when this
// process alone serves the session (eventlog.Log.Local: the creation can
// then fail only on a store failure, not because another process runs a
// turn there, so no model call is spent on a turn refused), for a plain
// message (or a compaction) with no effect to prepare (no sandbox to open,
// no MCP server to start): until its first write such a turn only calls
// the model. Others wait for the creation first.
func (x *execution) speculative() bool {
	th := x.main
	return x.e.events.Local() && th.resolutions == nil && !th.usesSandbox() &&
		(x.e.cfg.MCP == nil || len(th.agent.MCPServers) == 0)
}

// freeQuota gives back the turn's slot of its tenant's quota, if it took
// one (once).
func (x *execution) freeQuota() {
	if x.releaseQuota != nil {
		x.releaseQuota()
	}
}

// markEnded closes x.ended (once).
func (x *execution) markEnded() { x.endedOnce.Do(func() { close(x.ended) }) }

// stop cancels the turn with a reason code and the client's free text; the
// first reason given wins.
func (x *execution) stop(reason, message string) {
	x.mu.Lock()
	if x.reason == "" {
		x.reason, x.reasonText = reason, message
	}
	x.mu.Unlock()
	x.cancel(errStopped)
}

// loseTurn stops an execution whose turn is no longer this process's to
// write (its lease was taken, or the turn ended elsewhere): its writes
// would lose anyway, so it makes none, not even a terminal one.
func (x *execution) loseTurn(why string) {
	if x.lost.Swap(true) {
		return
	}
	x.e.log.Warn("turn lost: stopping without writing", "session_id", x.session.ID, "turn_id", x.turn.ID, "why", why)
	x.cancel(errLost)
}

// cancelReason is why the turn's context ended.
func (x *execution) cancelReason() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.reason != "" {
		return x.reason
	}
	if errors.Is(context.Cause(x.ctx), errTimeout) {
		return forge.CancelTimeout
	}
	return forge.CancelClient
}

func (x *execution) cancelled() bool { return x.ctx.Err() != nil }

// failedWrite returns the write that failed for good, if any.
func (x *execution) failedWrite() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.storeErr
}

func (x *execution) noteMCP(inits []forge.MCPInitialized) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.mcpInits = append(x.mcpInits, inits...)
}

func (x *execution) noteSandbox(sb forge.Sandbox) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.sandbox = sb
}

func (x *execution) noteSnapshot(snap *forge.WorkspaceSnapshot) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.workspace = snap
}

// sandboxSnapshot is the sandbox info the turn snapshot keeps (Extra
// "sandbox", forge.SandboxInfo) when the turn opened the sandbox: whether
// commands are isolated, and the workspace snapshot the files were last
// saved as or restored to. Nil when the turn did not open it (the base
// turn's info is carried).
func (x *execution) sandboxSnapshot() json.RawMessage {
	x.mu.Lock()
	sb, snap := x.sandbox, x.workspace
	x.mu.Unlock()
	if sb == nil || x.e.cfg.Sandboxes == nil {
		return nil
	}
	info := forge.SandboxInfo{Isolated: x.e.cfg.Sandboxes.Isolated()}
	if ss, ok := sb.(forge.SnapshotSandbox); ok {
		if latest := ss.LatestSnapshot(); latest != nil {
			snap = latest
		}
	}
	if snap == nil {
		// None kept yet: the one an earlier turn named still stands.
		var base forge.SandboxInfo
		if raw := x.base.Extra["sandbox"]; raw != nil && json.Unmarshal(raw, &base) == nil && base.Snapshot != "" {
			snap = &forge.WorkspaceSnapshot{ID: base.Snapshot, Partial: base.SnapshotPartial}
		}
	}
	if snap != nil {
		info.Snapshot, info.SnapshotPartial = snap.ID, snap.Partial
	}
	return mustJSON(info)
}

// mcpSnapshot is the MCP info the snapshot keeps: the base turn's, updated
// by the servers this turn started.
func (x *execution) mcpSnapshot() (json.RawMessage, error) {
	var infos []forge.MCPInitialized
	if raw := x.base.Extra["mcp"]; raw != nil {
		if err := json.Unmarshal(raw, &infos); err != nil {
			return nil, fmt.Errorf("snapshot mcp info: %w", err)
		}
	}
	x.mu.Lock()
	inits := append([]forge.MCPInitialized(nil), x.mcpInits...)
	x.mu.Unlock()
	if len(inits) == 0 {
		return x.base.Extra["mcp"], nil
	}
	for _, in := range inits {
		replaced := false
		for i := range infos {
			if infos[i].Server == in.Server {
				infos[i], replaced = in, true
			}
		}
		if !replaced {
			infos = append(infos, in)
		}
	}
	return json.Marshal(infos)
}

// commit writes w's rows and events in one transaction fenced on the turn,
// then publishes the events (through the event log, which retries).
// terminal, when set, makes it the turn's terminal write with that
// snapshot; committed, when set, runs once the transaction landed and
// before anything is published. On success w is emptied; on failure it
// keeps everything, so a later write (the terminal one) carries it, and
// the failure is recorded: the turn then ends store_error.
func (x *execution) commit(w *batch, terminal *forge.Snapshot, committed func()) error {
	if w.empty() && terminal == nil {
		return nil
	}
	if !x.awaitBegun() {
		return errNotBegun
	}
	b := &forge.Batch{Tenant: x.tenant, SessionID: x.session.ID, TurnID: x.turn.ID, Snapshot: terminal,
		Messages: w.messages(), Parts: w.parts(), Owner: x.e.owner()}
	if terminal != nil {
		b.Turn = x.turn
		x.finishing.Store(true)
	}
	_, err := x.e.events.Write(x.ctx, x.tenant, x.session.ID, w.events, func(ctx context.Context, evs []forge.Event) error {
		b.Events = evs
		x.rows.Lock()
		err := x.e.store.Commit(ctx, b)
		x.rows.Unlock()
		if err != nil {
			return err
		}
		if b.NoneQueued {
			x.noneQueued.Store(true)
		}
		if committed != nil {
			committed()
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, forge.ErrTurnEnded) {
			x.loseTurn(err.Error())
			return err
		}
		return x.writeFailed(err)
	}
	if len(w.opened) > 0 && x.streams.stored(w.opened) {
		x.startCheckpoints()
	}
	w.reset()
	return nil
}

// writeFailed records a write that failed for good and returns it as a
// *storeError.
func (x *execution) writeFailed(err error) error {
	se := &storeError{err: err}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.storeErr == nil {
		x.storeErr = se
	}
	return se
}

// batch is a thread's pending writes: rows and the events describing them,
// committed together at the points where order matters (before a part's
// first delta, before tools run, each tool result, the terminal write).
// The thread's executor owns it.
type batch struct {
	events []eventlog.Draft
	// held counts the deltas among events (held back until the commit);
	// heldOpen are the parts with held deltas that no event of the batch
	// completes yet (thread.beforeStored).
	held     int
	heldOpen map[string]bool
	// opened are the streaming parts whose first row is in this batch:
	// they may be checkpointed once it is committed.
	opened    []*streamingPart
	partRows  map[string]*forge.Part
	partOrder []string
	msgRows   map[string]*forge.Message
	msgOrder  []string
}

func (w *batch) empty() bool {
	return len(w.events) == 0 && len(w.partOrder) == 0 && len(w.msgOrder) == 0
}

func (w *batch) event(d eventlog.Draft) { w.events = append(w.events, d) }

// part queues p's row as it is now, updated at now.
func (w *batch) part(p *forge.Part, now time.Time) {
	if w.partRows == nil {
		w.partRows = map[string]*forge.Part{}
	}
	if _, ok := w.partRows[p.ID]; !ok {
		w.partOrder = append(w.partOrder, p.ID)
	}
	c := p.Clone()
	c.UpdatedAt = now
	w.partRows[p.ID] = c
}

// message queues m's envelope row (its parts are queued on their own).
func (w *batch) message(m *forge.Message) {
	if w.msgRows == nil {
		w.msgRows = map[string]*forge.Message{}
	}
	c := *m
	c.Parts = nil
	if _, ok := w.msgRows[m.ID]; !ok {
		w.msgOrder = append(w.msgOrder, m.ID)
	}
	w.msgRows[m.ID] = &c
}

func (w *batch) parts() []*forge.Part {
	out := make([]*forge.Part, 0, len(w.partOrder))
	for _, id := range w.partOrder {
		out = append(out, w.partRows[id])
	}
	return out
}

func (w *batch) messages() []*forge.Message {
	out := make([]*forge.Message, 0, len(w.msgOrder))
	for _, id := range w.msgOrder {
		out = append(out, w.msgRows[id])
	}
	return out
}

func (w *batch) reset() {
	w.events, w.partOrder, w.msgOrder, w.opened, w.held = nil, nil, nil, nil, 0
	clear(w.heldOpen)
	clear(w.partRows)
	clear(w.msgRows)
}
