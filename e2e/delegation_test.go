package e2e

import (
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// subtaskOf returns the data of the first subtask part of msgs.
func subtaskOf(msgs []any) obj {
	for _, m := range msgs {
		for _, p := range m.(obj)["parts"].([]any) {
			if p.(obj)["type"] == "subtask" {
				return p.(obj)["data"].(obj)
			}
		}
	}
	return nil
}

// TestDelegationPartsAcrossKill9: a real server stores the agent part of
// an @mention and shows the model the request to delegate; the subtask
// part is running while the child streams, and after kill -9 and a
// restart it reads back cancelled (the turn abandoned).
func TestDelegationPartsAcrossKill9(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "writer", "model": "openai/gpt-test", "instructions": "you write"})
	s.agent(obj{"name": "lead", "model": "openai/gpt-test", "subagents": []string{"writer"}})
	sid := s.session("lead")
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "subagent_writer", Args: `{"task":"draft"}`}),
		openaitest.Text("drafting ", "slowly").HangAfter(2))
	s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "ask @writer to draft"}}, "background": true})
	var msgs []any
	waitFor(t, func() bool {
		msgs = s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
		return subtaskOf(msgs) != nil && len(model.Requests()) == 2
	})
	if d := subtaskOf(msgs); d["status"] != "running" || d["agent"] != "writer" || d["prompt"] != "draft" || !strings.HasPrefix(d["thread_id"].(string), "thr_") {
		t.Fatalf("running subtask %v", d)
	}
	user := msgs[0].(obj)["parts"].([]any)
	if len(user) != 2 || user[1].(obj)["type"] != "agent" || user[1].(obj)["data"].(obj)["name"] != "writer" ||
		user[1].(obj)["data"].(obj)["start"] != 4.0 || user[1].(obj)["data"].(obj)["end"] != 11.0 {
		t.Fatalf("user message parts %v", user)
	}
	lead := model.Requests()[0]
	if got := lead.Messages[len(lead.Messages)-1].Content; !strings.HasPrefix(got, "ask @writer to draft") || !strings.Contains(got, "call the subagent_writer tool") {
		t.Fatalf("the lead was sent %q", got)
	}
	s.kill9()

	s2 := start(t, db, model)
	msgs = s2.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
	if d := subtaskOf(msgs); d["status"] != "cancelled" || d["agent"] != "writer" {
		t.Fatalf("recovered subtask %v", d)
	}
}
