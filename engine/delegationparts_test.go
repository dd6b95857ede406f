package engine_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/parts"
)

// subtaskParts are the subtask parts of msgs, with their data.
func subtaskParts(t *testing.T, msgs []*forge.Message) ([]*forge.Part, []forge.SubtaskData) {
	t.Helper()
	var ps []*forge.Part
	var ds []forge.SubtaskData
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type != forge.PartSubtask {
				continue
			}
			var d forge.SubtaskData
			if err := json.Unmarshal(p.Data, &d); err != nil {
				t.Fatal(err)
			}
			ps, ds = append(ps, p), append(ds, d)
		}
	}
	return ps, ds
}

// utf16Offset is where byte offset i of s is to a JavaScript string.
func utf16Offset(s string, i int) int { return len(utf16.Encode([]rune(s[:i]))) }

// An @mention of a subagent in a user message adds an agent part (once
// per subagent, at its first mention, offsets in UTF-16 code units), and
// the model is shown a request to call its delegation tool after the
// message. A mention inside a word, of a longer name or of an agent that
// is not a subagent adds nothing.
func TestAgentPartsAskTheModelToDelegate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{deltas: []string{"ok"}})
	text := "😀 é @writer, mail a@writer.com, not @writer2 nor @lead, then @researcher... and @writer again"
	turn := h.run(s.ID, msg(text))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	user := msgs[0]
	if user.Role != forge.RoleUser || len(user.Parts) != 3 || user.Parts[0].Type != forge.PartText {
		t.Fatalf("user message %+v", user)
	}
	w, r := strings.Index(text, "@writer"), strings.Index(text, "@researcher")
	want := []forge.AgentData{
		{Name: "writer", Start: utf16Offset(text, w), End: utf16Offset(text, w) + len("@writer")},
		{Name: "researcher", Start: utf16Offset(text, r), End: utf16Offset(text, r) + len("@researcher")},
	}
	if want[0].Start != 5 {
		t.Fatalf("the test's text: @writer at %d", want[0].Start)
	}
	for i, p := range user.Parts[1:] {
		var d forge.AgentData
		if p.Type != forge.PartAgent || json.Unmarshal(p.Data, &d) != nil || d != want[i] || p.State != forge.StateCompleted {
			t.Fatalf("agent part %d: %+v (data %s), want %+v", i, p, p.Data, want[i])
		}
	}
	// The model sees the text, then a request per mentioned subagent.
	req := h.model.sent()[0]
	got := req.Messages[0].Parts
	if len(got) != 3 || got[0].Text != text || got[1].Text != parts.DelegationRequest("writer") ||
		got[2].Text != parts.DelegationRequest("researcher") || !strings.Contains(got[1].Text, "subagent_writer") {
		t.Fatalf("the model was shown %+v", got)
	}
	// The writer has no subagents: its mentions are plain text.
	s2 := h.session("writer")
	h.model.pushFor("you write", reply{deltas: []string{"ok"}})
	turn = h.run(s2.ID, msg("@lead @researcher hi"))
	msgs, _ = h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if len(msgs[0].Parts) != 1 {
		t.Fatalf("writer's user message %+v", msgs[0].Parts)
	}
}

// steerWaiting is a log handler that closes waiting when a steer message
// waits for the running turn.
type steerWaiting struct {
	once    sync.Once
	waiting chan struct{}
}

func (h *steerWaiting) Enabled(context.Context, slog.Level) bool { return true }
func (h *steerWaiting) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "steer message waiting") {
		h.once.Do(func() { close(h.waiting) })
	}
	return nil
}
func (h *steerWaiting) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *steerWaiting) WithGroup(string) slog.Handler      { return h }

// A steer message joining a running turn gets its agent parts too.
func TestAgentPartsOnASteerMessage(t *testing.T) {
	t.Parallel()
	logs := &steerWaiting{waiting: make(chan struct{})}
	h := newHarness(t, func(c *engine.Config) { c.Logger = slog.New(logs) })
	subagentSetup(h)
	s := h.session("lead")
	release, called := make(chan struct{}), make(chan struct{})
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("echo_missing", `{}`)}, block: release, onCall: func() { close(called) }},
		reply{deltas: []string{"ok"}})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	<-called
	steered := make(chan error, 1)
	go func() {
		_, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, engine.TurnRequest{
			Input: []forge.Input{{Type: forge.InputMessage, Text: "and ask @writer"}}, IfBusy: forge.IfBusySteer})
		steered <- err
	}()
	select {
	case <-logs.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the steer message never waited for the turn")
	}
	close(release)
	if err := <-steered; err != nil {
		t.Fatal(err)
	}
	if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnDone {
		t.Fatalf("turn %+v %+v", got, got.Error)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	var steer *forge.Message
	for _, m := range msgs {
		if m.Role == forge.RoleUser && textParts(m) == "and ask @writer" {
			steer = m
		}
	}
	if steer == nil || len(steer.Parts) != 2 || steer.Parts[1].Type != forge.PartAgent {
		t.Fatalf("steer message %+v", steer)
	}
	if d, ok := parts.AgentOf(steer.Parts[1]); !ok || d != (forge.AgentData{Name: "writer", Start: 8, End: 15}) {
		t.Fatalf("steer agent part %s", steer.Parts[1].Data)
	}
}

// The subtask part is written running, with the child's thread, before
// the child runs (stored and streamed in message.updated), and the same
// part is updated when it ends.
func TestSubtaskPartIsRunningUntilTheChildEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	release := make(chan struct{})
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"draft"}`)}}, reply{deltas: []string{"done"}})
	h.model.pushFor("you write", reply{deltas: []string{"prose"}, block: release})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta) // the child streams
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	ps, ds := subtaskParts(t, msgs)
	created := threadEvents(h, s.ID, forge.EventThreadCreated)
	if len(ps) != 1 || ps[0].State != forge.StateRunning || ds[0].Status != forge.TurnRunning || ds[0].Agent != "writer" ||
		ds[0].Prompt != "draft" || ds[0].CallID == "" || len(created) != 1 || ds[0].ThreadID != created[0]["thread_id"] {
		t.Fatalf("running subtask %+v %+v (threads %v)", ps, ds, created)
	}
	running := ps[0]
	close(release)
	if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnDone {
		t.Fatalf("turn %+v %+v", got, got.Error)
	}
	msgs, _ = h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	ps, ds = subtaskParts(t, msgs)
	if len(ps) != 1 || ps[0].ID != running.ID || ps[0].State != forge.StateCompleted || ds[0].Status != forge.TurnDone ||
		ds[0].ThreadID != created[0]["thread_id"] {
		t.Fatalf("ended subtask %+v %+v", ps, ds)
	}
	// Streamed: message.updated with the part running, then done.
	var statuses []string
	for _, ev := range h.events(s.ID, 0) {
		if ev.Type != forge.EventMessageUpdated {
			continue
		}
		var m forge.Message
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			t.Fatal(err)
		}
		if _, d := subtaskParts(t, []*forge.Message{&m}); len(d) == 1 {
			statuses = append(statuses, d[0].Status)
		}
	}
	if strings.Join(statuses, ",") != "running,done" {
		t.Fatalf("message.updated subtask statuses %v", statuses)
	}
}

// A cancelled turn ends its running child's subtask cancelled.
func TestSubtaskPartOfACancelledChild(t *testing.T) {
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
	cancelRunning(t, h, s.ID)
	if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnCancelled {
		t.Fatalf("turn %+v", got)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if ps, ds := subtaskParts(t, msgs); len(ps) != 1 || ps[0].State != forge.StateCompleted || ds[0].Status != forge.TurnCancelled {
		t.Fatalf("subtask %+v %+v", ps, ds)
	}
}

// A child still running when a cancel's ToolCancelWait runs out ends its
// subtask cancelled (the call in doubt), and the turn ends.
func TestSubtaskPartOfAChildThatOutlivesACancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	stuck := make(chan struct{})
	defer close(stuck) // the child ends, and the engine closes, after the test
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"long"}`)}})
	h.model.pushFor("you write", reply{deltas: []string{"drafting"}, block: stuck, deaf: true})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	cancelRunning(t, h, s.ID)
	if got := h.wait(s.ID, turn.ID); got.Status != forge.TurnCancelled {
		t.Fatalf("turn %+v", got)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	ps, ds := subtaskParts(t, msgs)
	if len(ps) != 1 || ps[0].State != forge.StateCompleted || ds[0].Status != forge.TurnCancelled {
		t.Fatalf("subtask %+v %+v", ps, ds)
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool && (p.Error == nil || !strings.HasPrefix(*p.Error, "in_doubt")) {
				t.Fatalf("the delegating call %+v", p)
			}
		}
	}
}

// A crash mid-child leaves the subtask running in the store; recovery
// ends it cancelled, as it ends the turn, with a message.updated.
func TestSubtaskPartAfterACrashMidChild(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"draft"}`)}})
	h.model.pushFor("you write", reply{deltas: []string{"first"}, block: make(chan struct{})})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	copyDB(t, h.path)
	cancelRunning(t, h, s.ID) // the crashed process is gone
	h2 := &harness{t: t, path: h.path + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open()
	defer h2.close()
	got := h2.wait(s.ID, turn.ID)
	if got.Status != forge.TurnCancelled || got.CancelReason == nil || *got.CancelReason != forge.CancelAbandoned {
		t.Fatalf("recovered turn %+v", got)
	}
	msgs, _ := h2.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	ps, ds := subtaskParts(t, msgs)
	if len(ps) != 1 || ps[0].State != forge.StateCompleted || ds[0].Status != forge.TurnCancelled || ds[0].ThreadID == "" {
		t.Fatalf("recovered subtask %+v %+v", ps, ds)
	}
	evs := h2.events(s.ID, 0)
	var updated *forge.Event
	for i := range evs {
		if evs[i].Type == forge.EventMessageUpdated {
			updated = &evs[i]
		}
	}
	if updated == nil || !strings.Contains(string(updated.Data), `"status":"cancelled"`) {
		t.Fatalf("no message.updated of the cancelled subtask: %v", updated)
	}
}

// A child that pauses ends its subtask user-input-required; resumed in a
// later turn, its end is a subtask part of that turn's tool message (the
// earlier turn's rows stay as they were).
func TestSubtaskPartOfAResumedChild(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_researcher", `{"task":"check"}`)}})
	h.model.pushFor("you research", reply{calls: []forge.ToolCall{call("echo", `{"text":"probe"}`)}})
	turn := h.run(s.ID, msg("go"))
	if len(turn.RequiredActions) != 1 {
		t.Fatalf("turn %+v", turn)
	}
	first, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	ps, ds := subtaskParts(t, first)
	if len(ps) != 1 || ds[0].Status != forge.ThreadUserInputRequired || ds[0].ThreadID != turn.RequiredActions[0].ThreadID {
		t.Fatalf("paused subtask %+v %+v", ps, ds)
	}
	paused := ds[0]
	h.model.pushFor("you research", reply{deltas: []string{"checked"}})
	h.model.pushFor("you lead", reply{deltas: []string{"all good"}})
	next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{approve(turn.RequiredActions[0].CallID, true, "")}})
	if next.Status != forge.TurnDone || next.Output == nil || next.Output.Text != "all good" {
		t.Fatalf("next %+v %+v", next, next.Error)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, next.ID)
	var main []*forge.Message
	for _, m := range msgs {
		if m.ThreadID == s.MainThreadID {
			main = append(main, m)
		}
	}
	ps, ds = subtaskParts(t, main)
	want := paused
	want.Status = forge.TurnDone
	if len(ps) != 1 || ds[0] != want {
		t.Fatalf("resumed subtask %+v, want %+v", ds, want)
	}
	var holder *forge.Message
	for _, m := range main {
		if m.ID == ps[0].MessageID {
			holder = m
		}
	}
	if holder == nil || holder.Role != forge.RoleTool || holder.Parts[0].CallID != paused.CallID {
		t.Fatalf("the resumed subtask is on %+v", holder)
	}
	again, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if _, d := subtaskParts(t, again); len(d) != 1 || d[0] != paused {
		t.Fatalf("the paused turn's subtask changed: %+v", d)
	}
}

// A delegation without a task starts no child thread and has no subtask
// part: the model is told what the call needs.
func TestDelegationWithoutATaskHasNoSubtask(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	s := h.session("lead")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"topic":"x"}`)}}, reply{deltas: []string{"sorry"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if ps, _ := subtaskParts(t, msgs); len(ps) != 0 || len(threadEvents(h, s.ID, forge.EventThreadCreated)) != 0 {
		t.Fatalf("subtask parts %+v", ps)
	}
	var errText string
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool && p.Error != nil {
				errText = *p.Error
			}
		}
	}
	if !strings.Contains(errText, `{"task": "..."}`) {
		t.Fatalf("call error %q", errText)
	}
}

// When the write of the calls' running state (the running subtask parts
// with them) keeps failing, no child thread starts.
func TestFailedWriteBeforeADelegationStartsNoChild(t *testing.T) {
	t.Parallel()
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl))
	subagentSetup(h)
	s := h.session("lead")
	fs.setFail(hasRunningCall)
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"draft"}`)}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeStoreError {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	for _, r := range h.model.sent() {
		if r.System == "you write" {
			t.Fatal("the child ran on an unsaved state")
		}
	}
	if n := len(threadEvents(h, s.ID, forge.EventThreadCreated)); n != 0 {
		t.Fatalf("%d thread.created", n)
	}
}

// A delegation that waits for approval starts no child, and has no
// subtask, until it is approved; then its subtask is on the tool message
// of the turn that runs it.
func TestSubtaskPartOfAnApprovedDelegation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	subagentSetup(h)
	h.agent("boss", func(a *forge.Agent) {
		a.Instructions = "you lead"
		a.Subagents = []string{"writer"}
		a.Approval = map[string]string{"subagent_writer": forge.PolicyAsk}
	})
	s := h.session("boss")
	h.model.pushFor("you lead", reply{calls: []forge.ToolCall{call("subagent_writer", `{"task":"draft"}`)}})
	turn := h.run(s.ID, msg("go"))
	if len(turn.RequiredActions) != 1 || turn.RequiredActions[0].Type != forge.ActionApproval {
		t.Fatalf("turn %+v", turn)
	}
	first, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if ps, _ := subtaskParts(t, first); len(ps) != 0 {
		t.Fatalf("subtask before approval %+v", ps)
	}
	h.model.pushFor("you write", reply{deltas: []string{"prose"}})
	h.model.pushFor("you lead", reply{deltas: []string{"done"}})
	next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{approve(turn.RequiredActions[0].CallID, true, "")}})
	if next.Status != forge.TurnDone {
		t.Fatalf("next %+v %+v", next, next.Error)
	}
	msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, next.ID)
	ps, ds := subtaskParts(t, msgs)
	if len(ps) != 1 || ds[0].Status != forge.TurnDone || ds[0].Prompt != "draft" || ds[0].CallID != turn.RequiredActions[0].CallID {
		t.Fatalf("subtask %+v %+v", ps, ds)
	}
	for _, m := range msgs {
		if m.ID == ps[0].MessageID && m.Role != forge.RoleTool {
			t.Fatalf("subtask on a %s message", m.Role)
		}
	}
}
