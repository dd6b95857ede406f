package storetest

import (
	"encoding/json"
	"sync"

	"github.com/forge-runtime/forge"
)

// forumTests cover participant stints, turnless messages and the monologue
// swap (forge.ForumStore).
var forumTests = []test{
	{"JoinCreatesStintAndMonologueAtomically", false, testJoin},
	{"OneActiveStintPerActorIsEnforced", false, testOneActiveStint},
	{"LeaveIsIdempotentAndRejoinIsANewStint", false, testLeaveRejoin},
	{"ListMembersActiveOrAll", false, testListMembers},
	{"TurnlessMessagesRoundTripWithMetadata", false, testLooseRoundTrip},
	{"OriginMakesACopyUnique", false, testOriginUnique},
	{"TurnlessMessagesJoinTheBranch", false, testLooseOnBranch},
	{"ReplyMarksItsMonologueMessage", false, testMarkReply},
	{"SwapMovesTheMonologueOnce", false, testSwap},
	{"TriggerRoundTrips", false, testTriggerRoundTrip},
	{"ForumsAreTenantScoped", false, testForumTenancy},
	{"ActiveAgentStintsAcrossTenants", false, testActiveAgentStints},
}

func (f *fixture) newForum(tenant string) *forge.Session {
	f.Helper()
	now := f.now()
	g := forge.DefaultForumGuards()
	s := &forge.Session{ID: f.id(forge.PrefixSession), Tenant: tenant, Kind: forge.KindForum, Title: "support",
		MainThreadID: f.id(forge.PrefixThread), Metadata: json.RawMessage(`{"room": 1}`), Guards: &g,
		CreatedAt: now, UpdatedAt: now}
	f.ok(f.s.CreateSession(f.ctx, s), "CreateSession forum")
	return s
}

func (f *fixture) forumEvent(ses *forge.Session, typ, id string, data any) forge.Event {
	f.Helper()
	b, err := json.Marshal(data)
	f.ok(err, "marshal")
	return forge.Event{Seq: f.seqs(ses, 1)[0], ID: id, Type: typ, SessionID: ses.ID, CreatedAt: f.now(), Data: b}
}

// join adds an agent stint (with a fresh monologue) or a human one.
func (f *fixture) join(forum *forge.Session, actor forge.Actor) (*forge.Participant, *forge.Session, error) {
	f.Helper()
	p := &forge.Participant{ID: f.id(forge.PrefixParticipant), Tenant: forum.Tenant, ForumID: forum.ID, Actor: actor,
		ActorID: actor.Key(), JoinedAt: f.now()}
	var mono *forge.Session
	if actor.Type == forge.ActorAgent {
		p.Trigger = forge.TriggerAuto
		now := f.now()
		mono = &forge.Session{ID: f.id(forge.PrefixSession), Tenant: forum.Tenant, Kind: forge.KindMonologue,
			Agent: actor.Agent, MainThreadID: f.id(forge.PrefixThread), CreatedAt: now, UpdatedAt: now,
			Metadata: json.RawMessage(`{"forum_id": "` + forum.ID + `", "participant_id": "` + p.ID + `"}`)}
		p.Metadata.MonologueID = mono.ID
	}
	ev := f.forumEvent(forum, forge.EventForumMemberJoined, p.ID, p)
	return p, mono, f.s.AddParticipant(f.ctx, p, mono, []forge.Event{ev})
}

func testJoin(f *fixture) {
	forum := f.newForum(tenantA)
	got, err := f.s.GetSession(f.ctx, tenantA, forum.ID)
	f.ok(err, "GetSession forum")
	eq(f, got.Kind, forge.KindForum, "kind")
	f.sameJSON(got.Guards, forge.DefaultForumGuards(), "guards")
	p, mono, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "join")
	stint, err := f.s.GetParticipant(f.ctx, tenantA, forum.ID, p.ID)
	f.ok(err, "GetParticipant")
	f.sameJSON(stint, p, "stint")
	m, err := f.s.GetSession(f.ctx, tenantA, mono.ID)
	f.ok(err, "monologue")
	eq(f, m.Kind, forge.KindMonologue, "monologue kind")
	msgs, _, err := f.s.ListMessages(f.ctx, tenantA, forge.MessageQuery{SessionID: mono.ID})
	f.ok(err, "monologue messages")
	eq(f, len(msgs), 0, "a fresh monologue holds nothing")
	evs := f.events(forum, forge.EventQuery{})
	eq(f, len(evs), 1, "forum events")
	eq(f, evs[0].Type, forge.EventForumMemberJoined, "event type")

	// A join into a forum that does not exist writes nothing: neither the
	// stint nor the monologue.
	ghost := &forge.Session{ID: "ses_ghost", Tenant: tenantA}
	p2 := &forge.Participant{ID: f.id(forge.PrefixParticipant), Tenant: tenantA, ForumID: ghost.ID,
		Actor: forge.Actor{Type: forge.ActorAgent, Agent: "x"}, ActorID: "agent:x", Trigger: "auto"}
	mono2 := &forge.Session{ID: f.id(forge.PrefixSession), Tenant: tenantA, Kind: forge.KindMonologue, Agent: "x",
		MainThreadID: "thr_x"}
	f.is(f.s.AddParticipant(f.ctx, p2, mono2, nil), forge.ErrNotFound, "join an unknown forum")
	_, err = f.s.GetSession(f.ctx, tenantA, mono2.ID)
	f.is(err, forge.ErrNotFound, "no monologue left behind")
	// A direct session is not a forum.
	direct := f.newSession(tenantA)
	p2.ForumID = direct.ID
	f.is(f.s.AddParticipant(f.ctx, p2, nil, nil), forge.ErrNotFound, "join a direct session")
}

func testOneActiveStint(f *fixture) {
	forum := f.newForum(tenantA)
	_, _, err := f.join(forum, forge.Actor{Type: forge.ActorHuman, ID: "alice"})
	f.ok(err, "join alice")
	_, mono, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "join support")
	_, mono2, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.is(err, forge.ErrConflict, "second active stint of support")
	_, err = f.s.GetSession(f.ctx, tenantA, mono2.ID)
	f.is(err, forge.ErrNotFound, "the refused join left no monologue")
	_, _, err = f.join(forum, forge.Actor{Type: forge.ActorHuman, ID: "alice"})
	f.is(err, forge.ErrConflict, "second active stint of alice")
	_ = mono
	// Racing joins: exactly one wins.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := f.join(forum, forge.Actor{Type: forge.ActorHuman, ID: "bob"})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins++
			}
		}()
	}
	wg.Wait()
	eq(f, wins, 1, "racing joins that won")
}

func testLeaveRejoin(f *fixture) {
	forum := f.newForum(tenantA)
	p, mono, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "join")
	at := f.now()
	left, ended, err := f.s.EndParticipant(f.ctx, tenantA, forum.ID, p.ID, at, []forge.Event{f.forumEvent(forum, forge.EventForumMemberLeft, p.ID, p)})
	f.ok(err, "leave")
	eq(f, ended, true, "first leave ends the stint")
	if left.LeftAt == nil || !left.LeftAt.Equal(at) {
		f.Fatalf("left_at = %v, want %v", left.LeftAt, at)
	}
	again, ended, err := f.s.EndParticipant(f.ctx, tenantA, forum.ID, p.ID, f.now(), []forge.Event{f.forumEvent(forum, forge.EventForumMemberLeft, p.ID, p)})
	f.ok(err, "leave again")
	eq(f, ended, false, "second leave ends nothing")
	f.sameJSON(again, left, "the same answer")
	evs := f.events(forum, forge.EventQuery{})
	eq(f, len(evs), 2, "joined + one left event")
	_, _, err = f.s.EndParticipant(f.ctx, tenantA, forum.ID, "par_nope", f.now(), nil)
	f.is(err, forge.ErrNotFound, "leave an unknown stint")

	p2, mono2, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "re-join")
	if p2.ID == p.ID || mono2.ID == mono.ID {
		f.Fatalf("re-join reused the stint or the monologue")
	}
	_, err = f.s.GetSession(f.ctx, tenantA, mono.ID)
	f.ok(err, "the old monologue stays readable")
}

func testListMembers(f *fixture) {
	forum := f.newForum(tenantA)
	a, _, err := f.join(forum, forge.Actor{Type: forge.ActorHuman, ID: "alice"})
	f.ok(err, "alice")
	b, _, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "support")
	c, _, err := f.join(forum, forge.Actor{Type: forge.ActorHuman, ID: "bob"})
	f.ok(err, "bob")
	_, _, err = f.s.EndParticipant(f.ctx, tenantA, forum.ID, b.ID, f.now(), nil)
	f.ok(err, "leave")
	act, _, err := f.s.ListParticipants(f.ctx, tenantA, forum.ID, false, forge.ListOptions{})
	f.ok(err, "active")
	f.sameJSON(idsOf(act, func(p *forge.Participant) string { return p.ID }), []string{a.ID, c.ID}, "active ids")
	got := pages(f, 2, func(o forge.ListOptions) ([]*forge.Participant, string, error) {
		return f.s.ListParticipants(f.ctx, tenantA, forum.ID, true, o)
	}, func(p *forge.Participant) string { return p.ID })
	f.sameJSON(got, [][]string{{a.ID, b.ID}, {c.ID}}, "all, paged")
	_, _, err = f.s.ListParticipants(f.ctx, tenantA, "ses_nope", false, forge.ListOptions{})
	f.is(err, forge.ErrNotFound, "unknown forum")
}

// forumMessage builds a turnless forum message with one text part.
func (f *fixture) forumMessage(ses *forge.Session, text string, info *forge.ForumInfo, meta string) *forge.Message {
	m := &forge.Message{ID: f.id(forge.PrefixMessage), Tenant: ses.Tenant, SessionID: ses.ID, ThreadID: ses.MainThreadID,
		Role: forge.RoleUser, CreatedAt: f.now(), Forum: info, Parts: []*forge.Part{}}
	if meta != "" {
		m.Metadata = json.RawMessage(meta)
	}
	m.Parts = append(m.Parts, f.textPart(m, text, forge.StateCompleted))
	return m
}

func testLooseRoundTrip(f *fixture) {
	forum := f.newForum(tenantA)
	info := &forge.ForumInfo{Kind: forge.ForumKindMessage, ParticipantID: "par_1", ActorID: "human:alice", Mentions: []string{"support"}}
	m := f.forumMessage(forum, "hello @support", info, `{"client": "web"}`)
	ev := f.forumEvent(forum, forge.EventForumMessage, m.ID, m)
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Messages: []*forge.Message{m},
		Events: []forge.Event{ev}}), "AppendLoose")
	got, next, err := f.s.ListLoose(f.ctx, tenantA, forum.ID, forge.ListOptions{})
	f.ok(err, "ListLoose")
	eq(f, next, "", "one page")
	eq(f, len(got), 1, "messages")
	eq(f, got[0].TurnID, "", "turn id")
	f.sameJSON(got[0].Forum, info, "forum info")
	f.sameJSON(got[0].Metadata, json.RawMessage(`{"client": "web"}`), "metadata")
	f.sameJSON(got[0].Parts, m.Parts, "parts")
	evs := f.events(forum, forge.EventQuery{})
	eq(f, len(evs), 1, "events")
	eq(f, evs[0].TurnID == nil, true, "a turnless event")
	// A loose event naming a turn is refused and writes nothing: a turn's
	// events are read within the turn's seqs, where it would never be.
	turnful := f.forumEvent(forum, forge.EventForumMessage, "msg_turnful", m)
	tid := "turn_elsewhere"
	turnful.TurnID = &tid
	f.is(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Events: []forge.Event{turnful}}),
		forge.ErrInvalid, "a loose event naming a turn")
	eq(f, len(f.events(forum, forge.EventQuery{})), 1, "events after the refused append")
	last, err := f.s.LastLoose(f.ctx, tenantA, forum.ID, 5)
	f.ok(err, "LastLoose")
	eq(f, len(last), 1, "last")
	_, _, err = f.s.ListLoose(f.ctx, tenantB, forum.ID, forge.ListOptions{})
	f.is(err, forge.ErrNotFound, "another tenant")
}

func testOriginUnique(f *fixture) {
	mono := f.newSession(tenantA)
	copy1 := f.forumMessage(mono, "alice: hi", nil, `{"source_message_id": "msg_1"}`)
	copy1.Origin = "copy:msg_1"
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: mono.ID, Messages: []*forge.Message{copy1},
		Events: []forge.Event{f.forumEvent(mono, forge.EventMessageCreated, copy1.ID, copy1)}}), "first copy")
	again := f.forumMessage(mono, "alice: hi", nil, "")
	again.Origin = "copy:msg_1"
	before := f.events(mono, forge.EventQuery{})
	f.is(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: mono.ID, Messages: []*forge.Message{again},
		Events: []forge.Event{f.forumEvent(mono, forge.EventMessageCreated, again.ID, again)}}), forge.ErrConflict, "second copy")
	eq(f, len(f.events(mono, forge.EventQuery{})), len(before), "the refused copy wrote no event")
	got, err := f.s.MessageByOrigin(f.ctx, tenantA, mono.ID, "copy:msg_1")
	f.ok(err, "MessageByOrigin")
	eq(f, got.ID, copy1.ID, "the first copy")
	eq(f, got.Origin, "copy:msg_1", "origin")
	_, err = f.s.MessageByOrigin(f.ctx, tenantA, mono.ID, "copy:msg_2")
	f.is(err, forge.ErrNotFound, "no such origin")
	// The same origin in another session is another message.
	other := f.newSession(tenantA)
	o := f.forumMessage(other, "x", nil, "")
	o.Origin = "copy:msg_1"
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: other.ID, Messages: []*forge.Message{o}}), "other session")
}

func testLooseOnBranch(f *fixture) {
	ses := f.newSession(tenantA)
	c1 := f.forumMessage(ses, "alice: first", nil, "")
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: ses.ID, Messages: []*forge.Message{c1}}), "copy 1")
	// Before any turn the turnless messages are the whole history.
	msgs, _, err := f.s.ListMessages(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, ThreadID: ses.MainThreadID})
	f.ok(err, "no tip")
	f.sameJSON(msgIDs(msgs), []string{c1.ID}, "history before a turn")
	st := f.start(ses, nil, "ignored")
	f.end(ses, st.turn)
	c2 := f.forumMessage(ses, "bob: second", nil, "")
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: ses.ID, Messages: []*forge.Message{c2}}), "copy 2")
	got, _ := f.branch(ses, st.turn.ID, ses.MainThreadID, 0, "")
	f.sameJSON(msgIDs(got), []string{c1.ID, st.msg.ID, c2.ID}, "branch with turnless messages")
	pg := pages(f, 1, func(o forge.ListOptions) ([]*forge.Message, string, error) {
		return f.s.ListMessages(f.ctx, tenantA, forge.MessageQuery{SessionID: ses.ID, TipTurnID: st.turn.ID, ListOptions: o})
	}, func(m *forge.Message) string { return m.ID })
	f.sameJSON(pg, [][]string{{c1.ID}, {st.msg.ID}, {c2.ID}}, "paged")
}

func testMarkReply(f *fixture) {
	mono := f.newSession(tenantA)
	st := f.start(mono, nil, "q")
	out := f.message(st.turn, mono.MainThreadID, forge.RoleAssistant, "the answer")
	f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: mono.ID, TurnID: st.turn.ID,
		Messages: []*forge.Message{out}, Parts: out.Parts}), "answer")
	f.end(mono, st.turn)
	forum := f.newForum(tenantA)
	reply := f.forumMessage(forum, "the answer", &forge.ForumInfo{Kind: forge.ForumKindReply, SourceTurnID: st.turn.ID}, "")
	reply.Origin = "reply:" + st.turn.ID
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Messages: []*forge.Message{reply},
		Mark: []forge.MessageRef{{SessionID: mono.ID, MessageID: out.ID}}}), "publish")
	msgs, err := f.s.TurnMessages(f.ctx, tenantA, st.turn.ID)
	f.ok(err, "TurnMessages")
	var meta map[string]any
	f.ok(json.Unmarshal(msgs[len(msgs)-1].Metadata, &meta), "metadata")
	eq(f, meta["type"], any("reply"), "metadata.type")
	// Publishing twice is refused whole: the mark is not written again
	// and no second reply exists.
	dup := f.forumMessage(forum, "the answer", &forge.ForumInfo{Kind: forge.ForumKindReply}, "")
	dup.Origin = reply.Origin
	f.is(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Messages: []*forge.Message{dup}}), forge.ErrConflict, "second publish")
	all, _, err := f.s.ListLoose(f.ctx, tenantA, forum.ID, forge.ListOptions{})
	f.ok(err, "ListLoose")
	eq(f, len(all), 1, "replies")
	// A withheld reply writes only its mark: nothing in the forum.
	st2 := f.start(mono, &st.turn.ID, "q2")
	out2 := f.message(st2.turn, mono.MainThreadID, forge.RoleAssistant, "kept back")
	f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: mono.ID, TurnID: st2.turn.ID,
		Messages: []*forge.Message{out2}, Parts: out2.Parts}), "second answer")
	f.end(mono, st2.turn)
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID,
		Mark: []forge.MessageRef{{SessionID: mono.ID, MessageID: out2.ID, Type: forge.MetadataTypeWithheld}}}), "withhold")
	msgs, err = f.s.TurnMessages(f.ctx, tenantA, st2.turn.ID)
	f.ok(err, "TurnMessages")
	meta = nil
	f.ok(json.Unmarshal(msgs[len(msgs)-1].Metadata, &meta), "metadata")
	eq(f, meta["type"], any(forge.MetadataTypeWithheld), "withheld metadata.type")
	all, _, err = f.s.ListLoose(f.ctx, tenantA, forum.ID, forge.ListOptions{})
	f.ok(err, "ListLoose")
	eq(f, len(all), 1, "forum messages after a withheld reply")
}

func testSwap(f *fixture) {
	forum := f.newForum(tenantA)
	p, mono, err := f.join(forum, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "join")
	newMono := &forge.Session{ID: f.id(forge.PrefixSession), Kind: forge.KindMonologue, Agent: "support", MainThreadID: f.id(forge.PrefixThread)}
	seed := f.forumMessage(newMono, "summary", nil, "")
	seed.Summary, seed.Role = true, forge.RoleAssistant
	swap := &forge.MonologueSwap{Tenant: tenantA, ForumID: forum.ID, ParticipantID: p.ID, OldID: mono.ID, New: newMono,
		Seed: []*forge.Message{seed}, Events: []forge.Event{f.forumEvent(forum, forge.EventMonologueCompacted, p.ID, map[string]string{})}}
	f.ok(f.s.SwapMonologue(f.ctx, swap), "swap")
	got, err := f.s.GetParticipant(f.ctx, tenantA, forum.ID, p.ID)
	f.ok(err, "stint")
	eq(f, got.Metadata.MonologueID, newMono.ID, "monologue_id moved")
	seeded, _, err := f.s.ListLoose(f.ctx, tenantA, newMono.ID, forge.ListOptions{})
	f.ok(err, "seed")
	f.sameJSON(msgIDs(seeded), []string{seed.ID}, "seeded")
	// A second swap from the old id loses whole: no session, no event.
	loser := &forge.Session{ID: f.id(forge.PrefixSession), Kind: forge.KindMonologue, Agent: "support", MainThreadID: "thr_l"}
	swap2 := &forge.MonologueSwap{Tenant: tenantA, ForumID: forum.ID, ParticipantID: p.ID, OldID: mono.ID, New: loser,
		Events: []forge.Event{f.forumEvent(forum, forge.EventMonologueCompacted, p.ID, map[string]string{})}}
	f.is(f.s.SwapMonologue(f.ctx, swap2), forge.ErrConflict, "stale swap")
	_, err = f.s.GetSession(f.ctx, tenantA, loser.ID)
	f.is(err, forge.ErrNotFound, "the stale swap created nothing")
	eq(f, len(f.events(forum, forge.EventQuery{})), 2, "joined + one compacted")
	// An ended stint does not swap.
	_, _, err = f.s.EndParticipant(f.ctx, tenantA, forum.ID, p.ID, f.now(), nil)
	f.ok(err, "leave")
	swap3 := &forge.MonologueSwap{Tenant: tenantA, ForumID: forum.ID, ParticipantID: p.ID, OldID: newMono.ID,
		New: &forge.Session{ID: f.id(forge.PrefixSession), Kind: forge.KindMonologue, Agent: "support", MainThreadID: "thr_3"}}
	f.is(f.s.SwapMonologue(f.ctx, swap3), forge.ErrConflict, "swap after leave")
}

func testTriggerRoundTrip(f *fixture) {
	ses := f.newSession(tenantA)
	t := f.newTurn(ses, nil)
	t.Input = []forge.Input{}
	t.Trigger = &forge.TurnTrigger{CopyID: "msg_copy", SourceConversationID: "ses_forum", SourceMessageID: "msg_src", Retry: true}
	f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t}), "BeginTurn")
	got, err := f.s.GetTurn(f.ctx, tenantA, ses.ID, t.ID)
	f.ok(err, "GetTurn")
	f.sameJSON(got.Trigger, t.Trigger, "trigger")
	f.end(ses, t)
	got, err = f.s.GetTurn(f.ctx, tenantA, ses.ID, t.ID)
	f.ok(err, "GetTurn ended")
	f.sameJSON(got.Trigger, t.Trigger, "trigger after the terminal write")
}

func testForumTenancy(f *fixture) {
	forum := f.newForum(tenantA)
	p, _, err := f.join(forum, forge.Actor{Type: forge.ActorHuman, ID: "alice"})
	f.ok(err, "join")
	_, err = f.s.GetParticipant(f.ctx, tenantB, forum.ID, p.ID)
	f.is(err, forge.ErrNotFound, "another tenant's stint")
	_, _, err = f.s.EndParticipant(f.ctx, tenantB, forum.ID, p.ID, f.now(), nil)
	f.is(err, forge.ErrNotFound, "another tenant's leave")
	pb := &forge.Participant{ID: f.id(forge.PrefixParticipant), Tenant: tenantB, ForumID: forum.ID,
		Actor: forge.Actor{Type: forge.ActorHuman, ID: "mallory"}, ActorID: "human:mallory"}
	f.is(f.s.AddParticipant(f.ctx, pb, nil, nil), forge.ErrNotFound, "join another tenant's forum")
	m := f.forumMessage(forum, "x", nil, "")
	f.is(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantB, SessionID: forum.ID, Messages: []*forge.Message{m}}), forge.ErrNotFound, "append to another tenant's forum")
}

func testActiveAgentStints(f *fixture) {
	fa, fb := f.newForum(tenantA), f.newForum(tenantB)
	a, _, err := f.join(fa, forge.Actor{Type: forge.ActorAgent, Agent: "support"})
	f.ok(err, "a")
	_, _, err = f.join(fa, forge.Actor{Type: forge.ActorHuman, ID: "alice"})
	f.ok(err, "human")
	b, _, err := f.join(fb, forge.Actor{Type: forge.ActorAgent, Agent: "sales"})
	f.ok(err, "b")
	c, _, err := f.join(fb, forge.Actor{Type: forge.ActorAgent, Agent: "gone"})
	f.ok(err, "c")
	_, _, err = f.s.EndParticipant(f.ctx, tenantB, fb.ID, c.ID, f.now(), nil)
	f.ok(err, "leave c")
	got, err := f.s.ActiveAgentStints(f.ctx)
	f.ok(err, "ActiveAgentStints")
	f.sameJSON(sorted(idsOf(got, func(p *forge.Participant) string { return p.ID })...), sorted(a.ID, b.ID), "active agent stints")
	for _, p := range got {
		if p.Tenant == "" || p.Metadata.MonologueID == "" {
			f.Fatalf("stint %s lacks its tenant or monologue", p.ID)
		}
	}
}
