package forum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// room is one forum as this process holds it. Every write to the forum
// session goes through its update method, under its lock: posts, replies,
// notices, joins, leaves, monologue swaps. Across replicas the event log
// holds the forum session for the whole decision (eventlog.Log.Update):
// when another replica wrote the forum since this one last did, the room
// first reloads its members and guard state from the store, so every
// replica decides from the same state (docs/distributed.md).
type room struct {
	s      *Service
	tenant string
	id     string
	guards forge.ForumGuards

	mu     sync.Mutex                    // guards the following
	active map[string]*forge.Participant // active stints by id
	// deleting is set when DeleteForum begins: no join or post gets in
	// after the stints it ends.
	deleting bool
	// Guard state, rebuilt from the forum's recent messages when the room
	// is loaded.
	streak   int                    // consecutive replies since the last human message
	noticed  bool                   // a notice was posted during this streak
	pairs    map[string][]time.Time // reply times between two agents, by pair
	lastSeen map[string]string      // actor id of each recent message's author, by message id
	// seenOrder holds the ids in lastSeen, a ring of the last
	// recentMessages: the pair guard only asks who wrote the message a
	// reply answers, and a restart remembers no more than that.
	seenOrder [recentMessages]string
	seenNext  int
}

// recentMessages is how many of a forum's newest messages the guard state
// is rebuilt from on load, and how many authors it remembers.
const recentMessages = 200

// update decides and writes the forum's messages and events in one
// transaction through the forum's sequencer, holding the forum (in every
// process) from decide to publish. decide sees the room's state as the
// store has it: reloaded first when another replica may have written the
// forum. Callers hold r.mu.
func (r *room) update(ctx context.Context, decide func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error)) error {
	_, err := r.s.log.Update(ctx, r.tenant, r.id, func(ctx context.Context, fresh bool) ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		if !fresh {
			if err := r.load(ctx); err != nil {
				return nil, nil, err
			}
		}
		return decide()
	})
	return err
}

// load reads the room's active stints and guard state.
func (r *room) load(ctx context.Context) error {
	r.active = map[string]*forge.Participant{}
	cursor := ""
	for {
		list, next, err := r.s.store.ListParticipants(ctx, r.tenant, r.id, false, forge.ListOptions{Limit: 1000, Cursor: cursor})
		if err != nil {
			return err
		}
		for _, p := range list {
			r.active[p.ID] = p
		}
		if next == "" {
			break
		}
		cursor = next
	}
	recent, err := r.s.store.LastLoose(ctx, r.tenant, r.id, recentMessages)
	if err != nil {
		return err
	}
	r.pairs, r.lastSeen = map[string][]time.Time{}, map[string]string{}
	r.seenOrder, r.seenNext = [recentMessages]string{}, 0
	for _, m := range recent {
		r.account(m)
	}
	return nil
}

// account updates the guard state with a message of the forum.
func (r *room) account(m *forge.Message) {
	f := m.Forum
	if f == nil {
		return
	}
	r.remember(m.ID, f.ActorID)
	switch f.Kind {
	case forge.ForumKindMessage:
		r.streak, r.noticed = 0, false
	case forge.ForumKindNotice:
		r.noticed = true
	case forge.ForumKindReply:
		r.streak++
		if pk := r.pairKey(f); pk != "" {
			r.pairs[pk] = append(r.pairs[pk], m.CreatedAt)
		}
	}
}

// remember notes a message's author, forgetting the oldest beyond the
// last recentMessages.
func (r *room) remember(id, actorID string) {
	if _, ok := r.lastSeen[id]; ok {
		r.lastSeen[id] = actorID
		return
	}
	if old := r.seenOrder[r.seenNext]; old != "" {
		delete(r.lastSeen, old)
	}
	r.seenOrder[r.seenNext] = id
	r.seenNext = (r.seenNext + 1) % recentMessages
	r.lastSeen[id] = actorID
}

// pairKey names the two agents a reply passes between: its author and the
// author of the reply it answers ("" when it answers a human).
func (r *room) pairKey(f *forge.ForumInfo) string {
	other := r.lastSeen[f.ReplyTo]
	if f.Kind != forge.ForumKindReply || len(other) < 6 || other[:6] != forge.ActorAgent+":" || other == f.ActorID {
		return ""
	}
	a, b := f.ActorID, other
	if b < a {
		a, b = b, a
	}
	return a + "\x00" + b
}

// agentNames are the names of the room's active agent members.
func (r *room) agentNames() map[string]bool {
	out := map[string]bool{}
	for _, p := range r.active {
		if p.Actor.Type == forge.ActorAgent {
			out[p.Actor.Agent] = true
		}
	}
	return out
}

// deliver hands a forum message to the workers of the agent stints active
// now (callers hold r.mu): exactly the stints a message is copied into.
func (r *room) deliver(m *forge.Message) {
	for id, p := range r.active {
		if p.Actor.Type != forge.ActorAgent {
			continue
		}
		if w := r.s.worker(id); w != nil {
			w.enqueue(m, len(r.active))
		}
	}
}

// memberCount is the number of active stints.
func (r *room) memberCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.active)
}

func (r *room) newMessage(text string, info *forge.ForumInfo, meta []byte) *forge.Message {
	now := r.s.clock.Now()
	m := &forge.Message{ID: r.s.ids.New(forge.PrefixMessage), Tenant: r.tenant, SessionID: r.id, Role: forge.RoleUser,
		Author: info.ActorID, Forum: info, Metadata: meta, CreatedAt: now}
	if info.Kind == forge.ForumKindReply {
		m.Role = forge.RoleAssistant
	}
	m.Parts = []*forge.Part{{ID: r.s.ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: r.id, Type: forge.PartText,
		Text: text, State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
	for _, name := range info.Mentions {
		m.Parts = append(m.Parts, &forge.Part{ID: r.s.ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: r.id,
			Type: forge.PartAgent, Text: name, State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now})
	}
	return m
}

func forumDraft(m *forge.Message) eventlog.Draft {
	return eventlog.Draft{Type: forge.EventForumMessage, ID: m.ID, Data: View(m)}
}

// post writes a human's message and hands it to the agents.
func (r *room) post(ctx context.Context, author, text string, meta []byte, files []forge.FileData) (*forge.Message, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleting {
		return nil, r.gone()
	}
	var m *forge.Message
	err := r.update(ctx, func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		var stint *forge.Participant
		for _, p := range r.active {
			if p.Actor.Type == forge.ActorHuman && p.Actor.ID == author {
				stint = p
			}
		}
		if stint == nil {
			return nil, nil, forge.Errorf(forge.ErrInvalid, "author %q is not a human member of forum %s: add them with POST /v1/forums/%s/members first", author, r.id, r.id)
		}
		info := &forge.ForumInfo{Kind: forge.ForumKindMessage, ParticipantID: stint.ID, ActorID: stint.ActorID,
			Mentions: Mentions(text, r.agentNames())}
		m = r.newMessage(text, info, meta)
		m.Parts = append(m.Parts, fileParts(r.s, m, files)...)
		return []eventlog.Draft{forumDraft(m)}, func(ctx context.Context, evs []forge.Event) error {
			return r.s.store.AppendLoose(ctx, &forge.LooseAppend{Tenant: r.tenant, SessionID: r.id, Messages: []*forge.Message{m}, Events: evs})
		}, nil
	})
	if err != nil {
		return nil, err
	}
	r.account(m)
	r.deliver(m)
	return m, nil
}

// reply is a monologue turn's output to publish.
type reply struct {
	stint   *forge.Participant
	turn    *forge.Turn
	monoID  string
	trigger *forge.TurnTrigger
}

// publish decides an agent's reply exactly once (its origin is the
// monologue turn): published, and marked on the monologue message it came
// from, or withheld by a guard, marked so and never published. A guard
// that stops a published reply from triggering agents, or withholds one,
// adds one notice per streak in the same write. A stint that has left
// publishes nothing.
func (r *room) publish(ctx context.Context, rp reply) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var msgs []*forge.Message
	err := r.update(ctx, func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		if _, ok := r.active[rp.stint.ID]; !ok {
			return nil, nil, nil
		}
		// Published or withheld before a crash, by an earlier attempt or
		// by another replica: decided already.
		if done, err := r.s.replyDecided(ctx, r.tenant, r.id, rp.turn); err != nil || done {
			return nil, nil, err
		}
		text := rp.turn.Output.Text
		info := &forge.ForumInfo{Kind: forge.ForumKindReply, ParticipantID: rp.stint.ID, ActorID: rp.stint.ActorID,
			ReplyTo: rp.trigger.SourceMessageID, Mentions: Mentions(text, r.agentNames()), SourceTurnID: rp.turn.ID}
		m := r.newMessage(text, info, nil)
		m.Origin = "reply:" + rp.turn.ID
		mark := forge.MessageRef{SessionID: rp.monoID, MessageID: rp.turn.Output.MessageID}
		switch guard, withhold := r.guard(info, m.CreatedAt); {
		case withhold:
			// The limit is reached: a turn triggered before it was (in
			// flight when the guard fired) publishes nothing.
			mark.Type = forge.MetadataTypeWithheld
			if !r.noticed {
				msgs = append(msgs, r.notice(guard))
			}
			r.s.logger.Debug("forum: reply withheld", "forum_id", r.id, "participant_id", rp.stint.ID, "turn_id", rp.turn.ID, "guard", guard)
		case guard != "":
			info.Quiet = true
			msgs = append(msgs, m)
			// The notice says a trigger was stopped: none is when no
			// other agent's policy would have answered this reply.
			if !r.noticed && r.wouldTrigger(info) {
				msgs = append(msgs, r.notice(guard))
			}
		default:
			msgs = append(msgs, m)
		}
		drafts := make([]eventlog.Draft, len(msgs))
		for i, x := range msgs {
			drafts[i] = forumDraft(x)
		}
		return drafts, func(ctx context.Context, evs []forge.Event) error {
			return r.s.store.AppendLoose(ctx, &forge.LooseAppend{Tenant: r.tenant, SessionID: r.id, Messages: msgs, Events: evs,
				Mark: []forge.MessageRef{mark}})
		}, nil
	})
	if errors.Is(err, forge.ErrConflict) {
		return nil // another attempt published it first
	}
	if err != nil {
		return err
	}
	for _, x := range msgs {
		r.account(x)
		if x.Forum.Kind == forge.ForumKindReply {
			r.deliver(x)
		}
	}
	return nil
}

func (r *room) notice(guard string) *forge.Message {
	return r.newMessage(noticeText(guard, r.guards), &forge.ForumInfo{Kind: forge.ForumKindNotice, Guard: guard}, nil)
}

// guard says which guard, if any, stops a reply about to be published
// from triggering agents (the reply that reaches a limit is published,
// quiet), and whether it withholds the reply (the limit was reached
// before it: at most max_agent_streak replies follow one another, at most
// pair_window.max pass between two agents within the window).
func (r *room) guard(info *forge.ForumInfo, now time.Time) (guard string, withhold bool) {
	if n := r.guards.MaxAgentStreak; n > 0 {
		switch {
		case r.streak >= n:
			return "max_agent_streak", true
		case r.streak+1 >= n:
			guard = "max_agent_streak"
		}
	}
	pw := r.guards.PairWindow
	if pk := r.pairKey(info); pk != "" && pw.Max > 0 && pw.Seconds > 0 {
		recent := r.recentPair(pk, now)
		switch {
		case len(recent) >= pw.Max:
			return "pair_window", true
		case guard == "" && len(recent)+1 >= pw.Max:
			guard = "pair_window"
		}
	}
	return guard, false
}

// recentPair forgets the pair's reply times outside the window before now
// and returns the rest. Only the newest pair_window.max can matter, so no
// more are kept.
func (r *room) recentPair(pk string, now time.Time) []time.Time {
	cut := now.Add(-time.Duration(r.guards.PairWindow.Seconds) * time.Second)
	times := r.pairs[pk]
	i := 0
	for i < len(times) && !times[i].After(cut) {
		i++
	}
	times = times[i:]
	if over := len(times) - r.guards.PairWindow.Max; over > 0 {
		times = times[over:]
	}
	if len(times) == 0 {
		delete(r.pairs, pk)
		return nil
	}
	r.pairs[pk] = slices.Clone(times)
	return r.pairs[pk]
}

// withholds reports whether a reply of the stint answering the forum
// message source would be withheld if it were published now; only a
// reply answering an agent's reply counts (a human's message is answered
// whatever the guards say, to be withheld later if the room is full by
// then). The worker asks before starting a turn, so a loop the guards
// stopped costs no model call: the room's state is read under the forum's
// hold (reloaded when another replica wrote the forum), so a human post
// taken elsewhere is not missed.
func (r *room) withholds(ctx context.Context, stint *forge.Participant, source string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	full := func() bool {
		author, ok := r.lastSeen[source]
		if !ok || !strings.HasPrefix(author, forge.ActorAgent+":") {
			return false
		}
		_, withhold := r.guard(&forge.ForumInfo{Kind: forge.ForumKindReply, ParticipantID: stint.ID, ActorID: stint.ActorID, ReplyTo: source}, r.s.clock.Now())
		return withhold
	}
	if !full() {
		return false
	}
	still := false
	err := r.update(ctx, func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		still = full()
		return nil, nil, nil
	})
	return err == nil && still
}

// wouldTrigger reports whether a reply would trigger some active agent
// stint other than its author's (callers hold r.mu).
func (r *room) wouldTrigger(info *forge.ForumInfo) bool {
	for id, p := range r.active {
		if p.Actor.Type == forge.ActorAgent && id != info.ParticipantID && policyTriggers(p, info.Mentions, len(r.active)) {
			return true
		}
	}
	return false
}

func noticeText(guard string, g forge.ForumGuards) string {
	switch guard {
	case "max_agent_streak":
		return fmt.Sprintf("Guard max_agent_streak: agents have replied %d times in a row; their replies trigger no agent, and no more are posted, until a human posts.", g.MaxAgentStreak)
	default:
		return fmt.Sprintf("Guard pair_window: two agents exchanged %d replies within %d s; their replies to each other trigger no agent, and no more are posted, until the window passes.", g.PairWindow.Max, g.PairWindow.Seconds)
	}
}

// join adds a stint (an agent's with its fresh monologue) and starts its
// worker.
func (r *room) join(ctx context.Context, actor forge.Actor, trigger string) (*forge.Participant, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleting {
		return nil, r.gone()
	}
	now := r.s.clock.Now()
	p := &forge.Participant{ID: r.s.ids.New(forge.PrefixParticipant), Tenant: r.tenant, ForumID: r.id, Actor: actor,
		ActorID: actor.Key(), JoinedAt: now}
	var mono *forge.Session
	if actor.Type == forge.ActorAgent {
		p.Trigger = trigger
		mono = r.s.newMonologue(r.tenant, r.id, p.ID, actor.Agent)
		p.Metadata.MonologueID = mono.ID
	}
	err := r.update(ctx, func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		return []eventlog.Draft{{Type: forge.EventForumMemberJoined, ID: p.ID, Data: p}},
			func(ctx context.Context, evs []forge.Event) error {
				return r.s.store.AddParticipant(ctx, p, mono, evs)
			}, nil
	})
	if err != nil {
		if errors.Is(err, forge.ErrConflict) {
			return nil, forge.Errorf(forge.ErrConflict, "%s already has an active stint in forum %s", p.ActorID, r.id)
		}
		return nil, err
	}
	r.active[p.ID] = p
	if actor.Type == forge.ActorAgent {
		r.s.startWorker(r, p, false)
	}
	return p, nil
}

// leave ends a stint. The leave is recorded first, under the room's lock,
// so every post is ordered against it: the stint's worker has been handed
// exactly the messages posted before it, and copies them before it stops
// (finishWorker). From then on the room publishes nothing of the stint,
// and its running monologue turn is cancelled, on whichever replica it
// runs.
func (r *room) leave(ctx context.Context, id string) (*forge.Participant, error) {
	r.mu.Lock()
	var (
		out    *forge.Participant
		active bool
		until  string // an id after every message posted before the leave
	)
	err := r.update(ctx, func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		stint, ok := r.active[id]
		if !ok {
			return nil, nil, nil
		}
		active = true
		until = r.s.ids.New(forge.PrefixMessage)
		left := *stint
		at := r.s.clock.Now()
		left.LeftAt = &at
		return []eventlog.Draft{{Type: forge.EventForumMemberLeft, ID: id, Data: &left}},
			func(ctx context.Context, evs []forge.Event) error {
				var err error
				out, _, err = r.s.store.EndParticipant(ctx, r.tenant, r.id, id, at, evs)
				return err
			}, nil
	})
	var stint *forge.Participant
	if err == nil && active {
		stint = r.active[id]
		delete(r.active, id)
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !active {
		// Ended before (here or on another replica): its worker here has
		// nothing to finish.
		r.s.stopWorker(id)
		return r.s.store.GetParticipant(ctx, r.tenant, r.id, id)
	}
	r.s.finishWorker(stint, until)
	return out, nil
}

// swapped records a monologue swap: the new monologue with its seed and
// the stint's pointer, with agent.monologue.compacted on the forum.
func (r *room) swapped(ctx context.Context, w *forge.MonologueSwap) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stint *forge.Participant
	err := r.update(ctx, func() ([]eventlog.Draft, func(ctx context.Context, evs []forge.Event) error, error) {
		var ok bool
		if stint, ok = r.active[w.ParticipantID]; !ok {
			return nil, nil, forge.Errorf(forge.ErrConflict, "member %s has left", w.ParticipantID)
		}
		data := map[string]string{"participant_id": w.ParticipantID, "old_monologue_id": w.OldID, "new_monologue_id": w.New.ID}
		return []eventlog.Draft{{Type: forge.EventMonologueCompacted, ID: w.ParticipantID, Data: data}},
			func(ctx context.Context, evs []forge.Event) error {
				w.Events = evs
				return r.s.store.SwapMonologue(ctx, w)
			}, nil
	})
	if err != nil {
		return err
	}
	moved := *stint
	moved.Metadata.MonologueID = w.New.ID
	r.active[stint.ID] = &moved
	return nil
}

// gone is the error of a write to a forum being deleted.
func (r *room) gone() error {
	return forge.Errorf(forge.ErrNotFound, "forum %q not found", r.id)
}

// setDeleting refuses joins and posts from now on (or again accepts them
// when the delete failed).
func (r *room) setDeleting(on bool) {
	r.mu.Lock()
	r.deleting = on
	r.mu.Unlock()
}

// activeIDs lists the active stints, oldest first.
func (r *room) activeIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.active))
	for id := range r.active {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
