package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestIndexPage: against the real server (which has no forum routes yet:
// the 404 of /v1/forums is tolerated), sessions are listed newest first with
// their tip turn's status, usage and cost, and the search filters by title
// or id.
func TestIndexPage(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	s.createAgent(map[string]any{"name": "priced", "model": "openai/gpt-4.1-mini"})
	s.oai.Enqueue(openaitest.Text("Paris.").Usage(2000, 10))
	a := s.createSession("echo", "Billing question")
	s.turn(a.ID, "hello")
	b1 := s.createSession("priced", "Travel plans")
	s.turn(b1.ID, "capital of France?")
	c := s.createSession("echo", "Empty one")

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/")
	b.waitFor(`document.body.dataset.state === 'ready' && document.querySelectorAll('#rows .tip .pill').length === 2`)
	// The server has the forum routes and no forum: the list is empty.
	if got := eval[string](b, `document.body.dataset.forums`); got != "listed" {
		t.Fatalf("forums %q, want listed", got)
	}
	rows := eval[[]string](b, `[...document.querySelectorAll('#rows tr')].map(r => [...r.cells].map(c => c.textContent).slice(0, 7).join('|'))`)
	want := []string{
		"Empty one|direct|echo|" + c.ID + "|no turns|—|—",
		"Travel plans|direct|priced|" + b1.ID + "|done|2,000 in · 10 out|$0.00082",
		"Billing question|direct|echo|" + a.ID + "|done|",
	}
	if len(rows) != 3 || rows[0] != want[0] || rows[1] != want[1] || !strings.HasPrefix(rows[2], want[2]) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if got := eval[string](b, `document.querySelector('#rows a').getAttribute('href')`); got != "/ui/sessions/"+c.ID {
		t.Fatalf("link %q", got)
	}
	b.screenshot("index.png")

	visible := func() string {
		return eval[string](b, `[...document.querySelectorAll('#rows tr:not([hidden]) td:first-child')].map(c => c.textContent).join(',')`)
	}
	b.typeInto("#search", "travel")
	b.waitFor(`document.getElementById('count').textContent === '1 of 3'`)
	if got := visible(); got != "Travel plans" {
		t.Fatalf("search by title shows %q", got)
	}
	b.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('search').value = ''`))
	b.typeInto("#search", a.ID[len(a.ID)-8:])
	b.waitFor(`document.getElementById('count').textContent === '1 of 3'`)
	if got := visible(); got != "Billing question" {
		t.Fatalf("search by id shows %q", got)
	}
	b.checkConsole()
}

// TestScriptUnits runs the pure parts of the scripts in the browser: the
// SSE parser on awkward input (line endings of every kind, a CRLF split
// across chunks, multi-line data, comments, frames without an id, an id
// with no data) and the line diff.
func TestScriptUnits(t *testing.T) {
	s := newServer(t)
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/")
	got := eval[string](b, `(async () => {
		const {SSEParser} = await import('/ui/assets/forge.js');
		const out = [];
		const p = new SSEParser((e) => out.push(e), (c) => out.push({comment: c}));
		for (const chunk of ['id: 1\nevent: a\nda', 'ta: x\n', '\n', 'data: l1\r\ndata: l2\r', '\n\r\n',
			': ping\n\n', 'event: typing\ndata: {}\n\n', 'id: 7\rdata:y\r\r', 'id: 9\n\n', 'data: after-id-only\n\n',
			'data: no end']) p.feed(chunk);
		p.end();
		return JSON.stringify(out);
	})()`)
	var events []map[string]any
	if err := json.Unmarshal([]byte(got), &events); err != nil {
		t.Fatal(err)
	}
	want := `[{"data":"x","id":"1","type":"a"},{"data":"l1\nl2","id":null,"type":"message"},{"comment":"ping"},{"data":"{}","id":null,"type":"typing"},{"data":"y","id":"7","type":"message"},{"data":"after-id-only","id":null,"type":"message"}]`
	if g, _ := json.Marshal(events); string(g) != want {
		t.Fatalf("parsed\n%s\nwant\n%s", g, want)
	}
	lastID := eval[string](b, `(async () => {
		const {SSEParser} = await import('/ui/assets/forge.js');
		const p = new SSEParser(() => {});
		p.feed('id: 3\ndata: a\n\nid: 4\n\nevent: typing\ndata: {}\n\n');
		return p.lastId;
	})()`)
	if lastID != "4" {
		t.Fatalf("last event id %q, want 4 (an id line without data still moves it; a frame without id does not)", lastID)
	}

	diff := eval[string](b, `(async () => {
		const {diffLines} = await import('/ui/assets/diff.js');
		const a = 'a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n';
		const b = 'a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n';
		return diffLines(a, b).map(o => o.op + o.text).join('|');
	})()`)
	if want := "…1 unchanged line|=b|=c|=d|-e|+E|=f|=g|=h|=i|=j|+k"; diff != want {
		t.Fatalf("diff %s\nwant %s", diff, want)
	}

	// Messages outside turns (a forum's copies in a monologue) gather in a
	// block after the turn before them.
	loose := eval[string](b, `(async () => {
		const {Timeline} = await import('/ui/assets/timeline.js');
		const root = document.createElement('div');
		const tl = new Timeline(root, {mainThread: 'thr_main'});
		const msg = (id, turn, text) => ({seq: 0, type: 'message.created', turn_id: turn, thread_id: 'thr_main',
			data: {id, turn_id: turn, thread_id: 'thr_main', role: 'user', author: 'human:alice',
				parts: [{id: 'prt_' + id, message_id: id, type: 'text', text, state: 'completed'}]}});
		tl.apply({seq: 1, type: 'turn.created', turn_id: 'turn_1', data: {id: 'turn_1', status: 'running'}});
		tl.apply(msg('m1', null, 'copied one'));
		tl.apply(msg('m2', null, 'copied two'));
		tl.apply(msg('m3', 'turn_1', 'in the turn'));
		return [...root.children].map((c) => c.className + '=' + [...c.querySelectorAll('.msg')].map((m) => m.textContent).join('/')).join(' | ');
	})()`)
	if want := "turn=User human:alicein the turn | loose=User human:alicecopied one/User human:alicecopied two"; loose != want {
		t.Fatalf("timeline blocks\n got %s\nwant %s", loose, want)
	}
	b.checkConsole()
}
