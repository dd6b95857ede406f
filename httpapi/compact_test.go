package httpapi_test

import (
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

func TestCompactRunsATurnOfItsOwn(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	for _, q := range []string{"first question", "second question"} {
		s.call("POST", sp+"/turns", msgTurn(q), 200, nil)
	}
	var turn forge.Turn
	a := s.call("POST", sp+"/compact", nil, 200, &turn)
	if turn.Status != forge.TurnDone || turn.Output == nil || !strings.Contains(turn.Output.Text, "Context compaction") {
		t.Fatalf("compact answered %s", a)
	}
	var view struct{ Data []forge.Message }
	s.call("GET", sp+"/messages?view=model", nil, 200, &view)
	if len(view.Data) != 4 || view.Data[0].Parts[0].Type != forge.PartCompaction || !view.Data[1].Summary ||
		view.Data[2].Parts[0].Text != "second question" {
		t.Fatalf("model view after compaction: %+v", view.Data)
	}
	var full struct{ Data []forge.Message }
	s.call("GET", sp+"/messages?view=full", nil, 200, &full)
	if len(full.Data) != 6 || full.Data[0].Parts[0].Text != "first question" {
		t.Fatalf("full view after compaction has %d messages", len(full.Data))
	}

	var bg forge.Turn
	s.call("POST", sp+"/compact", map[string]any{"background": true}, 202, &bg)
	if done := s.waitTurn(ses.ID, bg.ID); done.Status != forge.TurnDone {
		t.Fatalf("background compaction ended %s %+v", done.Status, done.Error)
	}
}
