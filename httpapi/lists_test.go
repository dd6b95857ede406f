package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// maxLimit is API.md's largest page.
const maxLimit = 10000

// pageOf reads one page of a list.
func (s *stack) pageOf(path string) (n int, next *string) {
	s.t.Helper()
	var page struct {
		Data       []struct{} `json:"data"` // counted, not kept
		NextCursor *string    `json:"next_cursor"`
	}
	s.call("GET", path, nil, 200, &page)
	return len(page.Data), page.NextCursor
}

// checkMaxPages reads a list of total items at limit=10000: a full first
// page whose next_cursor is set, then the rest with none.
func (s *stack) checkMaxPages(t *testing.T, path string, total int) {
	t.Helper()
	sep := "?"
	if u, _ := url.Parse(path); u.RawQuery != "" {
		sep = "&"
	}
	n, next := s.pageOf(path + sep + "limit=10000")
	if n != maxLimit || next == nil {
		t.Errorf("%s at limit=10000: %d items, next_cursor %v; want %d and a cursor (%d in all)", path, n, next, maxLimit, total)
		return
	}
	n, next = s.pageOf(path + sep + "limit=10000&cursor=" + url.QueryEscape(*next))
	if n != total-maxLimit || next != nil {
		t.Errorf("%s, second page: %d items, next_cursor %v; want %d and null", path, n, next, total-maxLimit)
	}
}

// appendEvents writes n events outside turns to a session, through the
// engine's log, in one write.
func (s *stack) appendEvents(sid string, n int) {
	s.t.Helper()
	drafts := make([]eventlog.Draft, n)
	for i := range drafts {
		drafts[i] = eventlog.Draft{Type: forge.EventMessageCreated, ID: fmt.Sprintf("msg_bulk%d", i), Data: map[string]int{"i": i}}
	}
	_, err := s.eng.Log().Write(context.Background(), forge.DefaultTenant, sid, drafts, func(ctx context.Context, evs []forge.Event) error {
		return s.store.AppendLoose(ctx, &forge.LooseAppend{Tenant: forge.DefaultTenant, SessionID: sid, Events: evs})
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// TestEventListsAtTheMaximumLimit: a session's, a turn's and a forum's
// event lists at limit=10000 answer 10,000 events and a next_cursor when
// more follow, and null when the page holds the last one (the store pages
// at most 10,000 rows, so the look for one more cannot ride on the page).
func TestEventListsAtTheMaximumLimit(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("echo")
	ses := s.createSession("echo")
	var turn forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn("hi"), 200, &turn)
	sp := "/v1/sessions/" + ses.ID
	stored, _ := s.pageOf(sp + "/events")
	// Exactly 10,000: one page without a cursor; 7 more make two.
	turnEvents, _ := s.pageOf(sp + "/turns/" + turn.ID + "/events")
	s.appendEvents(ses.ID, maxLimit-stored)
	if n, next := s.pageOf(sp + "/events?limit=10000"); n != maxLimit || next != nil {
		t.Errorf("exactly 10000 events: %d, next_cursor %v", n, next)
	}
	s.appendEvents(ses.ID, 7)
	s.checkMaxPages(t, sp+"/events", maxLimit+7)
	// The turn's page holds its own events only, not the 10,007 after it.
	if n, next := s.pageOf(sp + "/turns/" + turn.ID + "/events?limit=10000"); n != turnEvents || next != nil {
		t.Errorf("turn events at limit=10000: %d, next_cursor %v; want its %d", n, next, turnEvents)
	}

	var forum struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)
	stored, _ = s.pageOf("/v1/forums/" + forum.ID + "/events")
	s.appendEvents(forum.ID, maxLimit+1-stored)
	s.checkMaxPages(t, "/v1/forums/"+forum.ID+"/events", maxLimit+1)
}

// TestListsAtTheMaximumLimit: every other list (agents, sessions, forums,
// turns, messages, forum members and messages) at limit=10000 answers
// 10,000 items and a next_cursor when more follow, then the rest.
//
// It stores over 70,000 rows one write at a time (about 40 s under the
// race detector), so it runs with FORGE_TEST_LONG=1 only; the store's
// lists compute next_cursor after their own cap (storeutil.Limit), unlike
// the event lists above, which the API pages itself.
func TestListsAtTheMaximumLimit(t *testing.T) {
	if os.Getenv("FORGE_TEST_LONG") == "" {
		t.Skip("stores 70,000 rows: set FORGE_TEST_LONG=1 to run")
	}
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	st := s.store
	now := time.Now().UTC()
	ids := forge.NewULIDGen(nil)
	const n = maxLimit + 3
	for i := range n {
		a := &forge.Agent{Tenant: forge.DefaultTenant, Name: fmt.Sprintf("a%05d", i), Model: "scripted/echo"}
		if err := a.Normalize(nil); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	s.checkMaxPages(t, "/v1/agents", n)

	newSession := func(kind string) *forge.Session {
		ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: kind, Agent: "a00000",
			MainThreadID: ids.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
		if kind == forge.KindForum {
			ses.Agent = ""
			ses.Guards = &forge.ForumGuards{}
		}
		if err := st.CreateSession(ctx, ses); err != nil {
			t.Fatal(err)
		}
		return ses
	}
	for range n {
		newSession(forge.KindForum)
	}
	s.checkMaxPages(t, "/v1/forums", n)
	s.checkMaxPages(t, "/v1/sessions", n)

	direct := newSession(forge.KindDirect)
	for i := range n {
		turn := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: direct.ID, Status: forge.TurnDone,
			Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: now}
		if err := st.BeginTurn(ctx, &forge.BeginTurn{Turn: turn}); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	s.checkMaxPages(t, "/v1/sessions/"+direct.ID+"/turns", n)

	// Messages outside turns: a session without turns lists them.
	loose := func(ses *forge.Session) {
		msgs := make([]*forge.Message, n)
		for i := range msgs {
			m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: ses.ID, ThreadID: ses.MainThreadID,
				Role: forge.RoleUser, CreatedAt: now, Metadata: json.RawMessage(`{}`)}
			m.Parts = []*forge.Part{{ID: ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: ses.ID, Type: forge.PartText,
				Text: "hi", State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
			msgs[i] = m
		}
		if err := st.AppendLoose(ctx, &forge.LooseAppend{Tenant: forge.DefaultTenant, SessionID: ses.ID, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	noTurns := newSession(forge.KindDirect)
	loose(noTurns)
	s.checkMaxPages(t, "/v1/sessions/"+noTurns.ID+"/messages", n)

	var forum struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)
	fses, err := st.GetSession(ctx, forge.DefaultTenant, forum.ID)
	if err != nil {
		t.Fatal(err)
	}
	loose(fses)
	s.checkMaxPages(t, "/v1/forums/"+forum.ID+"/messages", n)
	for i := range n {
		p := &forge.Participant{ID: ids.New(forge.PrefixParticipant), Tenant: forge.DefaultTenant, ForumID: forum.ID,
			Actor: forge.Actor{Type: forge.ActorHuman, ID: fmt.Sprintf("h%05d", i)}, JoinedAt: now}
		p.ActorID = p.Actor.Key()
		if err := st.AddParticipant(ctx, p, nil, nil); err != nil {
			t.Fatalf("participant %d: %v", i, err)
		}
	}
	s.checkMaxPages(t, "/v1/forums/"+forum.ID+"/members", n)
}
