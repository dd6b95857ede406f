// Package eventlog is the one write path and the one read path of session
// events (DESIGN.md "Writes, events and the store"): a sequencer per
// session, write-then-publish over a forge.Store and a forge.Bus, and
// subscriptions that replay the stored log, merge what the bus still holds
// (deltas included) and follow the live tail, with no gap and no
// duplicate.
//
// Every writer goes through a Log: the turn executor, its checkpointer,
// recovery, compaction, and anything that writes to a session outside a
// turn (forum ingestion: drafts with no TurnID). Seqs are reserved in
// blocks in the store before any seq of a block is published, so they are
// never reused, even across a crash; after a restart the first write
// reserves a block above every earlier one.
//
// A Log serializes the writes of a session in its process (a sequencer
// lock held from seq assignment through commit to publish); with
// Config.Fence it also holds the session against other processes for
// that span (distributed mode: any replica may write any session, a
// running turn's owner and forum ingestion alike), and reserves a fresh
// seq block whenever another process wrote the session since its last
// hold. Seq order, commit order and publish order then agree across
// processes, which is what the read side's merge relies on. Deltas are
// published without a hold while this process is the session's last
// writer and nobody holds it.
//
// A write may also carry deltas held back (Draft.BusOnly): they get their
// seqs among the write's stored events and are published after its
// commit, in seq order with them. With a bus whose subscribers all read
// through this Log (the in-process bus: Local), a reader that read the
// store waits for such a write's publishing to end before it takes what
// the bus has (settle), so it still gets every delta below a stored
// event's seq. Across processes a write holds only deltas whose loss to
// such a reader loses no text (heldAcrossProcesses).
package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// Store is what a Log needs from the store.
type Store interface {
	// ReserveSeqs raises the session's reserved bound by n and returns it.
	ReserveSeqs(ctx context.Context, tenant, sessionID string, n int64) (int64, error)
	ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error)
	GetSession(ctx context.Context, tenant, id string) (*forge.Session, error)
	GetTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
	Commit(ctx context.Context, b *forge.Batch) error
	BeginTurn(ctx context.Context, b *forge.BeginTurn) error
}

var _ Store = forge.Store(nil)

// Defaults of Config.
const (
	DefaultSeqBlock = 1024
	DefaultPageSize = 1000
)

// DefaultRetryDelays are the waits before each retry of a failed commit.
var DefaultRetryDelays = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, time.Second}

// Config wires a Log.
type Config struct {
	Store  Store
	Bus    forge.Bus
	Clock  forge.Clock
	Logger *slog.Logger
	// SeqBlock is how many seqs one reservation claims (a store write,
	// amortised over that many events).
	SeqBlock int64
	// RetryDelays: a failed commit or reservation is tried again after
	// each of these waits; errors a caller branches on (ErrTurnEnded,
	// ErrConflict, ErrTurnInProgress, ErrNotFound, ErrInvalid) are final.
	// Nil means DefaultRetryDelays; an empty non-nil slice, no retry.
	RetryDelays []time.Duration
	// Sleep waits between retries; nil sleeps for real (tests inject one
	// that does not).
	Sleep func(ctx context.Context, d time.Duration) error
	// PageSize is how many stored events a replay reads at a time.
	PageSize int
	// Fence, when set, makes this process the only writer of a session
	// while it writes it, across processes (the Redis bus implements it).
	// Nil: this process is the only writer of every session it writes.
	Fence forge.WriterFence
}

// Log is the event log of every session a process writes or reads.
type Log struct {
	store    Store
	bus      forge.Bus
	clock    forge.Clock
	log      *slog.Logger
	block    int64
	retry    []time.Duration
	sleep    func(context.Context, time.Duration) error
	pageSize int
	fence    forge.WriterFence

	// local: every subscriber of the bus reads through this Log (see
	// Local).
	local bool
	// quarter is a quarter of the bus's backlog bound: how far behind
	// the newest event a part's deltas may lie before a text so far row
	// covers them (textsofar.go); 0 when the bus is unbounded.
	quarter int64

	mu   sync.Mutex // guards seqs
	seqs map[string]*sequencer

	// flushers are the goroutines publishing queued deltas (QueueDelta).
	flushers sync.WaitGroup
	// closing ends the flushers' retries of what the bus did not take.
	closing   chan struct{}
	closeOnce sync.Once
}

// processLocal is implemented by a bus whose subscribers are all in this
// process (the in-process bus).
type processLocal interface{ ProcessLocal() bool }

// New returns a Log.
func New(cfg Config) *Log {
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SeqBlock <= 0 {
		cfg.SeqBlock = DefaultSeqBlock
	}
	if cfg.RetryDelays == nil {
		cfg.RetryDelays = DefaultRetryDelays
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	pl, ok := cfg.Bus.(processLocal)
	var quarter int64
	if bl, ok := cfg.Bus.(forge.Backlogger); ok && bl.Backlog() > 0 {
		quarter = max(int64(bl.Backlog())/4, 1)
	}
	return &Log{quarter: quarter, store: cfg.Store, bus: cfg.Bus, clock: cfg.Clock, log: cfg.Logger, block: cfg.SeqBlock,
		retry: cfg.RetryDelays, sleep: cfg.Sleep, pageSize: cfg.PageSize, fence: cfg.Fence, seqs: map[string]*sequencer{},
		local: ok && pl.ProcessLocal(), closing: make(chan struct{})}
}

// Local tells whether the bus is process-local (the in-process bus):
// every subscriber of its sessions reads through this Log, and no other
// process writes them. A write may then carry deltas (Draft.BusOnly): this
// Log makes sure a reader of the store gets a held delta (see settle).
// Across processes (a Redis bus) a reader elsewhere could take a stored
// event from the store before the delta below it reached the bus, so a
// write holds deltas back only where that loses nothing (its part is
// completed in the same write, or no stored event of the write lies above
// the delta: heldAcrossProcesses); other deltas are published on their own
// (PublishDelta, QueueDelta), after the rows before them were committed.
func (l *Log) Local() bool { return l.local }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// final reports errors a retry cannot fix.
func final(err error) bool {
	for _, s := range []error{forge.ErrTurnEnded, forge.ErrConflict, forge.ErrTurnInProgress, forge.ErrNotFound, forge.ErrInvalid} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// Retrying runs op as the Log runs its own commits: again after each of
// Config.RetryDelays while it fails with an error that is not final, with
// a context that outlives a cancelled ctx. For a write that needs no seq
// and no place among the session's events (a turn's checkpoint).
func (l *Log) Retrying(ctx context.Context, op func(ctx context.Context) error) error {
	return l.retrying(ctx, op)
}

// retrying runs op, and again after each retry delay while it fails with
// an error that is not final. op runs with a context that outlives a
// cancelled ctx: the terminal write of a cancelled turn must land.
func (l *Log) retrying(ctx context.Context, op func(ctx context.Context) error) error {
	ctx = context.WithoutCancel(ctx)
	err := op(ctx)
	for i := 0; err != nil && !final(err) && i < len(l.retry); i++ {
		l.log.Warn("store write failed; retrying", "attempt", i+1, "in", l.retry[i], "err", err)
		if serr := l.sleep(ctx, l.retry[i]); serr != nil {
			return err
		}
		err = op(ctx)
	}
	return err
}

// Draft is an event waiting for its seq.
type Draft struct {
	Type string
	// ID is the record the event is about (API.md's envelope id).
	ID string
	// TurnID is the turn the event belongs to; "" for an event outside
	// any turn (a forum message copied into a monologue).
	TurnID   string
	ThreadID string
	// Data is the event's payload, encoded as JSON once the seq is known.
	Data any
	// OnSeq, when set, is called with the event's seq before Data is
	// encoded (turn.done carries its own seq as the turn's last_seq).
	OnSeq func(seq int64)
	// BusOnly marks a delta held back until this write: it is not stored,
	// and is published after the commit, in seq order with the stored
	// events. On a bus shared by processes (not Local) only as
	// heldAcrossProcesses allows.
	BusOnly bool
}

func (l *Log) event(session string, seq int64, d Draft) (forge.Event, error) {
	if d.OnSeq != nil {
		d.OnSeq(seq)
	}
	raw, err := encodeData(d.Data)
	if err != nil {
		return forge.Event{}, fmt.Errorf("encode %s event: %w", d.Type, err)
	}
	ev := forge.Event{Seq: seq, ID: d.ID, Type: d.Type, SessionID: session, CreatedAt: l.clock.Now(), Data: raw}
	if d.TurnID != "" {
		t := d.TurnID
		ev.TurnID = &t
	}
	if d.ThreadID != "" {
		th := d.ThreadID
		ev.ThreadID = &th
	}
	// Encoded once here, for the store and for every subscriber; the data
	// comes from encodeData (Marshal or an AppendJSON), compact already.
	if err := ev.EncodeTrusted(); err != nil {
		return forge.Event{}, fmt.Errorf("encode %s event: %w", d.Type, err)
	}
	if l.quarter > 0 || l.fence != nil {
		typed(&ev, d.Data)
	}
	return ev, nil
}

// Write assigns seqs to drafts, calls commit with the events (it persists
// them and the rows they describe in one transaction; it is retried on
// errors that are not final), then publishes them on the bus, in seq
// order. Nothing is published when commit fails. With no drafts it orders
// a commit of rows alone (a checkpoint) among this process's writes of the
// session. turn.created makes the bus begin the turn's backlog, turn.done
// ends it. A failed publish is logged: the events are stored, and readers
// get them from the store. Drafts marked BusOnly are left out of the
// events commit gets, and published with the others.
//
// Drafts without a TurnID are writes outside any turn (forum messages,
// ingestion copies): with a Fence, any replica may make them, even while
// another runs a turn in the session.
func (l *Log) Write(ctx context.Context, tenant, sessionID string, drafts []Draft, commit func(ctx context.Context, evs []forge.Event) error) ([]forge.Event, error) {
	return l.write(ctx, tenant, sessionID, drafts, plainCommit(commit), false, nil)
}

// commitFunc persists a write's stored events and rows; claim, when not
// nil, is the seq reservation the write must make in its transaction
// (forge.SeqClaim).
type commitFunc func(ctx context.Context, evs []forge.Event, claim *forge.SeqClaim) error

// plainCommit is a commit that makes no seq claim: the Log never asks it
// to (only BeginPrepared passes a bound to claim from).
func plainCommit(commit func(ctx context.Context, evs []forge.Event) error) commitFunc {
	return func(ctx context.Context, evs []forge.Event, _ *forge.SeqClaim) error { return commit(ctx, evs) }
}

// ErrStaleView refuses a write prepared from rows this process may have
// cached, because another process wrote the session since this one last
// held it (BeginPrepared). It is an ErrConflict: prepare the write again
// from the store.
var ErrStaleView = forge.Errorf(forge.ErrConflict, "another process wrote the session since this process last did: the write must be prepared again from the store")

// write is Write; with ifFresh, when a Fence says that another process
// wrote the session since this one last held it, it writes nothing and
// fails with ErrStaleView. seqsRead is the session's reserved seq bound as
// the caller read it (0: not known; see commitLocked).
func (l *Log) write(ctx context.Context, tenant, sessionID string, drafts []Draft, commit commitFunc, ifFresh bool, seqsRead *int64) ([]forge.Event, error) {
	sq := l.sequencer(tenant, sessionID)
	sq.mu.Lock()
	defer sq.mu.Unlock()
	hold := ""
	if l.fence != nil && len(drafts) > 0 {
		if err := l.drainAllLocked(ctx, sq); err != nil {
			return nil, err
		}
		var fresh bool
		var err error
		if hold, fresh, err = l.acquireFreshLocked(ctx, sq); err != nil {
			return nil, err
		}
		if ifFresh && !fresh {
			l.release(ctx, sessionID, hold, nil)
			return nil, ErrStaleView
		}
	}
	return l.commitLocked(ctx, sq, hold, drafts, commit, seqsRead)
}

// commitLocked assigns the drafts' seqs, commits the stored ones, then
// publishes them all (ending the hold, if any).
//
// When the session has no seq block here (another process wrote it last,
// or this one never did) and the caller read the session's reserved bound
// (seqsRead), the block is claimed in the write itself (forge.SeqClaim):
// one commit instead of a reservation's and the write's (issue 22: a turn
// begun on another replica than the last). Should another process have
// reserved since the read, the claim fails, writing nothing, and the write
// is made again with a block reserved as usual.
func (l *Log) commitLocked(ctx context.Context, sq *sequencer, hold string, drafts []Draft, commit commitFunc, seqsRead *int64) ([]forge.Event, error) {
	var claim *forge.SeqClaim
	if seqsRead != nil && sq.next == 0 && int64(len(drafts)) <= l.block {
		claim = &forge.SeqClaim{Above: *seqsRead, Through: *seqsRead + l.block}
		sq.next, sq.reserved = claim.Above+1, claim.Through
	}
	evs, stored, err := l.assignLocked(ctx, sq, drafts)
	if err == nil {
		err = l.retrying(ctx, func(ctx context.Context) error { return commit(ctx, stored, claim) })
		if claim != nil && errors.Is(err, forge.ErrSeqClaimLost) {
			claim = nil
			sq.next, sq.reserved = 0, 0
			if evs, stored, err = l.assignLocked(ctx, sq, drafts); err == nil {
				err = l.retrying(ctx, func(ctx context.Context) error { return commit(ctx, stored, nil) })
			}
		}
	}
	if err != nil && claim != nil {
		sq.next, sq.reserved = 0, 0 // the claimed block was never reserved
	}
	if err != nil {
		if hold != "" {
			l.release(ctx, sq.session, hold, nil)
		}
		return nil, err
	}
	if hold != "" {
		// Stored already: if the bus does not take them now they are
		// published before the session's next events.
		_, _ = l.sendLocked(ctx, sq, hold, evs)
		return evs, nil
	}
	for _, ev := range evs {
		l.publishLocked(ctx, sq, ev)
	}
	return evs, nil
}

// Prepare decides a write while the session is held: it may read what it
// needs from the store (no other writer of the session, in any process,
// writes until the write is published), and returns the drafts and their
// commit. fresh is false when another process may have written the
// session since this one last held it (its cached view of the session may
// be stale). Returning no drafts and a nil commit writes nothing.
type Prepare func(ctx context.Context, fresh bool) ([]Draft, func(ctx context.Context, evs []forge.Event) error, error)

// Update is Write for a writer that must decide under the hold what it
// writes (a forum room: who is a member, which guard fires). It holds the
// session (across processes with a Fence), calls prepare, then assigns
// seqs, commits and publishes as Write does. prepare runs once; a failed
// commit is retried as Write retries it.
func (l *Log) Update(ctx context.Context, tenant, sessionID string, prepare Prepare) ([]forge.Event, error) {
	sq := l.sequencer(tenant, sessionID)
	sq.mu.Lock()
	defer sq.mu.Unlock()
	hold, fresh := "", sq.wrote
	if l.fence != nil {
		if err := l.drainAllLocked(ctx, sq); err != nil {
			return nil, err
		}
		var err error
		if hold, fresh, err = l.acquireFreshLocked(ctx, sq); err != nil {
			return nil, err
		}
		fresh = fresh && sq.wrote
	}
	drafts, commit, err := prepare(ctx, fresh)
	if err != nil || (len(drafts) == 0 && commit == nil) {
		if hold != "" {
			l.release(ctx, sessionID, hold, nil)
		}
		return nil, err
	}
	evs, err := l.commitLocked(ctx, sq, hold, drafts, plainCommit(commit), nil)
	if err != nil {
		return nil, err
	}
	sq.wrote = true
	return evs, nil
}

// Live subscribes to what is published on the session from now on (no
// replay): for a process that only needs to learn that something
// happened (a forum worker watching its forum and monologue on any
// replica). The caller closes it.
func (l *Log) Live(ctx context.Context, sessionID string) (forge.BusSubscription, error) {
	_, sub, err := l.bus.Subscribe(ctx, sessionID, math.MaxInt64)
	return sub, err
}

// assignLocked gives the drafts their seqs and returns their events and,
// of those, the ones to store (all but the held deltas).
func (l *Log) assignLocked(ctx context.Context, sq *sequencer, drafts []Draft) (evs, stored []forge.Event, err error) {
	evs = make([]forge.Event, 0, len(drafts))
	busOnly := 0
	for _, d := range drafts {
		if d.BusOnly {
			busOnly++
		}
	}
	if busOnly > 0 && !l.local && !heldAcrossProcesses(drafts) {
		return nil, nil, errors.New("eventlog: a held delta lies below a stored event of its write that does not complete its part")
	}
	for _, d := range drafts {
		seq, err := l.seqLocked(ctx, sq)
		if err != nil {
			return nil, nil, err
		}
		ev, err := l.event(sq.session, seq, d)
		if err != nil {
			return nil, nil, err
		}
		evs = append(evs, ev)
	}
	stored = evs
	if busOnly > 0 {
		stored = make([]forge.Event, 0, len(evs)-busOnly)
		for i, ev := range evs {
			if !drafts[i].BusOnly {
				stored = append(stored, ev)
			}
		}
	}
	return evs, stored, nil
}

// heldAcrossProcesses reports whether a write may carry its held deltas
// on a bus shared by processes (Redis). There, a reader in another process
// may take the write's stored events from the store before the bus has the
// deltas below them, and it reads the bus only above what it took: it
// never gets those deltas. That loses nothing when each held delta either
// lies above every stored event of the write (the reader gets it from the
// bus), or the write also stores its part's completion (an event about
// the same part, no longer streaming): the completed part carries the
// delta's text, as a replay of the stored log does. A trivial turn's reply
// then shares the turn's terminal write (issue 22: one commit instead of
// two). The turn executor keeps its batches so (thread.beforeStored).
func heldAcrossProcesses(drafts []Draft) bool {
	lastStored := -1
	for i, d := range drafts {
		if !d.BusOnly {
			lastStored = i
		}
	}
	completed := map[string]bool{} // parts completed later in the write
	for i := len(drafts) - 1; i >= 0; i-- {
		d := drafts[i]
		if !d.BusOnly {
			if p, ok := d.Data.(*forge.Part); ok && p.State != forge.StateStreaming {
				completed[d.ID] = true
			}
			continue
		}
		if i < lastStored && !completed[d.ID] {
			return false
		}
	}
	return true
}

// acquireLocked holds the session against other processes' writers; when
// one wrote it since this process's last hold, the cached seq block is
// dropped (the next seq comes from a fresh reservation, above theirs).
func (l *Log) acquireLocked(ctx context.Context, sq *sequencer) (string, error) {
	hold, _, err := l.acquireFreshLocked(ctx, sq)
	return hold, err
}

func (l *Log) acquireFreshLocked(ctx context.Context, sq *sequencer) (string, bool, error) {
	var hold string
	var fresh bool
	err := l.retrying(ctx, func(ctx context.Context) error {
		var err error
		hold, fresh, err = l.fence.Acquire(ctx, sq.session)
		return err
	})
	if err != nil {
		// The bus (the session's Redis server) is down: nothing can be
		// written safely (503, store_error, Retry-After as for a reader).
		return "", false, forge.WithRetryAfter(fmt.Errorf("hold session %s: %w: %w", sq.session, forge.ErrStore, err), BusRetryAfter)
	}
	if !fresh {
		sq.next, sq.reserved = 0, 0
	}
	return hold, fresh, nil
}

// release publishes evs and ends the hold; a failure is logged (the
// events are stored: new readers get them from the store).
func (l *Log) release(ctx context.Context, sessionID, hold string, evs []forge.Event) {
	if err := l.fence.Release(context.WithoutCancel(ctx), sessionID, hold, evs); err != nil {
		l.log.Warn("bus: publish under the session's hold failed", "session_id", sessionID, "events", len(evs), "err", err)
	}
}

// settle returns once no write of the session is between its commit and
// the end of its publishing (each holds the session's sequencer from seq
// assignment to its last publish). A reader calls it after reading the
// store: what the bus returns next then includes every delta held back by
// a write whose stored events it read.
func (l *Log) settle(sessionID string) {
	if !l.local {
		return
	}
	l.mu.Lock()
	sq := l.seqs[sessionID]
	l.mu.Unlock()
	if sq != nil {
		sq.mu.Lock() // waiting for the writer is the point
		sq.mu.Unlock()
	}
}

// publishLocked publishes ev on the bus (no Fence), with the text so far
// rows it must carry; the fold counts ev once the bus took it.
func (l *Log) publishLocked(ctx context.Context, sq *sequencer, ev forge.Event) {
	ctx = context.WithoutCancel(ctx)
	if l.quarter > 0 {
		if sq.folds == nil {
			sq.folds = folds{}
		}
		ev.TextSoFar = sq.folds.rowsFor(&ev, l.quarter)
	}
	if ev.Type == forge.EventTurnCreated && ev.TurnID != nil {
		if err := l.bus.BeginTurn(ctx, ev.SessionID, *ev.TurnID); err != nil {
			l.log.Warn("bus: begin turn failed", "session_id", ev.SessionID, "turn_id", *ev.TurnID, "err", err)
		}
	}
	if err := l.bus.Publish(ctx, ev); err != nil {
		l.log.Warn("bus: publish failed", "session_id", ev.SessionID, "seq", ev.Seq, "type", ev.Type, "err", err)
	} else if l.quarter > 0 {
		sq.folds.apply(&ev)
	}
	if ev.Type == forge.EventTurnDone && ev.TurnID != nil {
		if err := l.bus.EndTurn(ctx, ev.SessionID, *ev.TurnID); err != nil {
			l.log.Warn("bus: end turn failed", "session_id", ev.SessionID, "turn_id", *ev.TurnID, "err", err)
		}
	}
}

// Commit is Write for a running turn's batch: it sets b.Events and
// commits b with the store's Commit (fenced on b.TurnID).
func (l *Log) Commit(ctx context.Context, b *forge.Batch, drafts ...Draft) ([]forge.Event, error) {
	return l.Write(ctx, b.Tenant, b.SessionID, drafts, func(ctx context.Context, evs []forge.Event) error {
		b.Events = evs
		return l.store.Commit(ctx, b)
	})
}

// Begin is Write for a turn's creation: it sets b.Events and
// b.Turn.LastSeq and commits b with the store's BeginTurn.
func (l *Log) Begin(ctx context.Context, tenant string, b *forge.BeginTurn, drafts ...Draft) ([]forge.Event, error) {
	return l.Write(ctx, tenant, b.Turn.SessionID, drafts, func(ctx context.Context, evs []forge.Event) error {
		b.Events = evs
		if len(evs) > 0 {
			b.Turn.LastSeq = evs[len(evs)-1].Seq
		}
		return l.store.BeginTurn(ctx, b)
	})
}

// BeginPrepared is Begin for a turn prepared from rows this process may
// have cached (the store's SessionForTurn and AgentForTurn): with a Fence,
// when another process wrote the session since this one last held it (it
// may have moved the tip), it writes nothing and fails with ErrStaleView,
// at the cost of the hold alone, rather than a store round trip that
// BeginTurn's ExpectTip would refuse. Without a Fence it is Begin (no other
// process writes the session; BeginTurn still fences the tip).
func (l *Log) BeginPrepared(ctx context.Context, tenant string, b *forge.BeginTurn, drafts ...Draft) ([]forge.Event, error) {
	return l.write(ctx, tenant, b.Turn.SessionID, drafts, func(ctx context.Context, evs []forge.Event, claim *forge.SeqClaim) error {
		b.Events, b.Claim = evs, claim
		if len(evs) > 0 {
			b.Turn.LastSeq = evs[len(evs)-1].Seq
		}
		return l.store.BeginTurn(ctx, b)
	}, true, b.SeqsRead)
}

// Close waits, until ctx ends, for the flushers of queued deltas (every
// write drains them, so they end with the turns that queued them).
func (l *Log) Close(ctx context.Context) error {
	l.closeOnce.Do(func() { close(l.closing) })
	done := make(chan struct{})
	go func() { l.flushers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PublishEphemeral publishes an event that has no seq (a forum's
// forum.typing): the session's subscribers open now get it; it is never
// stored or replayed. Its TurnID must be empty.
func (l *Log) PublishEphemeral(ctx context.Context, sessionID string, d Draft) error {
	if d.TurnID != "" || d.OnSeq != nil {
		return forge.Errorf(forge.ErrInvalid, "an ephemeral event belongs to no turn and has no seq")
	}
	ev, err := l.event(sessionID, 0, d)
	if err != nil {
		return err
	}
	return l.bus.PublishEphemeral(ctx, ev)
}

// encodeData is json.Marshal of an event's data, written directly for the
// turns, parts and messages of every turn (forge.Part.AppendJSON).
func encodeData(v any) ([]byte, error) {
	var b []byte
	ok := false
	switch d := v.(type) {
	case forge.DeltaData:
		return d.AppendJSON(make([]byte, 0, len(d.Delta)+16)), nil
	case *forge.Part:
		b, ok = d.AppendJSON(make([]byte, 0, 256))
	case forge.Part:
		b, ok = d.AppendJSON(make([]byte, 0, 256))
	case *forge.Message:
		b, ok = d.AppendJSON(make([]byte, 0, 512))
	case forge.Message:
		b, ok = d.AppendJSON(make([]byte, 0, 512))
	case *forge.Turn:
		b, ok = d.AppendJSON(make([]byte, 0, 512))
	case forge.Turn:
		b, ok = d.AppendJSON(make([]byte, 0, 512))
	}
	if ok {
		return b, nil
	}
	return json.Marshal(v)
}
