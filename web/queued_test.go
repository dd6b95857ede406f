package web_test

import (
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestQueuedTurnJoinsThePageWhenItStarts: a turn enqueued behind a
// running one (if_busy: enqueue) is not counted or drawn while it waits;
// it appears, numbered after the running turn, once that one ends and it
// starts.
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
	s.call("POST", "/v1/sessions/"+ses.ID+"/cancel", map[string]any{"turn_id": running.ID}, 200, nil)
	b.waitFor(`document.getElementById('turn-count').textContent === '2'`)
	b.waitFor(visibleText("second answer"))
	if got := eval[string](b, `document.querySelector('section[data-n="2"]').dataset.status`); got != "done" {
		t.Fatalf("the queued turn, once run, is %q", got)
	}
}
