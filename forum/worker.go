package forum

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/eventlog"
)

// worker serializes everything about one agent stint: ingestion into its
// current monologue, trigger decisions, turn starts and follow-ups,
// compaction swaps and egress. Its own goroutine owns the fields below
// the lock; others only enqueue and wake it.
type worker struct {
	s    *Service
	room *room
	stop context.CancelFunc
	done chan struct{}
	wake chan struct{}

	mu    sync.Mutex // guards the following
	inbox []inboxItem
	ended []*forge.Turn
	// rechecks is set when the monologue's follower subscribed again:
	// the running turn's end may have been missed (checkRunning).
	rechecks bool
	// missed is set when the forum changed on another replica: the
	// worker reads what it missed from the store.
	missed bool
	// gone is set when the stint ended on another replica.
	gone bool
	// leaving is set when the stint's leave is recorded here: the worker
	// copies what it was handed (up to until), starts nothing, and stops.
	leaving bool
	until   string

	// Owned by the goroutine.
	stint    *forge.Participant
	running  string             // the monologue turn running now
	pending  *forge.TurnTrigger // the newest trigger no turn has answered yet
	catchUp  bool               // read missed forum messages from the store
	retryAt  time.Time          // when a failed start or ingestion is tried again
	lastCopy string             // source id of the newest copy
	last     string             // when set, messages after it are not copied (the stint left)
	// forumWatch and monoWatch follow the forum (several replicas only)
	// and the current monologue while this worker holds the stint.
	forumWatch, monoWatch *follower
}

type inboxItem struct {
	msg     *forge.Message
	members int // active members when it was posted (for auto)
}

func (w *worker) enqueue(m *forge.Message, members int) {
	w.mu.Lock()
	w.inbox = append(w.inbox, inboxItem{m, members})
	w.mu.Unlock()
	w.poke()
}

func (w *worker) turnEnded(t *forge.Turn) {
	w.mu.Lock()
	w.ended = append(w.ended, t)
	w.mu.Unlock()
	w.poke()
}

func (w *worker) recheck() {
	w.mu.Lock()
	w.rechecks = true
	w.mu.Unlock()
	w.poke()
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// batch is what the worker's loop takes at each wake.
type batch struct {
	in      []inboxItem
	ended   []*forge.Turn
	recheck bool
	missed  bool
	gone    bool
	leaving bool
	until   string
}

func (w *worker) take() batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := batch{in: w.inbox, ended: w.ended, recheck: w.rechecks, missed: w.missed, gone: w.gone, leaving: w.leaving, until: w.until}
	w.inbox, w.ended, w.rechecks, w.missed = nil, nil, false, false
	return b
}

// finish tells the worker that its stint left: messages up to until are
// still copied, nothing after them, and no turn starts.
func (w *worker) finish(until string) {
	w.mu.Lock()
	w.leaving, w.until = true, until
	w.mu.Unlock()
	w.poke()
}

func (w *worker) isLeaving() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaving
}

// note records what the worker's watchers saw happen on another replica.
func (w *worker) note(missed, gone bool) {
	w.mu.Lock()
	w.missed = w.missed || missed
	w.gone = w.gone || gone
	w.mu.Unlock()
	w.poke()
}

func (w *worker) monologue() string { return w.stint.Metadata.MonologueID }

// run is the worker's loop. recover is set at startup: it finishes what a
// crash left (an unpublished reply, an abandoned triggered turn, copies
// never made).
//
// With several replicas (Service.locks), every replica runs a worker per
// active stint, but only the one holding the stint's lock acts: it renews
// the lock every sweep, and a worker that takes the lock (at startup, or
// because the holder died) first finishes what the previous holder left,
// as after a crash. The holder watches the forum and the monologue
// through the bus, so posts taken and turns ended on other replicas reach
// it. What any two workers might both do is idempotent in the store
// (copies by origin, turns by their trigger's key, replies by origin).
func (w *worker) run(ctx context.Context, recover bool) {
	defer close(w.done)
	defer w.s.forget(w)
	held := w.s.locks == nil
	defer func() {
		w.unwatch()
		if held && w.s.locks != nil {
			_ = w.s.locks.Unlock(context.WithoutCancel(ctx), w.lockName())
		}
	}()
	if held {
		// Following first: a turn ending meanwhile is heard, or found by
		// recover, or both (its reply is published once).
		w.watchMonologue(ctx)
		w.catchUp = recover
		if recover {
			w.recover(ctx)
		}
	}
	tick := time.NewTicker(w.s.sweep)
	defer tick.Stop()
	renew := true
	for {
		if w.s.locks != nil && renew {
			ok, err := w.s.locks.TryLock(ctx, w.lockName(), w.s.lockTTL)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return
				}
				w.s.logger.Warn("forum: stint lock", "participant_id", w.stint.ID, "err", err)
			case ok && !held:
				held = true
				w.watchForum(ctx)
				w.watchMonologue(ctx)
				w.recover(ctx)
				w.catchUp = true
			case !ok && held:
				held = false
				w.unwatch()
				w.running, w.pending = "", nil
			}
		}
		b := w.take()
		if b.gone {
			return
		}
		if b.leaving {
			w.last = b.until
		}
		// A turn's end is handled wherever it is heard: its reply is
		// published once whoever publishes it.
		for _, t := range b.ended {
			w.onEnd(ctx, t)
		}
		if held {
			if b.missed {
				w.catchUp = true
			}
			if w.catchUp {
				w.catchUpFromStore(ctx)
			}
			for _, it := range b.in {
				w.ingest(ctx, it.msg, it.members)
			}
			if b.leaving {
				if w.catchUp { // a copy failed: once more, from the store
					w.catchUpFromStore(ctx)
				}
				return
			}
			if renew || b.recheck {
				w.checkRunning(ctx)
			}
			w.maybeStart(ctx)
		} else if b.leaving {
			return
		}
		renew = false
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tick.C:
			renew = true
		}
	}
}

func (w *worker) lockName() string { return "stint:" + w.stint.ID }

// checkRunning notices that the turn this worker started has ended while
// it heard nothing (its follower was re-subscribing, or the turn's replica
// died and another ended it).
func (w *worker) checkRunning(ctx context.Context) {
	if w.running == "" {
		return
	}
	t, err := w.s.store.GetTurn(ctx, w.stint.Tenant, w.monologue(), w.running)
	if err == nil && t.Ended() {
		w.onEnd(ctx, t)
	}
}

// follower follows one session's events in a goroutine of its own.
type follower struct {
	session string
	cancel  context.CancelFunc
	done    chan struct{}
}

func (f *follower) stop() {
	if f != nil {
		f.cancel()
		<-f.done
	}
}

// unwatch stops following the forum and the monologue, and waits.
func (w *worker) unwatch() {
	w.forumWatch.stop()
	w.monoWatch.stop()
	w.forumWatch, w.monoWatch = nil, nil
}

// watchForum follows the forum on the bus while this worker holds the
// stint on one of several replicas: a post or a join made on another
// replica makes it read the forum again, the stint's end stops it.
func (w *worker) watchForum(ctx context.Context) {
	self := w.stint.ID
	w.forumWatch = w.follow(ctx, w.stint.ForumID, func() { w.note(true, false) }, func(ev forge.Event) {
		w.note(ev.Type == forge.EventForumMessage || ev.Type == forge.EventForumMemberJoined,
			ev.Type == forge.EventForumMemberLeft && ev.ID == self)
	})
}

// watchMonologue follows the stint's current monologue through the event
// log, the one way the forum hears of its turns, wherever they run: a
// turn's creation and end show the agent typing in the forum, and its end
// reaches onEnd. A swap moves the stint to a new monologue: the worker
// then follows that one (called again before each turn starts).
func (w *worker) watchMonologue(ctx context.Context) {
	mono := w.monologue()
	if w.monoWatch != nil && w.monoWatch.session == mono {
		return
	}
	w.monoWatch.stop()
	tenant, forumID, self := w.stint.Tenant, w.stint.ForumID, w.stint.ID
	w.monoWatch = w.follow(ctx, mono, w.recheck, func(ev forge.Event) {
		if ev.Type != forge.EventTurnCreated && ev.Type != forge.EventTurnDone {
			return
		}
		typing := ev.Type == forge.EventTurnCreated
		err := w.s.log.PublishEphemeral(ctx, forumID, eventlog.Draft{Type: forge.EventForumTyping, ID: self,
			Data: TypingData{ParticipantID: self, Typing: typing}})
		if err != nil && ctx.Err() == nil {
			w.s.logger.Warn("forum: typing event", "forum_id", forumID, "err", err)
		}
		var t forge.Turn
		if !typing && json.Unmarshal(ev.Data, &t) == nil {
			t.Tenant = tenant
			w.turnEnded(&t)
		}
	})
}

// follow calls on with every event published on session from now on, in
// a goroutine of its own; subscribed is called each time it subscribes
// again after being cut off (what was published meanwhile is not handed
// to on). The first subscription is made before follow returns, so that
// nothing published after it is missed; if it fails, the goroutine keeps
// trying.
func (w *worker) follow(ctx context.Context, session string, subscribed func(), on func(forge.Event)) *follower {
	ctx, cancel := context.WithCancel(ctx)
	f := &follower{session: session, cancel: cancel, done: make(chan struct{})}
	sub, err := w.s.log.Live(ctx, session)
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			if err != nil {
				if !errors.Is(err, errCutOff) {
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Second):
					}
				}
				if sub, err = w.s.log.Live(ctx, session); err != nil {
					continue
				}
				subscribed()
			}
			for {
				evs, nerr := sub.Next(ctx, true)
				if nerr != nil {
					break
				}
				for _, ev := range evs {
					on(ev)
				}
			}
			_ = sub.Close()
			sub, err = nil, errCutOff
		}
	}()
	return f
}

// errCutOff marks a follower's subscription that ended: it subscribes
// again at once (after a failed subscription, a second later).
var errCutOff = errors.New("forum: subscription cut off")

// ingest copies a forum message into the current monologue (once) and
// notes whether it triggers a turn.
func (w *worker) ingest(ctx context.Context, m *forge.Message, members int) {
	f := m.Forum
	if f == nil || f.Kind == forge.ForumKindNotice || f.ParticipantID == w.stint.ID {
		return // notices and the agent's own replies are not copied
	}
	if idTime(m.ID) < idTime(w.stint.ID) {
		return // from before the join
	}
	if m.ID <= w.lastCopy {
		return // delivered and read from the store both (a catch-up)
	}
	if w.last != "" && m.ID > w.last {
		return // posted after the stint left
	}
	cp, err := w.copyIn(ctx, m)
	if err != nil {
		if ctx.Err() == nil {
			w.s.logger.Warn("forum: ingestion failed; reading the forum again", "forum_id", m.SessionID, "participant_id", w.stint.ID, "err", err)
			w.catchUp = true
		}
		return
	}
	w.lastCopy = max(w.lastCopy, m.ID)
	if w.triggers(m, members) {
		w.pending = &forge.TurnTrigger{CopyID: cp.ID, SourceConversationID: m.SessionID, SourceMessageID: m.ID}
		w.s.logger.Debug("forum: trigger", "participant_id", w.stint.ID, "source_message_id", m.ID, "copy_id", cp.ID)
	}
}

// triggers applies the stint's trigger policy to an ingested message.
func (w *worker) triggers(m *forge.Message, members int) bool {
	f := m.Forum
	if f.Quiet {
		return false // a guard stopped this reply
	}
	return policyTriggers(w.stint, f.Mentions, members)
}

// policyTriggers applies a stint's trigger policy to a message with these
// mentions posted when the forum had members active stints.
func policyTriggers(stint *forge.Participant, mentions []string, members int) bool {
	policy := stint.Trigger
	if policy == forge.TriggerAuto || policy == "" {
		policy = forge.TriggerMention
		if members == 2 {
			policy = forge.TriggerAlways
		}
	}
	return policy == forge.TriggerAlways || slices.Contains(mentions, stint.Actor.Agent)
}

// authorName is how a monologue's model sees the author actorID: its
// name, or its whole id for a human whose id names an agent of the tenant
// (API.md: authorship the model cannot mistake).
func (w *worker) authorName(ctx context.Context, actorID string) string {
	kind, name, ok := strings.Cut(actorID, ":")
	if !ok {
		return actorID
	}
	if kind == forge.ActorHuman {
		if _, err := w.s.store.GetAgent(ctx, w.stint.Tenant, name); err == nil {
			return actorID
		}
	}
	return name
}

// copyIn writes the copy of m into the current monologue: a user message
// with the text and an agent part per mention, its source in metadata,
// unique on its origin (a retried delivery copies nothing twice).
func (w *worker) copyIn(ctx context.Context, m *forge.Message) (*forge.Message, error) {
	mono := w.monologue()
	origin := "copy:" + m.ID
	if cp, err := w.s.store.MessageByOrigin(ctx, w.stint.Tenant, mono, origin); err == nil {
		return cp, nil
	} else if !errors.Is(err, forge.ErrNotFound) {
		return nil, err
	}
	sess, err := w.s.session(ctx, w.stint.Tenant, mono)
	if err != nil {
		return nil, err
	}
	meta, _ := json.Marshal(forge.SourceMeta{SourceConversationID: m.SessionID, SourceMessageID: m.ID, SourceActorID: m.Forum.ActorID,
		SourceName: w.authorName(ctx, m.Forum.ActorID)})
	now := w.s.clock.Now()
	cp := &forge.Message{ID: w.s.ids.New(forge.PrefixMessage), Tenant: w.stint.Tenant, SessionID: mono,
		ThreadID: sess.MainThreadID, Role: forge.RoleUser, Author: m.Forum.ActorID, Metadata: meta, Origin: origin, CreatedAt: now}
	cp.Parts = []*forge.Part{{ID: w.s.ids.New(forge.PrefixPart), MessageID: cp.ID, SessionID: mono, Type: forge.PartText,
		Text: textOf(m), State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
	for _, name := range m.Forum.Mentions {
		cp.Parts = append(cp.Parts, &forge.Part{ID: w.s.ids.New(forge.PrefixPart), MessageID: cp.ID, SessionID: mono,
			Type: forge.PartAgent, Text: name, State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now})
	}
	// The copy references the forum message's files (the same stored
	// files: nothing is copied).
	cp.Parts = append(cp.Parts, fileParts(w.s, cp, filesOf(m))...)
	_, err = w.s.log.Write(ctx, w.stint.Tenant, mono,
		[]eventlog.Draft{{Type: forge.EventMessageCreated, ID: cp.ID, ThreadID: cp.ThreadID, Data: cp}},
		func(ctx context.Context, evs []forge.Event) error {
			return w.s.store.AppendLoose(ctx, &forge.LooseAppend{Tenant: w.stint.Tenant, SessionID: mono, Messages: []*forge.Message{cp}, Events: evs})
		})
	if errors.Is(err, forge.ErrConflict) {
		return w.s.store.MessageByOrigin(ctx, w.stint.Tenant, mono, origin)
	}
	if err != nil {
		return nil, err
	}
	if w.s.onCopy != nil {
		w.s.onCopy(m.ID)
	}
	return cp, nil
}

// maybeStart runs a turn for the pending trigger when none runs: one turn
// at a time per monologue; what arrived meanwhile is answered by one
// follow-up turn.
func (w *worker) maybeStart(ctx context.Context) {
	if w.running != "" || w.pending == nil || ctx.Err() != nil || w.s.clock.Now().Before(w.retryAt) || w.isLeaving() {
		return
	}
	// A turn answering an agent's reply when the guards are full could
	// only have its reply withheld: it does not run (the copy stays in the
	// monologue, read by the next turn a human's post triggers).
	if w.room.withholds(ctx, w.stint, w.pending.SourceMessageID) {
		w.s.logger.Debug("forum: trigger dropped, the guards are full", "participant_id", w.stint.ID, "source_message_id", w.pending.SourceMessageID)
		w.pending = nil
		return
	}
	if err := w.maybeSwap(ctx); err != nil {
		if ctx.Err() == nil {
			w.s.logger.Warn("forum: monologue swap failed", "participant_id", w.stint.ID, "err", err)
			w.retryAt = w.s.clock.Now().Add(time.Second)
		}
		return
	}
	w.watchMonologue(ctx) // the swap may have moved the stint
	// The key makes one turn per trigger, whichever replica's worker
	// starts it (the other gets the same turn back).
	key := "forum:" + w.pending.CopyID
	if w.pending.Retry {
		key += ":retry"
	}
	t, err := w.s.eng.StartTurn(ctx, w.stint.Tenant, w.monologue(), engine.TurnRequest{Trigger: w.pending, Owner: true, IdempotencyKey: key})
	switch {
	case err == nil && t.Ended():
		w.pending = nil
		w.onEnd(ctx, t)
	case err == nil:
		w.running = t.ID
		w.pending = nil
	case errors.Is(err, forge.ErrPendingActions), errors.Is(err, forge.ErrTurnInProgress):
		// A paused turn waits for its resolutions, or a resolution turn
		// runs: the follow-up starts when that turn ends.
	case ctx.Err() != nil:
	default:
		w.s.logger.Warn("forum: monologue turn did not start", "participant_id", w.stint.ID, "err", err)
		w.retryAt = w.s.clock.Now().Add(time.Second)
	}
}

// onEnd handles a monologue turn's end: egress of its reply; a triggered
// turn its replica abandoned (it died) runs again, once.
func (w *worker) onEnd(ctx context.Context, ended *forge.Turn) {
	if ended.ID == w.running {
		w.running = ""
	}
	t := ended // as it ended: the turn.done event's, or the stored turn
	if w.s.locks != nil && w.pending == nil && t.Status == forge.TurnCancelled && t.CancelReason != nil &&
		*t.CancelReason == forge.CancelAbandoned && t.Trigger != nil && !t.Trigger.Retry && t.SessionID == w.monologue() {
		again := *t.Trigger
		again.Retry = true
		w.pending = &again
	}
	w.egress(ctx, t)
}

// egress publishes a done turn's non-empty output as a reply to the forum
// its trigger came from.
func (w *worker) egress(ctx context.Context, t *forge.Turn) bool {
	if t.Status != forge.TurnDone || t.Output == nil || t.Output.Text == "" || t.Trigger == nil {
		return false
	}
	r, err := w.s.room(ctx, w.stint.Tenant, t.Trigger.SourceConversationID)
	if err != nil {
		w.s.logger.Warn("forum: reply's forum", "turn_id", t.ID, "err", err)
		return false
	}
	if err := r.publish(ctx, reply{stint: w.stint, turn: t, monoID: t.SessionID, trigger: t.Trigger}); err != nil {
		w.s.logger.Warn("forum: publishing a reply", "turn_id", t.ID, "err", err)
		return false
	}
	return true
}

// replyDecided reports whether the monologue turn's reply was published
// to the forum or withheld by a guard (its output message is marked so).
func (s *Service) replyDecided(ctx context.Context, tenant, forumID string, t *forge.Turn) (bool, error) {
	if _, err := s.store.MessageByOrigin(ctx, tenant, forumID, "reply:"+t.ID); err == nil {
		return true, nil
	} else if !errors.Is(err, forge.ErrNotFound) {
		return false, err
	}
	if t.Output == nil || t.Output.MessageID == "" {
		return false, nil
	}
	msgs, err := s.store.TurnMessages(ctx, tenant, t.ID)
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if m.ID == t.Output.MessageID {
			var meta forge.SourceMeta
			return len(m.Metadata) > 0 && json.Unmarshal(m.Metadata, &meta) == nil && meta.Type == forge.MetadataTypeWithheld, nil
		}
	}
	return false, nil
}

// recover finishes what a crash left for this stint: replies of done
// turns not yet published, and a triggered turn the crash abandoned (run
// again once).
func (w *worker) recover(ctx context.Context) {
	mono, err := w.s.session(ctx, w.stint.Tenant, w.monologue())
	if err != nil || mono.TipTurnID == nil {
		return
	}
	tip, err := w.s.store.GetTurn(ctx, w.stint.Tenant, mono.ID, *mono.TipTurnID)
	if err != nil {
		return
	}
	// Replies are decided (published or withheld) in turn order by this
	// worker, so only the newest turns can lack theirs: walk back to one
	// that has it.
	for t, n := tip, 0; t != nil && n < 16; n++ {
		if t.Trigger != nil && t.Status == forge.TurnDone && t.Output != nil && t.Output.Text != "" {
			if done, err := w.s.replyDecided(ctx, w.stint.Tenant, t.Trigger.SourceConversationID, t); err != nil || done {
				break
			}
			w.egress(ctx, t)
		}
		if t.PreviousTurnID == nil {
			break
		}
		if t, err = w.s.store.GetTurn(ctx, w.stint.Tenant, mono.ID, *t.PreviousTurnID); err != nil {
			break
		}
	}
	if tip.Status == forge.TurnCancelled && tip.CancelReason != nil && *tip.CancelReason == forge.CancelAbandoned &&
		tip.Trigger != nil && !tip.Trigger.Retry {
		again := *tip.Trigger
		again.Retry = true
		w.pending = &again
	}
}

// catchUpFromStore copies the forum messages the worker missed (a crash,
// a failed write) and triggers on those no turn has answered.
func (w *worker) catchUpFromStore(ctx context.Context) {
	mono := w.monologue()
	last := w.lastCopy
	if last == "" {
		copies, err := w.s.store.LastLoose(ctx, w.stint.Tenant, mono, 50)
		if err != nil {
			return
		}
		for _, c := range copies {
			if src, ok := sourceOf(c); ok {
				last = max(last, src.SourceMessageID)
			}
		}
		// A monologue made by a swap was copied into through this message
		// (its predecessor's newest copy).
		if sess, err := w.s.session(ctx, w.stint.Tenant, mono); err == nil {
			var meta struct {
				CopiedThrough string `json:"copied_through"`
			}
			if json.Unmarshal(sess.Metadata, &meta) == nil {
				last = max(last, meta.CopiedThrough)
			}
		}
	}
	w.s.logger.Debug("forum: catch-up", "participant_id", w.stint.ID, "last", last)
	// The newest triggered turn answered every copy made before it; a
	// compaction turn (no trigger) after it, left by a crash before its
	// swap, answered nothing.
	var tipID string
	if sess, err := w.s.session(ctx, w.stint.Tenant, mono); err == nil && sess.TipTurnID != nil {
		tipID = *sess.TipTurnID
		for n := 0; n < 8; n++ {
			t, err := w.s.store.GetTurn(ctx, w.stint.Tenant, mono, tipID)
			if err != nil || t.Trigger != nil || t.PreviousTurnID == nil {
				break
			}
			tipID = *t.PreviousTurnID
		}
	}
	members := w.room.memberCount()
	cursor := last
	for {
		page, next, err := w.s.store.ListLoose(ctx, w.stint.Tenant, w.stint.ForumID, forge.ListOptions{Limit: 500, Cursor: cursor})
		if err != nil {
			return
		}
		for _, m := range page {
			w.ingest(ctx, m, members)
		}
		w.lastCopy = max(w.lastCopy, last)
		if next == "" {
			break
		}
		cursor = next
	}
	w.catchUp = false
	// A copy made after the newest turn started triggers, if it would:
	// the crash may have lost the pending trigger.
	if w.pending == nil {
		copies, err := w.s.store.LastLoose(ctx, w.stint.Tenant, mono, 50)
		if err != nil {
			return
		}
		for _, c := range copies {
			src, ok := sourceOf(c)
			if !ok || src.SeededFrom != "" || (tipID != "" && idTime(c.ID) < idTime(tipID)) {
				continue // answered in the old monologue, or before the tip turn
			}
			orig, err := w.forumMessage(ctx, src)
			if err == nil && w.triggers(orig, members) {
				w.pending = &forge.TurnTrigger{CopyID: c.ID, SourceConversationID: src.SourceConversationID, SourceMessageID: src.SourceMessageID}
			}
		}
	}
}

// forumMessage reads the forum message a copy came from.
func (w *worker) forumMessage(ctx context.Context, src forge.SourceMeta) (*forge.Message, error) {
	page, _, err := w.s.store.ListLoose(ctx, w.stint.Tenant, src.SourceConversationID, forge.ListOptions{Limit: 1, Cursor: prevID(src.SourceMessageID)})
	if err != nil {
		return nil, err
	}
	if len(page) == 0 || page[0].ID != src.SourceMessageID {
		return nil, forge.Errorf(forge.ErrNotFound, "forum message %s not found", src.SourceMessageID)
	}
	return page[0], nil
}

// prevID is a cursor just before id (ids compare as strings).
func prevID(id string) string {
	if id == "" {
		return ""
	}
	b := []byte(id)
	b[len(b)-1]--
	return string(b) + "~" // after every id character
}
