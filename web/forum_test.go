package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/web"
)

// forumStandIn serves the forum endpoints of API.md ("Forums") with the
// documented shapes, over loopback HTTP, until the real routes land in
// httpapi: GET /v1/forums, /v1/forums/{fid}, /members, /events (a JSON page
// or an SSE stream with Last-Event-ID resume), plus GET /v1/sessions for
// the index. The pages under test are the real ones (web.New()); only the
// API behind them is a stand-in. push sends an event to open streams (and
// keeps it for replays when it has a seq, as the real log would).
type forumStandIn struct {
	t     *testing.T
	srv   *httptest.Server
	forum map[string]any

	mu       sync.Mutex // guards the following
	members  []map[string]any
	events   []map[string]any
	streams  map[chan []byte]bool
	lastIDs  []string // Last-Event-ID of each stream request
	sessions []map[string]any
}

const standInForum = "ses_01FORUMSTANDIN0000000000"

func newForumStandIn(t *testing.T) *forumStandIn {
	f := &forumStandIn{t: t, streams: map[chan []byte]bool{}}
	at := func(min int) string {
		return time.Date(2026, 5, 4, 9, min, 0, 0, time.UTC).Format(time.RFC3339Nano)
	}
	f.forum = map[string]any{"id": standInForum, "kind": "forum", "title": "Support room", "metadata": map[string]any{},
		"guards": map[string]any{"max_agent_streak": 8}, "created_at": at(0)}
	stint := func(id, actorID string, actor map[string]any, joined int, left *int, mono string) map[string]any {
		s := map[string]any{"id": id, "forum_id": standInForum, "actor": actor, "actor_id": actorID,
			"joined_at": at(joined), "left_at": nil, "metadata": map[string]any{}}
		if left != nil {
			s["left_at"] = at(*left)
		}
		if mono != "" {
			s["trigger"] = "auto"
			s["metadata"] = map[string]any{"monologue_id": mono}
		}
		return s
	}
	eight := 8
	alice := stint("par_alice", "human:alice", map[string]any{"type": "human", "id": "alice"}, 1, nil, "")
	support := stint("par_support", "agent:support", map[string]any{"type": "agent", "agent": "support"}, 1, nil, "ses_mono1")
	bob := stint("par_bob", "human:bob", map[string]any{"type": "human", "id": "bob"}, 2, nil, "")
	bobLeft := stint("par_bob", "human:bob", map[string]any{"type": "human", "id": "bob"}, 2, &eight, "")
	supportNow := stint("par_support", "agent:support", map[string]any{"type": "agent", "agent": "support"}, 1, nil, "ses_mono2")
	f.members = []map[string]any{alice, supportNow, bobLeft}
	msg := func(id, kind string, author map[string]any, text string, mentions []string, replyTo any, min int) map[string]any {
		if mentions == nil {
			mentions = []string{}
		}
		return map[string]any{"id": id, "forum_id": standInForum, "kind": kind, "author": author, "text": text,
			"mentions": mentions, "reply_to": replyTo, "metadata": map[string]any{}, "created_at": at(min)}
	}
	by := func(par, actor string) map[string]any {
		return map[string]any{"participant_id": par, "actor_id": actor}
	}
	for _, e := range []struct {
		typ  string
		data map[string]any
	}{
		{"forum.member.joined", alice},
		{"forum.member.joined", support},
		{"forum.member.joined", bob},
		{"forum.message", msg("msg_1", "message", by("par_alice", "human:alice"),
			"@support where is order 42? <b>now</b><img src=x onerror=\"window.__xss=1\">", []string{"support"}, nil, 3)},
		{"forum.message", msg("msg_2", "reply", by("par_support", "agent:support"), "Order 42 shipped yesterday.", nil, "msg_1", 4)},
		{"forum.message", msg("msg_3", "notice", nil, "Guard max_agent_streak fired: agents wait for a human.", nil, nil, 5)},
		{"agent.monologue.compacted", map[string]any{"participant_id": "par_support", "old_monologue_id": "ses_mono1", "new_monologue_id": "ses_mono2"}},
		{"forum.member.left", bobLeft},
	} {
		f.events = append(f.events, f.envelope(int64(len(f.events)+1), e.typ, e.data))
	}
	f.sessions = []map[string]any{
		{"id": "ses_01DIRECT0000000000000000", "kind": "direct", "agent": "support", "title": "A direct chat", "tip_turn_id": nil,
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 2, "cost": 0.5}, "created_at": at(30)},
		{"id": "ses_mono2", "kind": "monologue", "agent": "support", "title": "", "tip_turn_id": nil,
			"usage": map[string]any{"input_tokens": 0, "output_tokens": 0, "cost": 0}, "created_at": at(7)},
	}

	mux := http.NewServeMux()
	mux.Handle(web.Prefix, web.New())
	mux.HandleFunc("GET /v1/forums", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"data": []any{f.forum}, "next_cursor": nil})
	})
	mux.HandleFunc("GET /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"data": f.sessions, "next_cursor": nil})
	})
	mux.HandleFunc("GET /v1/forums/{fid}", func(w http.ResponseWriter, r *http.Request) {
		if !f.known(w, r) {
			return
		}
		writeJSON(w, 200, f.forum)
	})
	mux.HandleFunc("GET /v1/forums/{fid}/members", func(w http.ResponseWriter, r *http.Request) {
		if !f.known(w, r) {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []map[string]any
		for _, m := range f.members {
			if r.URL.Query().Get("all") == "true" || m["left_at"] == nil {
				out = append(out, m)
			}
		}
		writeJSON(w, 200, map[string]any{"data": out, "next_cursor": nil})
	})
	mux.HandleFunc("GET /v1/forums/{fid}/events", func(w http.ResponseWriter, r *http.Request) {
		if !f.known(w, r) {
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			f.stream(w, r)
			return
		}
		f.page(w, r)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *forumStandIn) known(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("fid") != standInForum {
		writeJSON(w, 404, map[string]any{"error": map[string]any{"code": "not_found", "message": "forum not found"}})
		return false
	}
	return true
}

func (f *forumStandIn) envelope(seq int64, typ string, data map[string]any) map[string]any {
	ev := map[string]any{"type": typ, "session_id": standInForum, "turn_id": nil, "thread_id": nil,
		"created_at": time.Date(2026, 5, 4, 9, 30, 0, 0, time.UTC).Format(time.RFC3339Nano), "data": data}
	if seq > 0 {
		ev["seq"] = seq
		ev["id"] = data["id"]
	} else {
		ev["id"] = data["participant_id"]
	}
	return ev
}

// page answers GET /events as JSON: the stored events after the cursor.
func (f *forumStandIn) page(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, _ := strconv.ParseInt(q.Get("cursor"), 10, 64)
	if v := q.Get("after"); v != "" {
		after, _ = strconv.ParseInt(v, 10, 64)
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 1000
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	var next any
	for _, ev := range f.events {
		if ev["seq"].(int64) <= after {
			continue
		}
		if len(out) == limit {
			next = strconv.FormatInt(out[len(out)-1]["seq"].(int64), 10)
			break
		}
		out = append(out, ev)
	}
	writeJSON(w, 200, map[string]any{"data": out, "next_cursor": next})
}

func frame(ev map[string]any) []byte {
	data, _ := json.Marshal(ev)
	if seq, ok := ev["seq"].(int64); ok {
		return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", seq, ev["type"], data)
	}
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", ev["type"], data)
}

// stream answers GET /events as SSE: the stored events after the
// Last-Event-ID (or ?after), then what push sends.
func (f *forumStandIn) stream(w http.ResponseWriter, r *http.Request) {
	pos := r.Header.Get("Last-Event-ID")
	if pos == "" {
		pos = r.URL.Query().Get("after")
	}
	after, _ := strconv.ParseInt(pos, 10, 64)
	ch := make(chan []byte, 16)
	f.mu.Lock()
	f.lastIDs = append(f.lastIDs, r.Header.Get("Last-Event-ID"))
	var backlog [][]byte
	for _, ev := range f.events {
		if ev["seq"].(int64) > after {
			backlog = append(backlog, frame(ev))
		}
	}
	f.streams[ch] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.streams, ch)
		f.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	rc := http.NewResponseController(w)
	for _, b := range backlog {
		_, _ = w.Write(b)
	}
	_ = rc.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-ch:
			if _, err := w.Write(b); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}
}

// push sends an event to every open stream; with a seq it is also kept.
func (f *forumStandIn) push(seq int64, typ string, data map[string]any) {
	ev := f.envelope(seq, typ, data)
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq > 0 {
		f.events = append(f.events, ev)
	}
	for ch := range f.streams {
		ch <- frame(ev)
	}
}

func (f *forumStandIn) streamRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lastIDs...)
}

// TestForumPage: the room as its members see it, against the stand-in
// forum API: messages with mentions, a reply quoting what it answers, a
// guard's notice, joins and leaves, the monologue links of the agent's
// stint (before and after its compaction), live typing and a live reply,
// and a resume after a cut connection that typing frames (no id) do not
// move.
func TestForumPage(t *testing.T) {
	f := newForumStandIn(t)
	b := newBrowser(t)
	b.navigate(f.srv.URL + "/ui/forums/" + standInForum)
	b.waitFor(`document.body.dataset.state === 'live' && document.body.dataset.stream === 'open'`)

	if got := eval[string](b, `document.getElementById('title').textContent`); got != "Support room" {
		t.Fatalf("title %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.fmsg')].map(m => m.dataset.kind + ':' + m.querySelector('.author').textContent).join(',')`); got != "message:alice,reply:support,notice:Forge" {
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
	// The reply came from the monologue the stint had then (before the
	// compaction); the member list links the current one and the earlier one.
	if got := eval[string](b, `document.querySelector('.fmsg.kind-reply a.monologue').getAttribute('href')`); got != "/ui/sessions/ses_mono1" {
		t.Fatalf("reply's monologue link %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('#members li[data-participant=par_support] a.monologue')].map(a => a.getAttribute('href')).join(',')`); got != "/ui/sessions/ses_mono2,/ui/sessions/ses_mono1" {
		t.Fatalf("stint's monologue links %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('#members li strong')].map(s => s.textContent).join(',') + '|' + [...document.querySelectorAll('#left li strong')].map(s => s.textContent).join(',')`); got != "alice,support|bob" {
		t.Fatalf("members %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.room-line')].map(l => l.textContent).join('|')`); got != "alice joined|support joined|bob joined|support’s monologue was compacted: before → after|bob left" {
		t.Fatalf("room lines %q", got)
	}

	pushReply := func(seq int64, id, text string) {
		f.push(seq, "forum.message", map[string]any{"id": id, "forum_id": standInForum, "kind": "reply",
			"author": map[string]any{"participant_id": "par_support", "actor_id": "agent:support"}, "text": text,
			"mentions": []string{}, "reply_to": "msg_1", "metadata": map[string]any{}, "created_at": time.Now().UTC().Format(time.RFC3339Nano)})
	}
	f.push(0, "forum.typing", map[string]any{"participant_id": "par_support", "typing": true})
	b.waitFor(`document.getElementById('typing').textContent === 'support is typing…'`)
	pushReply(9, "msg_4", "It arrives on Friday.")
	b.waitFor(`document.querySelectorAll('.fmsg').length === 4`)
	if got := eval[string](b, `document.getElementById('typing').textContent`); got != "" {
		t.Fatalf("typing after the reply: %q", got)
	}
	if got := eval[string](b, `document.querySelectorAll('.fmsg')[3].querySelector('a.monologue').getAttribute('href')`); got != "/ui/sessions/ses_mono2" {
		t.Fatalf("the new reply's monologue link %q", got)
	}
	f.push(0, "forum.typing", map[string]any{"participant_id": "par_support", "typing": true})
	b.waitFor(`document.getElementById('typing').textContent === 'support is typing…'`)

	// Cut the stream: the page resumes after the last event with an id (a
	// typing frame has none).
	f.srv.CloseClientConnections()
	b.waitFor(`Number(document.body.dataset.reconnects || 0) >= 1 && document.body.dataset.stream === 'open'`)
	if ids := f.streamRequests(); len(ids) != 2 || ids[0] != "8" || ids[1] != "9" {
		t.Fatalf("stream requests' Last-Event-ID %q, want 8 (after the history) then 9", ids)
	}
	pushReply(10, "msg_5", "Tracking number follows.")
	b.waitFor(`document.querySelectorAll('.fmsg').length === 5`)
	if n := eval[int](b, `document.querySelectorAll('[data-message=msg_4]').length`); n != 1 {
		t.Fatalf("msg_4 shown %d times", n)
	}
	b.screenshot("forum.png")
	b.checkConsole()
}

// TestIndexListsForums: with forums on the server, the index lists them
// beside the sessions (newest first) and links each to its room.
func TestIndexListsForums(t *testing.T) {
	f := newForumStandIn(t)
	b := newBrowser(t)
	b.navigate(f.srv.URL + "/ui/")
	b.waitFor(`document.body.dataset.state === 'ready'`)
	if got := eval[string](b, `document.body.dataset.forums`); got != "listed" {
		t.Fatalf("forums %q", got)
	}
	got := eval[string](b, `[...document.querySelectorAll('#rows tr')].map(r => r.dataset.kind + ' ' + r.querySelector('a').getAttribute('href')).join(',')`)
	want := "direct /ui/sessions/ses_01DIRECT0000000000000000,monologue /ui/sessions/ses_mono2,forum /ui/forums/" + standInForum
	if got != want {
		t.Fatalf("rows\n got %s\nwant %s", got, want)
	}
}

// TestForumPageUnknownForum: a forum that does not exist (or is another
// tenant's) says so and opens no stream.
func TestForumPageUnknownForum(t *testing.T) {
	f := newForumStandIn(t)
	b := newBrowser(t)
	b.navigate(f.srv.URL + "/ui/forums/ses_nope")
	b.waitFor(`document.body.dataset.state === 'error'`)
	if got := eval[string](b, `document.getElementById('banner').textContent`); !strings.Contains(got, "There is no forum ses_nope") {
		t.Fatalf("banner %q", got)
	}
	if ids := f.streamRequests(); len(ids) != 0 {
		t.Fatalf("opened %d streams", len(ids))
	}
}
