package web_test

import (
	"testing"

	"github.com/forge-runtime/forge"
)

// TestTurnShowsItsOverrides: a turn run with per-request settings carries
// a badge naming them, the added instructions as its title; a turn
// without has none.
func TestTurnShowsItsOverrides(t *testing.T) {
	s := newServer(t)
	s.createAgent(map[string]any{"name": "a", "model": "openai/gpt-4.1-mini"})
	ses := s.createSession("a", "Overrides")
	var tr forge.Turn
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "one"}}}, 200, &tr)
	s.call("POST", "/v1/sessions/"+ses.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "two"}},
		"overrides": map[string]any{"instructions": "Answer in <b>French</b>.", "temperature": 0.3, "tools": []any{map[string]any{"name": "ticket"}}}}, 200, &tr)

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/sessions/" + ses.ID)
	b.waitFor(`document.querySelectorAll('section.turn').length === 2 && document.querySelector('section[data-n="2"] .overrides') !== null`)
	if got := eval[string](b, `document.querySelector('section[data-n="2"] .overrides').textContent`); got != "overrides: instructions · temperature 0.3 · tool ticket" {
		t.Fatalf("badge %q", got)
	}
	if got := eval[string](b, `document.querySelector('section[data-n="2"] .overrides').title`); got != "Instructions added: Answer in <b>French</b>.\nClient tools: ticket" {
		t.Fatalf("title %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll('section[data-n="1"] .overrides, b').length`); n != 0 {
		t.Fatalf("%d overrides badges (or markup) where none belong", n)
	}
}
