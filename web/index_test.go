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

// TestHistoryUnits runs the parts of the paged timeline that need no
// server, in the browser: how the older history is cut into pages, and
// what the shared turn index says (numbers, forks, the branch, answers,
// usage) before and after it knows every turn, across two page timelines.
func TestHistoryUnits(t *testing.T) {
	s := newServer(t)
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/")
	cuts := eval[string](b, `(async () => {
		const {partition} = await import('/ui/assets/history.js');
		const turns = (seqs, running) => seqs.map((s, i) => ({id: 't' + i, lastSeq: s, status: running === i ? 'running' : 'done'}));
		const show = (ps) => ps.map((p) => p.lo + '-' + p.hi + ':' + p.turns).join(' ');
		return [
			show(partition(turns(Array.from({length: 40}, (_, i) => 10 * (i + 1))), 300)),
			show(partition(turns([10, 2000, 2010]), 2010)),
			show(partition(turns([10, 5, 30]), 30)),
			show(partition(turns([10, 20, 30], 2), 20)),
			show(partition([], 50)),
			show(partition([], 0)),
		].join(' | ');
	})()`)
	// 30 turns end by seq 300: 16 in the newest page, 14 before; a page
	// ends early once it spans 1,500 seqs; seqs that go back count as the
	// highest before them; running turns are not cut; events outside turns
	// only make one page.
	if want := "0-140:14 140-300:16 | 0-10:1 10-2010:2 | 0-30:3 | 0-20:2 | 0-50:0 | "; cuts != want {
		t.Fatalf("partition\n got %s\nwant %s", cuts, want)
	}

	got := eval[string](b, `(async () => {
		const {Timeline, TurnIndex} = await import('/ui/assets/timeline.js');
		const out = [];
		const turn = (id, prev, input, extra) => Object.assign({id, previous_turn_id: prev, status: 'done', input: [{type: input || 'message'}], usage: {input_tokens: 10, output_tokens: 1}}, extra);
		const created = (seq, t) => ({seq, type: 'turn.created', turn_id: t.id, data: Object.assign({}, t, {status: 'running'})});
		const done = (seq, t) => ({seq, type: 'turn.done', turn_id: t.id, data: t});
		const t1 = turn('t1', null), t2 = turn('t2', 't1'), t3 = turn('t3', 't2'), t4 = turn('t4', 't1');
		// The latest page only: t2..t4 (t4 forks from t1, which it has not seen).
		const idx = new TurnIndex({complete: false});
		const a = new Timeline(document.createElement('div'), {index: idx, mainThread: 'm'});
		for (const ev of [created(11, t2), done(12, t2), created(13, t3), done(14, t3), created(15, t4), done(16, t4)]) {
			idx.observe(ev);
			a.apply(ev);
		}
		a.markBranch();
		const state = (tl) => tl.order.map((v) => (v.el.dataset.n || '?') + ':' + v.title.textContent + ':' + v.meta.querySelector('.fork-of')?.textContent + ':' + (v.onBranch ? 'on' : 'off')).join(',');
		out.push(state(a), String(idx.createdBefore('t2')), JSON.stringify(idx.usage({input_tokens: 5})));
		// The turn list arrives: every number is known.
		idx.load([t1, t2, t3, t4]);
		a.renumber();
		out.push(state(a), String(idx.createdBefore('t1')), JSON.stringify(idx.usage({input_tokens: 5})));
		// An older page mounts t1; a live turn answers t4 (paused) and is shown on the first page.
		const older = new Timeline(document.createElement('div'), {index: idx, mainThread: 'm'});
		older.apply(created(1, t1));
		older.apply(done(2, t1));
		older.markBranch();
		const t5 = turn('t5', 't4', 'approval');
		idx.observe(created(17, t5));
		a.apply(created(17, t5));
		out.push(state(older), String(idx.resolverOf('t4') && idx.resolverOf('t4').n), idx.label('t5'), String(idx.running() && idx.running().id));
		// A page that leaves forgets its views.
		older.dispose();
		out.push(String(idx.views.has('t1')), String(idx.views.has('t5')));
		return out.join(' | ');
	})()`)
	want := "?:Turn:undefined:off,?:Turn:undefined:off,?:Turn:forked from t1:on | undefined | {\"input_tokens\":5,\"output_tokens\":0,\"reasoning_tokens\":0,\"cache_read_tokens\":0,\"cache_write_tokens\":0,\"cost\":0}" +
		" | 2:Turn 2:undefined:off,3:Turn 3:undefined:off,4:Turn 4:forked from turn 1:on | null | {\"input_tokens\":40,\"output_tokens\":4,\"reasoning_tokens\":0,\"cache_read_tokens\":0,\"cache_write_tokens\":0,\"cost\":0}" +
		" | 1:Turn 1:undefined:on | 5 | turn 5 | t5 | false | true"
	if got != want {
		t.Fatalf("turn index\n got %s\nwant %s", got, want)
	}
	b.checkConsole()
}
