package web_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
	"github.com/forge-runtime/forge/provider/scripted"
)

// TestSessionStreamsLiveAndResumes: with API keys, the page asks for one,
// then renders a turn sent from its composer while it streams; when the
// server cuts every connection mid-stream, the page resumes with
// Last-Event-ID and the streamed text has no gap and no duplicate; Cancel
// on the page ends the turn, and the text stays, marked interrupted.
func TestSessionStreamsLiveAndResumes(t *testing.T) {
	s := newServer(t, withKeys(map[string]string{"ui-test-key": "acme"}))
	// The OpenAI fake streams 40 words, then stalls without ending the
	// text: until the cancel, the page has only the deltas to build it from.
	var pieces []string
	for i := 1; i <= 60; i++ {
		pieces = append(pieces, fmt.Sprintf("w%02d ", i))
	}
	full := strings.Join(pieces[:40], "")
	s.oai.Enqueue(openaitest.Text(pieces...).DelayBetweenChunks(30 * time.Millisecond).HangAfter(41))
	s.createAgent(map[string]any{"name": "streamer", "model": "openai/gpt-4.1-mini"})
	ses := s.createSession("streamer", "Live stream")

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('#key-form')`)
	b.typeInto("#api-key", "ui-test-key")
	b.click("#key-form button[type=submit]")
	b.waitFor(`document.body.dataset.state === 'live' && document.body.dataset.stream === 'open'`)
	if got := eval[string](b, `sessionStorage.getItem('forge.apiKey')`); got != "ui-test-key" {
		t.Fatalf("the key is not kept in the tab: %q", got)
	}

	b.typeInto("#message", "go")
	b.click("#send")
	const streamingText = `((document.querySelector('.part-text.streaming .text') || {}).textContent || '')`
	b.waitFor(streamingText + `.split(' ').length >= 8`)
	partial := eval[string](b, streamingText)
	if partial == full || !strings.HasPrefix(full, partial) {
		t.Fatalf("expected a prefix of the text while it streams, got %q", partial)
	}
	if n := eval[int](b, `document.querySelectorAll('.turn').length`); n != 1 {
		t.Fatalf("%d turns on the page", n)
	}

	// Cut every connection: the page must resume where it was.
	s.srv.CloseClientConnections()
	b.waitFor(`Number(document.body.dataset.reconnects || 0) >= 1 && document.body.dataset.stream === 'open'`)
	b.waitFor(streamingText + ` === ` + jsString(full))
	// Still streaming (the model stalls mid-text): what the page shows was
	// built from deltas only, across the reconnect.
	if got := eval[string](b, streamingText); got != full {
		t.Fatalf("streamed text after the reconnect:\n got %q\nwant %q", got, full)
	}
	ids := s.streamRequests()
	if len(ids) < 2 {
		t.Fatalf("stream requests %q: want the first and a resumed one", ids)
	}
	resumed, err := strconv.ParseInt(ids[len(ids)-1], 10, 64)
	if err != nil || resumed <= 0 {
		t.Fatalf("the reconnect sent Last-Event-ID %q, want the seq it had reached", ids[len(ids)-1])
	}

	b.click("#cancel")
	b.waitFor(`document.querySelector('.turn').dataset.status === 'cancelled'`)
	b.waitFor(`document.querySelector('.role-assistant .part-text[data-state=interrupted]')`)
	if got := eval[string](b, `document.querySelector('.role-assistant .part-text .text').textContent`); got != full {
		t.Fatalf("text after cancel %q", got)
	}
	if got := eval[string](b, `document.querySelector('.turn-end').textContent`); !strings.Contains(got, "Cancelled (client)") {
		t.Fatalf("turn end says %q", got)
	}
	tip := s.session(ses.ID).TipTurnID
	if turn := s.getTurn(ses.ID, *tip); turn.Status != forge.TurnCancelled || turn.CancelReason == nil || *turn.CancelReason != forge.CancelClient {
		t.Fatalf("turn after the page's cancel: %+v", turn)
	}
	b.checkConsole()
}

// TestApproveAndAnswerFromPage: a model (the OpenAI wire fake) calls a tool
// that needs approval and a client tool in one step; the page shows both,
// the user approves one and answers the other, and the turn the page sends
// runs the tool and reaches the model with both results.
func TestApproveAndAnswerFromPage(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{
		"name": "ops", "model": "openai/gpt-4.1-mini", "instructions": "Help operators.",
		"tools": []any{"echo", map[string]any{"name": "ask_user", "description": "Ask the user a question",
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"question": map[string]any{"type": "string"}}}, "client": true}},
		"approval": map[string]string{"echo": "ask"},
	})
	s.oai.Enqueue(
		openaitest.Reasoning("The operator wants a check.").ToolCalls(
			openaitest.Call{Name: "echo", Args: `{"text":"ping"}`},
			openaitest.Call{Name: "ask_user", Args: `{"question":"Which region?"}`}).Usage(1200, 40),
		openaitest.Text("Echo answered ", "ping; the region is eu-west.").Usage(1500, 12),
	)
	ses := s.createSession("ops", "Service check")
	first := s.turn(ses.ID, "check the service")
	if first.Status != forge.TurnDone || len(first.RequiredActions) != 2 {
		t.Fatalf("first turn %+v", first)
	}

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelectorAll('.actions .action').length === 2`)
	b.screenshot("session-approval.png")
	if got := eval[string](b, `document.querySelector('.part-reasoning summary').textContent`); !strings.HasPrefix(got, "Reasoning") {
		t.Fatalf("reasoning summary %q", got)
	}
	if open := eval[bool](b, `document.querySelector('.part-reasoning details').open`); open {
		t.Fatal("reasoning is not collapsed")
	}
	b.click(".action-approval button.approve")
	// One of two answered: nothing is sent yet.
	if n := eval[int](b, `document.querySelectorAll('.turn').length`); n != 1 {
		t.Fatalf("%d turns after one of two answers", n)
	}
	b.typeInto(".action-client_tool textarea", "eu-west")
	b.click(".action-client_tool button.answer")
	b.waitFor(`document.querySelectorAll('.turn').length === 2 && document.querySelectorAll('.turn')[1].dataset.status === 'done'`)
	b.waitFor(`document.querySelectorAll('.turn')[1].textContent.includes('ping; the region is eu-west.')`)
	b.waitFor(`document.querySelector('.turn .actions').textContent.includes('Answered in turn 2')`)
	if got := eval[string](b, `document.querySelector('.turn .turn-end').textContent`); got != "Paused for approval, client tool; answered in turn 2" {
		t.Fatalf("first turn's end %q", got)
	}

	second := s.getTurn(ses.ID, *s.session(ses.ID).TipTurnID)
	if second.Status != forge.TurnDone || second.Output == nil || second.Output.Text != "Echo answered ping; the region is eu-west." {
		t.Fatalf("second turn %+v", second)
	}
	req, _ := s.oai.LastRequest()
	var results []string
	for _, m := range req.Messages {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	if strings.Join(results, "|") != "ping|eu-west" {
		t.Fatalf("the model got tool results %q", results)
	}
	// The echo call ran in turn 2 and shows its result there.
	if got := eval[string](b, `[...document.querySelectorAll('.turn')[1].querySelectorAll('.part-tool')].map(p => p.querySelector('.tool-name').textContent + '=' + p.dataset.state).join(',')`); !strings.Contains(got, "echo=completed") {
		t.Fatalf("tool parts of turn 2: %s", got)
	}
	// Usage and cost (gpt-4.1-mini has prices): the page adds both turns.
	wantCost := (1200+1500)*0.40/1e6 + (40+12)*1.60/1e6
	// The page adds a turn's usage when its turn.done arrives over SSE,
	// which may be after the API answered.
	b.waitFor(`document.getElementById('total-usage').textContent === "2,700 in · 52 out"`)
	if got := eval[string](b, `document.getElementById('total-usage').textContent`); got != "2,700 in · 52 out" {
		t.Fatalf("total usage %q", got)
	}
	if got := eval[string](b, `document.getElementById('total-cost').textContent`); got != fmt.Sprintf("$%.4f", wantCost) && got != "$"+strconv.FormatFloat(wantCost, 'g', 2, 64) {
		t.Fatalf("total cost %q, want about %g", got, wantCost)
	}
	if got := eval[string](b, `document.querySelector('.step-usage').textContent`); !strings.Contains(got, "1,200 in · 40 out") {
		t.Fatalf("step usage %q", got)
	}
	b.screenshot("session.png")
	b.checkConsole()
}

// TestDenyFromPage: a denial with a reason reaches the model as the call's
// error result.
func TestDenyFromPage(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{"name": "guarded", "model": "openai/gpt-4.1-mini", "tools": []any{"echo"}, "approval": map[string]string{"*": "ask"}})
	s.oai.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"rm -rf"}`}), openaitest.Text("Understood, not running it."))
	ses := s.createSession("guarded", "Deny")
	s.turn(ses.ID, "do it")

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('.action-approval')`)
	b.typeInto(".action-approval input.reason", "too risky")
	b.click(".action-approval button.deny")
	b.waitFor(`document.querySelectorAll('.turn').length === 2 && document.querySelectorAll('.turn')[1].dataset.status === 'done'`)
	req, _ := s.oai.LastRequest()
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "tool" || !strings.Contains(last.Content, "too risky") {
		t.Fatalf("the model got %+v", last)
	}
	b.waitFor(`document.querySelectorAll('.turn')[1].textContent.includes('Understood, not running it.')`)
	b.checkConsole()
}

// TestForkAndReplayFromPage: forking from the first turn makes a new turn
// that continues from it (the second turn's branch is dimmed); replaying
// the first turn plays its stored events again.
func TestForkAndReplayFromPage(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	ses := s.createSession("echo", "Forks")
	t1 := s.turn(ses.ID, "first")
	t2 := s.turn(ses.ID, "second")

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelectorAll('.turn[data-status=done]').length === 2`)
	sel := `section[data-turn="` + t1.ID + `"]`
	b.click(sel + " button.fork")
	b.typeInto(sel+" .fork-form textarea", "branch")
	b.click(sel + " .fork-form button[type=submit]")
	b.waitFor(`document.querySelectorAll('.turn').length === 3 && document.querySelectorAll('.turn')[2].dataset.status === 'done'`)
	b.waitFor(`document.querySelectorAll('.turn')[2].textContent.includes('echo: branch')`)
	if got := eval[string](b, `document.querySelectorAll('.turn')[2].querySelector('.fork-of').textContent`); got != "forked from turn 1" {
		t.Fatalf("third turn says %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.turn')].map(t => t.classList.contains('off-branch')).join(',')`); got != "false,true,false" {
		t.Fatalf("off-branch marks %s", got)
	}

	ses2 := s.session(ses.ID)
	t3 := s.getTurn(ses.ID, *ses2.TipTurnID)
	if t3.ID == t2.ID || t3.PreviousTurnID == nil || *t3.PreviousTurnID != t1.ID {
		t.Fatalf("the fork is %+v, want a new tip continuing from %s", t3, t1.ID)
	}
	var msgs struct {
		Data []forge.Message `json:"data"`
	}
	s.call("GET", "/v1/sessions/"+ses.ID+"/messages", nil, 200, &msgs)
	var texts []string
	for _, m := range msgs.Data {
		for _, p := range m.Parts {
			if p.Type == forge.PartText {
				texts = append(texts, p.Text)
			}
		}
	}
	if got := strings.Join(texts, "|"); got != "first|echo: first|branch|echo: branch" {
		t.Fatalf("branch after the fork: %s", got)
	}

	// Clicked in the page: the fork's new turn may still be growing the
	// page under a pointer click aimed at the old position.
	b.do(chromedp.Evaluate[chromedp.Void](`document.querySelector(` + jsString(sel+" button.replay") + `).click()`))
	b.waitFor(`document.querySelector('.replay[data-state=finished]')`)
	replayed := eval[string](b, `document.querySelector('.replay-stage').textContent`)
	for _, want := range []string{"first", "echo: first", "Done"} {
		if !strings.Contains(replayed, want) {
			t.Fatalf("the replay shows %q, without %q", replayed, want)
		}
	}
	var evs struct {
		Data []forge.Event `json:"data"`
	}
	s.call("GET", "/v1/sessions/"+ses.ID+"/turns/"+t1.ID+"/events", nil, 200, &evs)
	if got := eval[string](b, `document.querySelector('.replay-progress').textContent`); got != fmt.Sprintf("%d events · finished", len(evs.Data)) {
		t.Fatalf("replay progress %q, the turn has %d stored events", got, len(evs.Data))
	}
	b.checkConsole()
}

// TestModelOutputCannotInjectMarkup: markup in model text, reasoning, tool
// arguments and results, and the session title shows as text; nothing of it
// becomes an element or runs.
func TestModelOutputCannotInjectMarkup(t *testing.T) {
	const payload = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><a href="javascript:window.__xss=3">x</a><iframe src="javascript:1"></iframe>`
	s := newServer(t)
	args, _ := json.Marshal(map[string]string{"text": payload})
	s.createAgent(map[string]any{"name": "mallory", "model": "scripted/echo", "tools": []any{"echo"},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{Reasoning: "think " + payload, Text: "text " + payload, ToolCalls: []scripted.ToolCall{{Name: "echo", Arguments: args}}},
			scripted.Step{Text: "done " + payload},
		)}})
	ses := s.createSession("mallory", "title "+payload)
	s.turn(ses.ID, "user "+payload)

	b := newBrowser(t)
	for _, page := range []string{"/ui/sessions/" + ses.ID, "/ui/"} {
		b.navigate(s.URL + page)
		b.waitFor(`document.body.dataset.state === 'live' || document.body.dataset.state === 'ready'`)
		b.waitFor(`document.body.textContent.includes('title <img src=x')`)
		if n := eval[int](b, `document.querySelectorAll('img, iframe, main script, a[href^="javascript"], #title *').length`); n != 0 {
			t.Fatalf("%s: %d elements came from model output", page, n)
		}
		if v := eval[bool](b, `window.__xss === undefined`); !v {
			t.Fatalf("%s: injected script ran", page)
		}
	}
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.body.dataset.state === 'live'`)
	b.click(".part-reasoning summary")
	text := b.text()
	for _, want := range []string{"text " + payload, "done " + payload, "user " + payload, "think " + payload} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %q literally", want)
		}
	}
	if n := eval[int](b, `[...document.querySelectorAll('.tool-out pre')].filter(p => p.textContent === `+jsString(payload)+`).length`); n != 1 {
		t.Errorf("the tool result is not shown literally (%d matches)", n)
	}
	b.checkConsole()
}

// TestSubagentThreadAndPatch: a subagent's thread shows nested under the
// call that delegated to it, its file edits as diffs, and the step's patch
// as the list of files changed.
func TestSubagentThreadAndPatch(t *testing.T) {
	s := newServer(t)
	call := func(name string, args map[string]any) scripted.ToolCall {
		j, _ := json.Marshal(args)
		return scripted.ToolCall{Name: name, Arguments: j}
	}
	s.createAgent(map[string]any{"name": "writer", "model": "scripted/echo", "tools": []any{"write_file", "edit_file"},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{ToolCalls: []scripted.ToolCall{call("write_file", map[string]any{"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"})}},
			scripted.Step{ToolCalls: []scripted.ToolCall{call("edit_file", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "BETA"})}},
			scripted.Step{Text: "notes written"},
		)}})
	s.createAgent(map[string]any{"name": "lead", "model": "scripted/echo", "subagents": []any{"writer"},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{Reasoning: "Delegate.", ToolCalls: []scripted.ToolCall{call("subagent_writer", map[string]any{"task": "write notes"})}},
			scripted.Step{Text: "The writer is done."},
		)}})
	ses := s.createSession("lead", "Delegation")
	if turn := s.turn(ses.ID, "please write notes"); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('.turn[data-status=done]')`)
	const thread = `document.querySelector('.part-tool .children .thread')`
	if got := eval[string](b, thread+`.querySelector('.thread-head').textContent`); !strings.HasPrefix(got, "Subagent writer") || !strings.HasSuffix(got, "done") {
		t.Fatalf("thread header %q", got)
	}
	if got := eval[string](b, `document.querySelector('.part-tool .tool-name').textContent`); got != "subagent_writer" {
		t.Fatalf("the thread is not under the delegating call: %q", got)
	}
	if got := eval[string](b, thread+`.textContent`); !strings.Contains(got, "write notes") || !strings.Contains(got, "notes written") {
		t.Fatalf("thread text %q", got)
	}
	// write_file: every line added; edit_file: beta replaced.
	diffs := eval[[]string](b, `[...document.querySelectorAll('.diff-block')].map(d => d.querySelector('.diff-path').textContent + ':' + [...d.querySelectorAll('.diff-line')].map(l => l.className.replace('diff-line ', '') + '=' + l.querySelector('.code').textContent).join(';'))`)
	want := []string{
		"notes.txt:add=alpha;add=beta;add=gamma",
		"notes.txt:del=beta;add=BETA", // edit_file's arguments hold the replaced text only

	}
	if strings.Join(diffs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diffs\n%s\nwant\n%s", strings.Join(diffs, "\n"), strings.Join(want, "\n"))
	}
	patches := eval[[]string](b, `[...document.querySelectorAll('.patch')].map(p => p.textContent)`)
	if len(patches) != 2 || !strings.Contains(patches[0], "added notes.txt +3") || !strings.Contains(patches[1], "modified notes.txt +1 −1") {
		t.Fatalf("patches %q", patches)
	}
	if got := eval[string](b, `document.querySelector('.turn > .turn-body > .msg:last-child').textContent`); !strings.Contains(got, "The writer is done.") {
		t.Fatalf("last message %q", got)
	}
	// The delegation's subtask part, and the workspace snapshots of the
	// writer's steps that changed files.
	if got := eval[string](b, `[...document.querySelectorAll('.subtask')].map(e => e.textContent).join('|')`); !strings.HasPrefix(got, "Delegated to writer · done thread thr_") || !strings.HasSuffix(got, "write notes") {
		t.Fatalf("subtask part %q", got)
	}
	if n := eval[int](b, `[...document.querySelectorAll('.step-usage')].filter(e => /workspace snap_/.test(e.textContent)).length`); n != 2 {
		t.Fatalf("%d step-finish parts name a workspace snapshot, want 2 (the writer's two file steps)", n)
	}
	b.checkConsole()
}

// TestAgentMentionShown: an @name of a subagent in the user's message
// shows as the message's agent part.
func TestAgentMentionShown(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{"name": "writer", "model": "scripted/echo"})
	s.createAgent(map[string]any{"name": "lead", "model": "scripted/echo", "subagents": []any{"writer"},
		"model_params": map[string]any{"script": scripted.Script(scripted.Step{Text: "Noted."})}})
	ses := s.createSession("lead", "Mention")
	if turn := s.turn(ses.ID, "ask @writer for a draft"); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('.turn[data-status=done]')`)
	if got := eval[[]string](b, `[...document.querySelectorAll('.role-user .agent-mention')].map(e => e.textContent)`); len(got) != 1 || got[0] != "@writer" {
		t.Fatalf("agent parts shown %q", got)
	}
	b.checkConsole()
}

// TestErrorsShown: a tool that fails and a model call that fails both show
// on the page: the tool's error on its call, the turn's error at its end.
func TestErrorsShown(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{"name": "flaky", "model": "scripted/echo", "tools": []any{"echo"},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "no_such_tool"}}},
			scripted.Step{Text: "partial answer", Error: "the upstream model fell over", Status: 400},
		)}})
	ses := s.createSession("flaky", "Errors")
	if turn := s.turn(ses.ID, "try"); turn.Status != forge.TurnErrored {
		t.Fatalf("turn %+v", turn)
	}
	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('.turn[data-status=errored]')`)
	if got := eval[string](b, `document.querySelector('.part-tool[data-state=error] .tool-out.error pre').textContent`); !strings.Contains(got, "no_such_tool") {
		t.Fatalf("tool error %q", got)
	}
	if got := eval[string](b, `document.querySelector('.turn-end.error').textContent`); !strings.HasPrefix(got, "Error model_error: ") || !strings.Contains(got, "the upstream model fell over") {
		t.Fatalf("turn error %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('.role-assistant')].map(m => m.querySelector('.msg-info').textContent + ':' + m.querySelector('.parts').textContent).pop()`); !strings.HasSuffix(got, "· finish: error:Step 2partial answerStep 2 finished (error) · estimated: 79 in · 4 out · $0") {
		t.Fatalf("the failed step's message %q", got)
	}
	b.checkConsole()
}

// TestSessionPageOtherTenant: a wrong key is refused and asked for again;
// with another tenant's key the session does not exist, and no stream opens.
func TestSessionPageOtherTenant(t *testing.T) {
	s := newServer(t, withKeys(map[string]string{"key-acme": "acme", "key-globex": "globex"}))
	s.key = "key-acme"
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	ses := s.createSession("echo", "Acme's secret plans")
	s.turn(ses.ID, "the secret")

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelector('#key-form')`)
	b.typeInto("#api-key", "not-a-key")
	b.click("#key-form button[type=submit]")
	b.waitFor(`document.querySelector('#key-form') && document.querySelector('#key-form').textContent.includes('was refused')`)
	b.typeInto("#api-key", "key-globex")
	b.click("#key-form button[type=submit]")
	b.waitFor(`document.body.dataset.state === 'error'`)
	if got := eval[string](b, `document.getElementById('banner').textContent`); got != "There is no session "+ses.ID+" (for this API key)." {
		t.Fatalf("banner %q", got)
	}
	if strings.Contains(b.text(), "secret") {
		t.Fatal("another tenant's session shows")
	}
	if ids := s.streamRequests(); len(ids) != 0 {
		t.Fatalf("%d event streams opened", len(ids))
	}
}
