package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/scripted"
)

// TestDelegationPartsOverHTTP: a turn's messages read back over HTTP
// carry the agent part of an @mention (name and UTF-16 offsets) and the
// subtask part of the delegation, ended done, with its child thread.
func TestDelegationPartsOverHTTP(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("writer")
	s.call("POST", "/v1/agents", map[string]any{"name": "lead", "model": "scripted/echo", "subagents": []string{"writer"},
		"model_params": map[string]any{"script": scripted.Script(
			scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "subagent_writer", Arguments: json.RawMessage(`{"task":"draft it"}`)}}},
			scripted.Step{Text: "ok"})}}, 201, nil)
	ses := s.createSession("lead")
	sp := "/v1/sessions/" + ses.ID
	var turn forge.Turn
	s.call("POST", sp+"/turns", msgTurn("é, @writer: draft"), 200, &turn)
	if turn.Status != forge.TurnDone || turn.Output == nil || turn.Output.Text != "ok" {
		t.Fatalf("turn %+v", turn)
	}
	var page struct {
		Data []json.RawMessage
	}
	s.call("GET", sp+"/messages", nil, 200, &page)
	if len(page.Data) < 3 {
		t.Fatalf("%d messages", len(page.Data))
	}
	if !strings.Contains(string(page.Data[0]), `"type":"agent","state":"completed","data":{"name":"writer","start":3,"end":10}`) {
		t.Fatalf("user message %s", page.Data[0])
	}
	var asst forge.Message
	if err := json.Unmarshal(page.Data[1], &asst); err != nil || asst.Role != forge.RoleAssistant {
		t.Fatalf("assistant message %s", page.Data[1])
	}
	var callID string
	var sub *forge.Part
	for _, p := range asst.Parts {
		switch p.Type {
		case forge.PartTool:
			callID = p.CallID
		case forge.PartSubtask:
			sub = p
		}
	}
	var d forge.SubtaskData
	if sub == nil || json.Unmarshal(sub.Data, &d) != nil || sub.State != forge.StateCompleted {
		t.Fatalf("no subtask part in %s", page.Data[1])
	}
	if d.Agent != "writer" || d.Prompt != "draft it" || d.Status != forge.TurnDone || d.CallID != callID || !strings.HasPrefix(d.ThreadID, forge.PrefixThread) {
		t.Fatalf("subtask %+v (call %s)", d, callID)
	}
	// The child thread is the one the turn's thread.created announced.
	var evs struct{ Data []forge.Event }
	s.call("GET", sp+"/turns/"+turn.ID+"/events", nil, 200, &evs)
	created := ""
	for _, ev := range evs.Data {
		if ev.Type == forge.EventThreadCreated {
			var td forge.ThreadCreatedData
			_ = json.Unmarshal(ev.Data, &td)
			created = td.ThreadID
		}
	}
	if created != d.ThreadID {
		t.Fatalf("thread.created %q, subtask thread %q", created, d.ThreadID)
	}
}
