package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/parts"
)

func (m *testModel) pushFor(instructions string, r ...reply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byAgent == nil {
		m.byAgent = map[string][]reply{}
	}
	m.byAgent[instructions] = append(m.byAgent[instructions], r...)
}

func subagentSetup(h *harness) {
	h.agent("researcher", func(a *forge.Agent) {
		a.Instructions = "you research"
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
		a.Approval = map[string]string{"echo": forge.PolicyAsk}
		a.Subagents = []string{"writer"}
	})
	h.agent("writer", func(a *forge.Agent) { a.Instructions = "you write" })
	h.agent("lead", func(a *forge.Agent) {
		a.Instructions = "you lead"
		a.Subagents = []string{"researcher", "writer"}
	})
}

func threadEvents(h *harness, sid, typ string) []map[string]any {
	var out []map[string]any
	for _, ev := range h.events(sid, 0) {
		if ev.Type == typ {
			var d map[string]any
			_ = json.Unmarshal(ev.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

func TestParallelSubagents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	release := make(chan struct{})
	h.model.pushFor("you lead",
		reply{calls: []forge.ToolCall{call("subagent_researcher", `{"task":"find facts"}`), call("subagent_writer", `{"task":"write prose"}`)}},
		reply{deltas: []string{"done"}})
	// The researcher waits until the writer has answered: they run at once.
	h.model.pushFor("you research", reply{deltas: []string{"facts"}, block: release})
	h.model.pushFor("you write", reply{deltas: []string{"prose"}})
	go func() {
		for len(threadEvents(h, s.ID, forge.EventThreadDone)) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
	}()
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone || turn.Output.Text != "done" {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	var lead *forge.ModelRequest
	for _, r := range h.model.sent() {
		if r.System == "you lead" {
			lead = r
		}
	}
	res := lead.Messages[2].Parts
	if res[0].Output != "facts" || res[1].Output != "prose" {
		t.Fatalf("results %+v", res)
	}
	created, done := threadEvents(h, s.ID, forge.EventThreadCreated), threadEvents(h, s.ID, forge.EventThreadDone)
	if len(created) != 2 || len(done) != 2 || created[0]["thread_id"] == created[1]["thread_id"] {
		t.Fatalf("thread events created %v done %v", created, done)
	}
	// The child threads' messages are stored under their own thread ids and
	// are not part of the main thread.
	msgs, _, _ := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID, ThreadID: s.MainThreadID})
	for _, m := range msgs {
		if m.ThreadID != s.MainThreadID {
			t.Fatal("child message in the main thread")
		}
	}
	child, _, _ := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID, ThreadID: created[0]["thread_id"].(string)})
	if len(child) != 2 || child[0].Role != forge.RoleUser {
		t.Fatalf("child thread has %d messages", len(child))
	}
	// Depth 1: the researcher is not offered its own subagent.
	for _, r := range h.model.sent() {
		if r.System == "you research" {
			for _, d := range r.Tools {
				if strings.HasPrefix(d.Name, "subagent_") {
					t.Fatalf("depth limit: researcher offered %s", d.Name)
				}
			}
		}
	}
}

func TestSubagentApprovalPausesTheTurnAndResumesAfterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_researcher", `{"task":"check"}`)}})
	h.model.pushFor("you research", reply{calls: []forge.ToolCall{call("echo", `{"text":"probe"}`)}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone || len(turn.RequiredActions) != 1 {
		t.Fatalf("turn %+v", turn)
	}
	act := turn.RequiredActions[0]
	if act.Tool != "echo" || act.ThreadID == s.MainThreadID {
		t.Fatalf("action %+v: it must carry the child's thread", act)
	}
	// A new process resumes the child where it stopped.
	h.close()
	h.model = &testModel{}
	h.open()
	h.model.pushFor("you research", reply{deltas: []string{"checked"}})
	h.model.pushFor("you lead", reply{deltas: []string{"all good"}})
	next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{approve(act.CallID, true, "")}})
	if next.Status != forge.TurnDone || next.Output == nil || next.Output.Text != "all good" {
		t.Fatalf("next %+v %+v", next, next.Error)
	}
	var research, lead *forge.ModelRequest
	for _, r := range h.model.sent() {
		switch r.System {
		case "you research":
			research = r
		case "you lead":
			lead = r
		}
	}
	if got := research.Messages[len(research.Messages)-1].Parts[0]; got.Output != "probe" {
		t.Fatalf("the researcher got %+v", got)
	}
	if got := lead.Messages[len(lead.Messages)-1].Parts[0]; got.Output != "checked" {
		t.Fatalf("the lead got %+v", got)
	}
	snap, _ := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, next.ID)
	if st := snap.Threads[act.ThreadID]; st.State != forge.ThreadFinished || st.Agent != "researcher" {
		t.Fatalf("child thread state %+v", st)
	}
}

func TestCancelReachesSubagent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"long"}`)}})
	h.model.pushFor("you write", reply{deltas: []string{"drafting"}, block: make(chan struct{})})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	got, err := h.eng.Cancel(ctx, forge.DefaultTenant, s.ID, "")
	if err != nil || got.ID != turn.ID || got.Status != forge.TurnCancelled {
		t.Fatalf("cancel %+v %v", got, err)
	}
	evs := h.events(s.ID, 0)
	if evs[len(evs)-1].Type != forge.EventTurnDone {
		t.Fatalf("last event %s", evs[len(evs)-1].Type)
	}
}

// TestSubagentStreamingTextIsCheckpointed: a child thread's streaming text
// is checkpointed like the main thread's, so a crash mid-child keeps it
// and recovery closes the part with it.
func TestSubagentStreamingTextIsCheckpointed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) { c.CheckpointInterval = 10 * time.Millisecond })
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"draft"}`)}})
	h.model.pushFor("you write", reply{deltas: []string{"first ", "draft"}, block: make(chan struct{})})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	childPart := func(st forge.Store) *forge.Part {
		msgs, _ := st.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
		for _, m := range msgs {
			if m.ThreadID == s.MainThreadID {
				continue
			}
			for _, p := range m.Parts {
				if p.Type == forge.PartText && m.Role == forge.RoleAssistant {
					return p
				}
			}
		}
		return nil
	}
	// Wait for a checkpoint tick to write the child's streamed text.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if p := childPart(h.store); p != nil && p.Text == "first draft" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child thread's streaming part was never checkpointed")
		}
	}
	copyDB(t, h.path)
	cancelRunning(t, h, s.ID) // the crashed process is gone; no need to wait for it
	h2 := &harness{t: t, path: h.path + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open()
	defer h2.close()
	if p := childPart(h2.store); p == nil || p.Text != "first draft" || p.State != forge.StateInterrupted {
		t.Fatalf("recovered child part %+v", p)
	}
}

// A delegation leaves a subtask part on the assistant message that made
// the call, with the child's status once it ended: done, or errored.
func TestSubtaskPartRecordsEachDelegation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead",
		reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"write prose"}`), call("subagent_researcher", `{"task":"find facts"}`)}},
		reply{deltas: []string{"done"}})
	h.model.pushFor("you write", reply{deltas: []string{"prose"}})
	h.model.pushFor("you research", reply{err: errors.New("model broke")})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	msgs, _, _ := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID, ThreadID: s.MainThreadID})
	// Each parallel delegation has its own part, one for its whole life.
	if ps, _ := subtaskParts(t, msgs); len(ps) != 2 || ps[0].ID == ps[1].ID || ps[0].MessageID != ps[1].MessageID {
		t.Fatalf("subtask parts %+v", ps)
	}
	got := map[string]forge.SubtaskData{}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type != forge.PartSubtask {
				continue
			}
			if m.Role != forge.RoleAssistant {
				t.Fatalf("subtask part on a %s message", m.Role)
			}
			var d forge.SubtaskData
			if err := json.Unmarshal(p.Data, &d); err != nil {
				t.Fatal(err)
			}
			got[d.Agent] = d
		}
	}
	created := threadEvents(h, s.ID, forge.EventThreadCreated)
	threads := map[string]string{}
	for _, c := range created {
		threads[c["agent"].(string)] = c["thread_id"].(string)
	}
	w, r := got["writer"], got["researcher"]
	if len(got) != 2 || w.Status != forge.TurnDone || w.Prompt != "write prose" || w.ThreadID != threads["writer"] || w.CallID == "" {
		t.Fatalf("writer subtask %+v (threads %v)", got, threads)
	}
	if r.Status != forge.TurnErrored || r.Prompt != "find facts" || r.ThreadID != threads["researcher"] || r.CallID == w.CallID {
		t.Fatalf("researcher subtask %+v", r)
	}
	// The model is not shown the subtask parts: the lead's second request
	// holds the calls and their results alone.
	for _, req := range h.model.sent() {
		if req.System != "you lead" {
			continue
		}
		for _, m := range req.Messages {
			for _, p := range m.Parts {
				if strings.Contains(p.Text, "find facts") && p.Type == forge.ModelPartText {
					t.Fatalf("subtask shown to the model: %+v", p)
				}
			}
		}
	}
}

// A step cut by an error or by a stream with no finish still gets a
// step-finish part, its usage the local estimate and marked so.
func TestStepFinishForCutSteps(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]reply{
		"error": {deltas: []string{"partial answer"}, err: errors.New("model broke")},
		"cut":   {deltas: []string{"partial answer"}, cut: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.agent("solo", func(a *forge.Agent) { a.Instructions = "you work" })
			s := h.session("solo")
			h.model.pushFor("you work", r)
			turn := h.run(s.ID, msg("go"))
			msgs, _, _ := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID, ThreadID: s.MainThreadID})
			var found []forge.StepFinishData
			for _, m := range msgs {
				for _, p := range m.Parts {
					if d, ok := parts.StepFinishOf(p); ok {
						found = append(found, d)
					}
				}
			}
			if len(found) != 1 || !found[0].Estimated || found[0].Usage.OutputTokens == 0 {
				t.Fatalf("turn %s: step-finish %+v", turn.Status, found)
			}
		})
	}
}
