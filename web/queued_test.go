package web_test

import (
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestQueuedTurnJoinsThePageWhenItStarts: a turn enqueued behind a
// running one (if_busy: enqueue) is not counted or drawn while it waits:
// the queue panel lists it; a message sent from the page while a turn runs
// is queued; a queued turn is cancelled from the panel. A queued turn
// joins the timeline when it starts (or ends without running).
func TestQueuedTurnJoinsThePageWhenItStarts(t *testing.T) {
	s := newServer(t)
	s.oai.Enqueue(openaitest.Text("first ").HangAfter(2))
	s.oai.Enqueue(openaitest.Text("second answer"))
	s.createAgent(map[string]any{"name": "a", "model": "openai/gpt-4.1-mini"})
	ses := s.createSession("a", "Queue")
	var running, queued forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "one"}},
		"background": true}, 202, &running)
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "two"}},
		"background": true, "if_busy": "enqueue"}, 202, &queued)
	if queued.Status != forge.TurnQueued {
		t.Fatalf("enqueued %+v", queued)
	}

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.body.dataset.state === 'live' && document.getElementById('turn-count').textContent === '1'`)
	if n := eval[int](b, `document.querySelectorAll('section.turn').length`); n != 1 {
		t.Fatalf("%d turns drawn while one waits in the queue", n)
	}
	// The queue panel lists the waiting turn; a message sent from the page
	// while the turn runs is queued behind it; one is cancelled from the
	// panel.
	b.waitFor(`!document.getElementById('queue').hidden && document.querySelectorAll('#queue-list li').length === 1`)
	if got := eval[string](b, `document.querySelector('#queue-list li .queued-text').textContent`); got != "two" {
		t.Fatalf("the queue shows %q", got)
	}
	if got := eval[string](b, `document.getElementById('send').textContent`); got != "Queue" {
		t.Fatalf("the send button says %q while a turn runs", got)
	}
	eval[string](b, `document.getElementById('message').value = 'three'`)
	eval[bool](b, `(document.getElementById('send').click(), true)`)
	b.waitFor(`document.querySelectorAll('#queue-list li').length === 2`)
	if got := eval[string](b, `document.querySelectorAll('#queue-list li .queued-text')[1].textContent`); got != "three" {
		t.Fatalf("the queue's second turn shows %q", got)
	}
	eval[bool](b, `(document.querySelectorAll('#queue-list li .cancel-queued')[1].click(), true)`)
	b.waitFor(`document.querySelectorAll('#queue-list li').length === 1`)
	s.call("POST", "/v1/sessions/"+ses.ID+"/cancel", map[string]any{"turn_id": running.ID}, 200, nil)
	// The turn cancelled in the queue ended without running (turn 2); the
	// one left runs after the running one (turn 3).
	b.waitFor(`document.getElementById('turn-count').textContent === '3'`)
	b.waitFor(`document.getElementById('queue').hidden`)
	b.waitFor(visibleText("second answer"))
	if got := eval[string](b, `document.querySelector('section[data-n="3"]').dataset.status`); got != "done" {
		t.Fatalf("the queued turn, once run, is %q", got)
	}
	if got := eval[string](b, `document.querySelector('section[data-n="2"]').dataset.status`); got != "cancelled" {
		t.Fatalf("the turn cancelled in the queue is %q", got)
	}
}
