// Package forum runs forums (API.md "Forums", DESIGN.md "Forum and
// monologue"): rooms where humans and agents talk, each agent thinking in
// a private monologue. A room (room.go) owns every write to its forum
// session; a worker per active agent stint (worker.go) copies the room's
// messages into the stint's monologue, runs the monologue's turns through
// the engine, swaps the monologue when it fills up (swap.go) and
// publishes its replies. The Service owns rooms and workers: Open starts
// the workers of the active stints and finishes what a crash left, Close
// stops them.
package forum

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/eventlog"
)

// Engine is what the forum layer needs of the engine: monologue turns, and
// the engine's event log (one sequencer per session in a process).
type Engine interface {
	StartTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, error)
	WaitTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
	Cancel(ctx context.Context, tenant, sessionID, reason string) (*forge.Turn, error)
	DeleteSession(ctx context.Context, tenant, sessionID string) error
	Log() *eventlog.Log
}

var _ Engine = (*engine.Engine)(nil)

// Config wires a Service.
type Config struct {
	Store  forge.Store
	Engine Engine
	// Models, when it implements engine.ContextWindows, gives the context
	// window of agents that set none (the monologue swap threshold).
	Models any
	Clock  forge.Clock
	// IDs must be the engine's generator: the forum layer orders copies
	// and turns by the time in their ids, which one monotonic generator
	// keeps exact within a millisecond.
	IDs    forge.IDGen
	Logger *slog.Logger
	// Sweep is how often a worker looks again at what it could not do
	// (a failed write, a turn that could not start); 0 means 1 s.
	Sweep time.Duration
	// OnCopy, when set, is called after each copy of a forum message into
	// a monologue (benchmarks).
	OnCopy func(sourceMessageID string)
	// Locks, when set, makes one replica at a time run each agent stint's
	// worker (distributed mode; *redis.Bus implements it). Nil: this
	// process runs every stint's worker.
	Locks Locks
	// LockTTL is how long a stint's lock outlives its holder; 0 means 10 s.
	// The holder renews it every Sweep.
	LockTTL time.Duration
}

// Locks are named locks shared by the replicas.
type Locks interface {
	// TryLock takes the lock for ttl, or extends it when this process
	// holds it, and reports whether this process holds it now.
	TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error)
	// Unlock releases it if this process holds it.
	Unlock(ctx context.Context, name string) error
}

// Service runs the forums of a process.
type Service struct {
	store   forge.Store
	eng     Engine
	log     *eventlog.Log
	models  any
	clock   forge.Clock
	ids     forge.IDGen
	logger  *slog.Logger
	sweep   time.Duration
	onCopy  func(string)
	locks   Locks
	lockTTL time.Duration
	// discovered is closed when the discovery loop (distributed mode) has
	// returned.
	discovered chan struct{}

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex         // guards the following
	rooms   map[string]*room   // by forum id
	workers map[string]*worker // by participant id
	closed  bool
}

// New returns a Service; call Open before serving and Close to stop.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.IDs == nil {
		cfg.IDs = forge.NewULIDGen(cfg.Clock)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = time.Second
	}
	if cfg.LockTTL <= 0 {
		cfg.LockTTL = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{store: cfg.Store, eng: cfg.Engine, log: cfg.Engine.Log(), models: cfg.Models, clock: cfg.Clock,
		ids: cfg.IDs, logger: cfg.Logger, sweep: cfg.Sweep, onCopy: cfg.OnCopy, locks: cfg.Locks, lockTTL: cfg.LockTTL,
		ctx: ctx, cancel: cancel, rooms: map[string]*room{}, workers: map[string]*worker{}}
}

// Open starts a worker for every active agent stint, each first finishing
// what a crash left. Call it after the engine's Recover (which ends the
// turns a crash abandoned).
func (s *Service) Open(ctx context.Context) error {
	if err := s.discover(ctx); err != nil {
		return err
	}
	if s.locks != nil {
		// Stints joined on other replicas get a worker here too (which
		// acts only if it takes the stint's lock), and a stint that left
		// elsewhere loses its worker.
		s.discovered = make(chan struct{})
		go func() {
			defer close(s.discovered)
			t := time.NewTicker(3 * s.sweep)
			defer t.Stop()
			for {
				select {
				case <-s.ctx.Done():
					return
				case <-t.C:
				}
				if err := s.discover(s.ctx); err != nil && s.ctx.Err() == nil {
					s.logger.Warn("forum: reading the active stints", "err", err)
				}
			}
		}()
	}
	return nil
}

// discover starts a worker for every active agent stint that has none here
// and stops those of stints no longer active.
func (s *Service) discover(ctx context.Context) error {
	stints, err := s.store.ActiveAgentStints(ctx)
	if err != nil {
		return err
	}
	active := map[string]bool{}
	for _, p := range stints {
		active[p.ID] = true
	}
	s.mu.Lock()
	var gone []string
	for id := range s.workers {
		if !active[id] {
			gone = append(gone, id)
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		s.stopWorker(id)
	}
	for _, p := range stints {
		if s.worker(p.ID) != nil {
			continue
		}
		r, err := s.room(ctx, p.Tenant, p.ForumID)
		if err != nil {
			return err
		}
		r.mu.Lock()
		stint := r.active[p.ID]
		if stint == nil && s.locks != nil {
			// Joined on another replica since this one loaded the room.
			if err := r.load(ctx); err != nil {
				r.mu.Unlock()
				return err
			}
			stint = r.active[p.ID]
		}
		r.mu.Unlock()
		if stint != nil {
			s.startWorker(r, stint, true)
		}
	}
	return nil
}

// Close stops every worker and waits for them.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	ws := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	s.cancel()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.discovered != nil {
		<-s.discovered
	}
	return nil
}

// forget drops a worker that stopped by itself (its stint ended on another
// replica).
func (s *Service) forget(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[w.stint.ID] == w {
		delete(s.workers, w.stint.ID)
	}
}

func (s *Service) startWorker(r *room, p *forge.Participant, recover bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.workers[p.ID] != nil {
		return
	}
	ctx, stop := context.WithCancel(s.ctx)
	stint := *p
	w := &worker{s: s, room: r, stop: stop, done: make(chan struct{}), wake: make(chan struct{}, 1), stint: &stint}
	s.workers[p.ID] = w
	go w.run(ctx, recover)
}

// takeWorker removes a stint's worker from the service, to stop it, and
// returns it: nil when none runs here.
func (s *Service) takeWorker(participantID string) *worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workers[participantID]
	delete(s.workers, participantID)
	return w
}

// stopWorker stops a stint's worker here and waits for it.
func (s *Service) stopWorker(participantID string) {
	w := s.takeWorker(participantID)
	if w == nil {
		return
	}
	w.stop()
	<-w.done
	s.forget(w)
}

// finishWorker ends the worker of a stint that has left (its leave is
// recorded): the worker copies the messages it was handed, or missed,
// up to until, starts no turn, and stops. The stint's running monologue
// turn is cancelled before (a compaction the worker waits for ends) and
// after (a turn the worker started before it saw the leave).
func (s *Service) finishWorker(p *forge.Participant, until string) {
	w := s.takeWorker(p.ID)
	if w != nil {
		w.finish(until)
	}
	s.cancelMonologue(p)
	if w == nil {
		return
	}
	<-w.done
	w.stop()
	s.forget(w)
	if mono := w.monologue(); mono != p.Metadata.MonologueID { // the worker has returned: its fields are ours
		q := *p
		q.Metadata.MonologueID = mono
		p = &q
	}
	s.cancelMonologue(p)
}

// cancelMonologue cancels the running turn of a leaving stint's
// monologue, on whichever replica runs it, and waits for its end.
func (s *Service) cancelMonologue(p *forge.Participant) {
	if p.Metadata.MonologueID == "" {
		return
	}
	if _, err := s.eng.Cancel(context.WithoutCancel(s.ctx), p.Tenant, p.Metadata.MonologueID, "the agent left the forum"); err != nil &&
		!errors.Is(err, forge.ErrConflict) && !errors.Is(err, forge.ErrNotFound) {
		s.logger.Warn("forum: cancelling a leaving stint's turn", "participant_id", p.ID, "err", err)
	}
}

func (s *Service) worker(participantID string) *worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers[participantID]
}

func (s *Service) session(ctx context.Context, tenant, id string) (*forge.Session, error) {
	return s.store.GetSession(ctx, tenant, id)
}

// room returns the forum's room, loading it on first use. A session that
// is not a forum is not_found.
func (s *Service) room(ctx context.Context, tenant, forumID string) (*room, error) {
	s.mu.Lock()
	r := s.rooms[forumID]
	s.mu.Unlock()
	if r != nil && r.tenant == tenant {
		return r, nil
	}
	sess, err := s.store.GetSession(ctx, tenant, forumID)
	if err != nil || sess.Kind != forge.KindForum {
		return nil, forge.Errorf(forge.ErrNotFound, "forum %q not found", forumID)
	}
	r = &room{s: s, tenant: tenant, id: forumID, guards: forge.DefaultForumGuards()}
	if sess.Guards != nil {
		r.guards = sess.Guards.Bounded()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.mu.Lock()
	if prev := s.rooms[forumID]; prev != nil {
		s.mu.Unlock()
		return prev, nil
	}
	s.rooms[forumID] = r
	s.mu.Unlock()
	if err := r.load(ctx); err != nil {
		s.mu.Lock()
		delete(s.rooms, forumID)
		s.mu.Unlock()
		return nil, err
	}
	return r, nil
}

func (s *Service) newMonologue(tenant, forumID, participantID, agent string) *forge.Session {
	now := s.clock.Now()
	meta, _ := json.Marshal(map[string]string{"forum_id": forumID, "participant_id": participantID})
	return &forge.Session{ID: s.ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindMonologue, Agent: agent,
		MainThreadID: s.ids.New(forge.PrefixThread), Metadata: meta, CreatedAt: now, UpdatedAt: now}
}

// CreateForum creates a forum session; its guards are kept within their
// bounds (forge.ForumGuards.Bounded: the HTTP API refuses values beyond).
func (s *Service) CreateForum(ctx context.Context, tenant, title string, meta json.RawMessage, guards forge.ForumGuards) (*forge.Session, error) {
	guards = guards.Bounded()
	now := s.clock.Now()
	f := &forge.Session{ID: s.ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindForum, Title: title,
		MainThreadID: s.ids.New(forge.PrefixThread), Metadata: meta, Guards: &guards, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreateSession(ctx, f); err != nil {
		return nil, err
	}
	return f, nil
}

// DeleteForum ends every stint (cancelling running monologue turns), then
// deletes the forum. The room refuses joins and posts first (not_found),
// so a join racing the delete either is ended by it or fails.
func (s *Service) DeleteForum(ctx context.Context, tenant, forumID string) error {
	r, err := s.room(ctx, tenant, forumID)
	if err != nil {
		return err
	}
	r.setDeleting(true)
	for _, id := range r.activeIDs() {
		if _, err := r.leave(ctx, id); err != nil {
			r.setDeleting(false) // the forum stays: a retry may delete it
			return err
		}
	}
	if err := s.eng.DeleteSession(ctx, tenant, forumID); err != nil {
		r.setDeleting(false)
		return err
	}
	s.mu.Lock()
	delete(s.rooms, forumID)
	s.mu.Unlock()
	return nil
}

// DeleteMonologue deletes a monologue, unless it is the current monologue
// of an active stint: the stint would stay in the room with nowhere to
// copy the forum's messages, the agent deaf (the stint must leave first).
func (s *Service) DeleteMonologue(ctx context.Context, tenant, monologueID string) error {
	mono, err := s.store.GetSession(ctx, tenant, monologueID)
	if err != nil {
		return err
	}
	if mono.Kind != forge.KindMonologue {
		return forge.Errorf(forge.ErrInvalid, "session %s is not a monologue", monologueID)
	}
	if forumID, participantID := monologueOwner(mono); forumID != "" && participantID != "" {
		p, err := s.store.GetParticipant(ctx, tenant, forumID, participantID)
		switch {
		case err == nil && p.LeftAt == nil && p.Metadata.MonologueID == monologueID:
			return forge.Errorf(forge.ErrConflict, "monologue %s belongs to %s, an active member of forum %s: leave the forum first (DELETE /v1/forums/%s/members/%s)",
				monologueID, p.ActorID, forumID, forumID, p.ID)
		case err != nil && !errors.Is(err, forge.ErrNotFound):
			return fmt.Errorf("reading the stint of monologue %s: %w", monologueID, err)
		}
	}
	return s.eng.DeleteSession(ctx, tenant, monologueID)
}

// Join adds a member. An agent must exist; trigger is auto, mention or
// always for agents and "" for humans.
func (s *Service) Join(ctx context.Context, tenant, forumID string, actor forge.Actor, trigger string) (*forge.Participant, error) {
	r, err := s.room(ctx, tenant, forumID)
	if err != nil {
		return nil, err
	}
	if actor.Type == forge.ActorAgent {
		if _, err := s.store.GetAgent(ctx, tenant, actor.Agent); err != nil {
			if errors.Is(err, forge.ErrNotFound) {
				return nil, forge.Errorf(forge.ErrNotFound, "agent %q not found", actor.Agent)
			}
			return nil, err
		}
		if trigger == "" {
			trigger = forge.TriggerAuto
		}
	}
	return r.join(ctx, actor, trigger)
}

// Leave ends a stint; ending an ended one answers it as it is.
func (s *Service) Leave(ctx context.Context, tenant, forumID, participantID string) (*forge.Participant, error) {
	r, err := s.room(ctx, tenant, forumID)
	if err != nil {
		return nil, err
	}
	return r.leave(ctx, participantID)
}

// Post writes a human member's message.
func (s *Service) Post(ctx context.Context, tenant, forumID, author, text string, meta json.RawMessage, files []forge.FileData) (*forge.ForumMessage, error) {
	r, err := s.room(ctx, tenant, forumID)
	if err != nil {
		return nil, err
	}
	m, err := r.post(ctx, author, text, meta, files)
	if err != nil {
		return nil, err
	}
	return View(m), nil
}

// Messages lists a forum's messages, oldest first.
func (s *Service) Messages(ctx context.Context, tenant, forumID string, opts forge.ListOptions) ([]*forge.ForumMessage, string, error) {
	if _, err := s.room(ctx, tenant, forumID); err != nil {
		return nil, "", err
	}
	msgs, next, err := s.store.ListLoose(ctx, tenant, forumID, opts)
	if err != nil {
		return nil, "", err
	}
	out := make([]*forge.ForumMessage, len(msgs))
	for i, m := range msgs {
		out[i] = View(m)
	}
	return out, next, nil
}

// Events streams the forum's events after a seq (replay, then live), with
// the ephemeral forum.typing events while it is live. It subscribes before
// it returns: a typing event published once Events returned (a client that
// saw the stream's headers, then posted) reaches the stream, which it
// would not if the subscription waited for the first read. The caller
// ranges over the result once: that ends the subscription.
func (s *Service) Events(ctx context.Context, tenant, forumID string, after int64) (iter.Seq2[forge.Event, error], error) {
	if _, err := s.room(ctx, tenant, forumID); err != nil {
		return nil, err
	}
	sub, err := s.log.Subscribe(ctx, tenant, forumID, after)
	if err != nil {
		return nil, err
	}
	return sub.Events(ctx, ""), nil
}

// monologueOwner names the forum and the stint a monologue belongs to, as
// its metadata records them ("" for what it does not name).
func monologueOwner(mono *forge.Session) (forumID, participantID string) {
	var meta struct {
		ForumID       string `json:"forum_id"`
		ParticipantID string `json:"participant_id"`
	}
	if json.Unmarshal(mono.Metadata, &meta) != nil {
		return "", ""
	}
	return meta.ForumID, meta.ParticipantID
}
