package web_test

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// forumRoom builds a room on a real server (SQLite, the engine, the forum
// layer, the scripted model): alice and bob (humans) and support (an
// agent whose replies stream slowly enough to be seen typing); alice asks
// support with markup in her message, support answers, bob leaves. It
// returns the forum id and support's stint.
func forumRoom(t *testing.T, s *testServer) (string, map[string]any) {
	t.Helper()
	s.createAgent(map[string]any{"name": "support", "model": "scripted/echo", "model_params": map[string]any{
		"script": []any{map[string]any{"text": "Order 42 shipped yesterday.", "chunk": 4, "delay_ms": 80}}}})
	var f map[string]any
	s.call("POST", "/v1/forums", map[string]any{"title": "Support room", "guards": map[string]any{"max_agent_streak": 8}}, 201, &f)
	fid := f["id"].(string)
	var support, bob map[string]any
	s.call("POST", "/v1/forums/"+fid+"/members", map[string]any{"actor": map[string]any{"type": "human", "id": "alice"}}, 201, nil)
	s.call("POST", "/v1/forums/"+fid+"/members", map[string]any{"actor": map[string]any{"type": "agent", "agent": "support"}}, 201, &support)
	s.call("POST", "/v1/forums/"+fid+"/members", map[string]any{"actor": map[string]any{"type": "human", "id": "bob"}}, 201, &bob)
	s.call("POST", "/v1/forums/"+fid+"/messages", map[string]any{"author": "alice",
		"text": "@support where is order 42? <b>now</b><img src=x onerror=\"window.__xss=1\">"}, 201, nil)
	waitReplies(t, s, fid, 1)
	s.call("DELETE", "/v1/forums/"+fid+"/members/"+bob["id"].(string), nil, 200, nil)
	return fid, support
}

// waitReplies waits until the forum holds n replies.
func waitReplies(t *testing.T, s *testServer, fid string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var page struct {
			Data []map[string]any `json:"data"`
		}
		s.call("GET", "/v1/forums/"+fid+"/messages", nil, 200, &page)
		got := 0
		for _, m := range page.Data {
			if m["kind"] == "reply" {
				got++
			}
		}
		if got >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("forum %s did not get %d replies", fid, n)
}

// TestForumPage: the room as its members see it, on the real API:
// messages with mentions, a reply quoting what it answers, joins and
// leaves, the monologue link of the agent's stint, live typing and a live
// reply, and a resume after a cut connection that typing frames (no id)
// do not move.
func TestForumPage(t *testing.T) {
	s := newServer(t)
	fid, support := forumRoom(t, s)
	mono := support["metadata"].(map[string]any)["monologue_id"].(string)
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/forums/" + fid)
	b.waitFor(`document.body.dataset.state === 'live' && document.body.dataset.stream === 'open'`)

	if got := eval[string](b, `document.getElementById('title').textContent`); got != "Support room" {
		t.Fatalf("title %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.fmsg')].map(m => m.dataset.kind + ':' + m.querySelector('.author').textContent).join(',')`); got != "message:alice,reply:support" {
		t.Fatalf("messages %s", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.fmsg .mention')].map(m => m.textContent).join(',')`); got != "@support" {
		t.Fatalf("mentions %q", got)
	}
	// Markup in a message is text.
	if n := eval[int](b, `document.querySelectorAll('.messages img, .messages b').length`); n != 0 || !eval[bool](b, `window.__xss === undefined`) {
		t.Fatalf("markup in a message became %d elements", n)
	}
	if !strings.Contains(b.text(), `<b>now</b><img src=x onerror="window.__xss=1">`) {
		t.Fatal("the message's markup is not shown as text")
	}
	reply := eval[string](b, `document.querySelector('.fmsg.kind-reply .reply-to').textContent`)
	if !strings.HasPrefix(reply, "↪ in reply to alice: “@support where is order 42?") {
		t.Fatalf("reply quote %q", reply)
	}
	if got := eval[string](b, `document.querySelector('.fmsg.kind-reply a.monologue').getAttribute('href')`); got != "/ui/sessions/"+mono {
		t.Fatalf("reply's monologue link %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('#members li[data-participant=`+support["id"].(string)+`] a.monologue')].map(a => a.getAttribute('href')).join(',')`); got != "/ui/sessions/"+mono {
		t.Fatalf("stint's monologue links %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('#members li strong')].map(s => s.textContent).join(',') + '|' + [...document.querySelectorAll('#left li strong')].map(s => s.textContent).join(',')`); got != "alice,support|bob" {
		t.Fatalf("members %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.room-line')].map(l => l.textContent).join('|')`); got != "alice joined|support joined|bob joined|bob left" {
		t.Fatalf("room lines %q", got)
	}

	// Live: support types, then its reply arrives and typing ends.
	s.call("POST", "/v1/forums/"+fid+"/messages", map[string]any{"author": "alice", "text": "@support and when does it arrive?"}, 201, nil)
	b.waitFor(`document.getElementById('typing').textContent === 'support is typing…'`)
	b.waitFor(`document.querySelectorAll('.fmsg').length === 4`)
	b.waitFor(`document.getElementById('typing').textContent === ''`)

	// Cut the stream: the page resumes after the last event with an id (a
	// typing frame has none), and shows nothing twice.
	before := len(s.streamRequests())
	var evs struct {
		Data []map[string]any `json:"data"`
	}
	s.call("GET", "/v1/forums/"+fid+"/events", nil, 200, &evs)
	lastSeq := evs.Data[len(evs.Data)-1]["seq"].(float64)
	s.srv.CloseClientConnections()
	b.waitFor(`Number(document.body.dataset.reconnects || 0) >= 1 && document.body.dataset.stream === 'open'`)
	ids := s.streamRequests()
	if len(ids) != before+1 || ids[len(ids)-1] != strconv.FormatFloat(lastSeq, 'f', 0, 64) {
		t.Fatalf("stream requests' Last-Event-ID %q, want the last stored seq %v", ids, lastSeq)
	}
	s.call("POST", "/v1/forums/"+fid+"/messages", map[string]any{"author": "alice", "text": "@support thanks"}, 201, nil)
	b.waitFor(`document.querySelectorAll('.fmsg').length === 6`)
	var all struct {
		Data []map[string]any `json:"data"`
	}
	s.call("GET", "/v1/forums/"+fid+"/messages", nil, 200, &all)
	for _, m := range all.Data {
		if n := eval[int](b, `document.querySelectorAll('[data-message=`+m["id"].(string)+`]').length`); n != 1 {
			t.Fatalf("message %s shown %d times", m["id"], n)
		}
	}
	b.screenshot("forum.png")
	b.checkConsole()
}

// TestIndexListsForums: with forums on the server, the index lists them
// beside the sessions (newest first) and links each to its room.
func TestIndexListsForums(t *testing.T) {
	s := newServer(t)
	fid, support := forumRoom(t, s)
	mono := support["metadata"].(map[string]any)["monologue_id"].(string)
	direct := s.createSession("support", "A direct chat")
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/")
	b.waitFor(`document.body.dataset.state === 'ready'`)
	if got := eval[string](b, `document.body.dataset.forums`); got != "listed" {
		t.Fatalf("forums %q", got)
	}
	got := eval[string](b, `[...document.querySelectorAll('#rows tr')].map(r => r.dataset.kind + ' ' + r.querySelector('a').getAttribute('href')).join(',')`)
	want := "direct /ui/sessions/" + direct.ID + ",monologue /ui/sessions/" + mono + ",forum /ui/forums/" + fid
	if got != want {
		t.Fatalf("rows\n got %s\nwant %s", got, want)
	}
}

// TestForumPageUnknownForum: a forum that does not exist (or is another
// tenant's) says so and opens no stream.
func TestForumPageUnknownForum(t *testing.T) {
	s := newServer(t)
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/forums/ses_nope")
	b.waitFor(`document.body.dataset.state === 'error'`)
	if got := eval[string](b, `document.getElementById('banner').textContent`); !strings.Contains(got, "There is no forum ses_nope") {
		t.Fatalf("banner %q", got)
	}
	if ids := s.streamRequests(); len(ids) != 0 {
		t.Fatalf("opened %d streams", len(ids))
	}
}
