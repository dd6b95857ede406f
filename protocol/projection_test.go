package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

const mainThread = "thr_main"

// logBuilder writes a turn's event log as the engine does.
type logBuilder struct {
	seq int64
	evs []forge.Event
}

func (b *logBuilder) add(typ, id, thread string, data any) {
	b.seq++
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	turn := "turn_1"
	ev := forge.Event{Seq: b.seq, ID: id, Type: typ, SessionID: "ses_1", TurnID: &turn, Data: raw}
	if thread != "" {
		ev.ThreadID = &thread
	}
	b.evs = append(b.evs, ev)
}

func part(id, typ, text, state string) *forge.Part {
	return &forge.Part{ID: id, MessageID: "msg_a", Type: typ, Text: text, State: state}
}

// turnLog is a turn with reasoning, a tool call, a child thread's text,
// a compaction summary and a final text, streamed in the given deltas.
func turnLog(deltas []string, withDeltas bool) []forge.Event {
	b := &logBuilder{}
	b.add(forge.EventTurnCreated, "turn_1", "", forge.Turn{ID: "turn_1", Status: forge.TurnRunning,
		Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}})
	b.add(forge.EventMessageCreated, "msg_s", mainThread, forge.Message{ID: "msg_s", Summary: true})
	b.add(forge.EventModelMessage, "prt_s", mainThread, &forge.Part{ID: "prt_s", MessageID: "msg_s", Type: forge.PartText, Text: "summary", State: forge.StateCompleted})
	b.add(forge.EventStepStarted, "prt_st", mainThread, part("prt_st", forge.PartStepStart, "", ""))
	b.add(forge.EventModelMessage, "prt_r", mainThread, part("prt_r", forge.PartReasoning, "", forge.StateStreaming))
	if withDeltas {
		b.add(forge.EventModelDelta, "prt_r", mainThread, forge.DeltaData{Delta: "think"})
	}
	b.add(forge.EventModelMessage, "prt_r", mainThread, part("prt_r", forge.PartReasoning, "think", forge.StateCompleted))
	call := &forge.Part{ID: "prt_c", MessageID: "msg_a", Type: forge.PartTool, CallID: "call_1", Tool: "echo",
		Arguments: json.RawMessage(`{"text":"x"}`), State: forge.StateRunning}
	b.add(forge.EventToolCall, "prt_c", mainThread, call)
	b.add(forge.EventModelMessage, "prt_child", "thr_child", part("prt_child", forge.PartText, "", forge.StateStreaming))
	if withDeltas {
		b.add(forge.EventModelDelta, "prt_child", "thr_child", forge.DeltaData{Delta: "child text"})
	}
	out := "x"
	done := *call
	done.State, done.Output = forge.StateCompleted, &out
	b.add(forge.EventToolResponse, "prt_c", mainThread, &done)
	b.add(forge.EventModelMessage, "prt_t", mainThread, part("prt_t", forge.PartText, "", forge.StateStreaming))
	if withDeltas {
		for _, d := range deltas {
			b.add(forge.EventModelDelta, "prt_t", mainThread, forge.DeltaData{Delta: d})
		}
	}
	b.add(forge.EventModelMessage, "prt_t", mainThread, part("prt_t", forge.PartText, strings.Join(deltas, ""), forge.StateCompleted))
	b.add(forge.EventStepFinished, "prt_sf", mainThread, &forge.Part{ID: "prt_sf", MessageID: "msg_a", Type: forge.PartStepFinish,
		Data: json.RawMessage(`{"finish":"stop","usage":{"input_tokens":3,"output_tokens":4}}`)})
	b.add(forge.EventTurnDone, "turn_1", "", forge.Turn{ID: "turn_1", Status: forge.TurnDone})
	return b.evs
}

func project(t *testing.T, evs []forge.Event) []protocol.Step {
	t.Helper()
	p := protocol.NewProjector(mainThread)
	var steps []protocol.Step
	for _, ev := range evs {
		if err := p.Apply(ev, func(s protocol.Step) { steps = append(steps, s) }); err != nil {
			t.Fatal(err)
		}
	}
	if !p.Done() {
		t.Fatal("the projection did not see the turn end")
	}
	return steps
}

// textOf joins the deltas of a part, checking each starts where the last
// ended.
func textOf(t *testing.T, steps []protocol.Step, id string) string {
	t.Helper()
	var b strings.Builder
	for _, s := range steps {
		if s.Kind == protocol.PartDelta && s.PartID == id {
			if s.Offset != b.Len() {
				t.Fatalf("delta of %s at offset %d after %d bytes", id, s.Offset, b.Len())
			}
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

func kinds(steps []protocol.Step) []protocol.Kind {
	var out []protocol.Kind
	for _, s := range steps {
		if s.Kind != protocol.PartDelta {
			out = append(out, s.Kind)
		}
	}
	return out
}

func TestProjectionLiveAndReplayAgree(t *testing.T) {
	t.Parallel()
	deltas := []string{"Hel", "lo, ", "wörld"}
	live := project(t, turnLog(deltas, true))
	replay := project(t, turnLog(deltas, false))
	for _, steps := range [][]protocol.Step{live, replay} {
		if got := textOf(t, steps, "prt_t"); got != "Hello, wörld" {
			t.Fatalf("text %q", got)
		}
		if got := textOf(t, steps, "prt_r"); got != "think" {
			t.Fatalf("reasoning %q", got)
		}
		for _, s := range steps {
			if s.PartID == "prt_child" || s.PartID == "prt_s" || (s.Part != nil && (s.Part.ID == "prt_child" || s.Part.ID == "prt_s")) {
				t.Fatalf("projected %v of a part it must not show", s.Kind)
			}
		}
	}
	want := []protocol.Kind{protocol.TurnStarted, protocol.StepStarted, protocol.PartStarted, protocol.PartDone,
		protocol.ToolStarted, protocol.ToolDone, protocol.PartStarted, protocol.PartDone, protocol.StepFinished, protocol.TurnDone}
	for _, steps := range [][]protocol.Step{live, replay} {
		if got := kinds(steps); len(got) != len(want) {
			t.Fatalf("kinds %v, want %v", got, want)
		} else {
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("kinds %v, want %v", got, want)
				}
			}
		}
	}
}

func TestProjectionPartialRowCatchesUp(t *testing.T) {
	t.Parallel()
	// A resume older than the live backlog gets the part's row with its
	// text so far, then the deltas after it.
	b := &logBuilder{}
	b.add(forge.EventTurnCreated, "turn_1", "", forge.Turn{ID: "turn_1"})
	b.add(forge.EventModelMessage, "prt_t", mainThread, part("prt_t", forge.PartText, "", forge.StateStreaming))
	b.add(forge.EventModelMessage, "prt_t", mainThread, part("prt_t", forge.PartText, "abc", forge.StateStreaming))
	b.add(forge.EventModelDelta, "prt_t", mainThread, forge.DeltaData{Delta: "def"})
	b.add(forge.EventModelDelta, "prt_t", mainThread, forge.DeltaData{Delta: ""})
	b.add(forge.EventModelMessage, "prt_t", mainThread, part("prt_t", forge.PartText, "abcdefg", forge.StateInterrupted))
	b.add(forge.EventTurnDone, "turn_1", "", forge.Turn{ID: "turn_1", Status: forge.TurnCancelled})
	steps := project(t, b.evs)
	if got := textOf(t, steps, "prt_t"); got != "abcdefg" {
		t.Fatalf("text %q", got)
	}
	for _, s := range steps {
		if s.Kind == protocol.PartDone && s.Part.State != forge.StateInterrupted {
			t.Fatalf("part ended %q", s.Part.State)
		}
	}
}

func TestProjectionCalls(t *testing.T) {
	t.Parallel()
	b := &logBuilder{}
	yes, no := true, false
	b.add(forge.EventTurnCreated, "turn_1", "", forge.Turn{ID: "turn_1", Input: []forge.Input{
		{Type: forge.InputToolResult, CallID: "call_client"},
		{Type: forge.InputApproval, CallID: "call_ok", Approved: &yes},
		{Type: forge.InputApproval, CallID: "call_no", Approved: &no},
	}})
	tool := func(call, state string) *forge.Part {
		return &forge.Part{ID: "prt_" + call, Type: forge.PartTool, CallID: call, Tool: "t", State: state}
	}
	b.add(forge.EventToolCall, "prt_call_client", mainThread, tool("call_client", forge.StateRunning))
	b.add(forge.EventToolResponse, "prt_call_client", mainThread, tool("call_client", forge.StateCompleted))
	b.add(forge.EventToolCall, "prt_call_ok", mainThread, tool("call_ok", forge.StateRunning))
	b.add(forge.EventToolResponse, "prt_call_ok", mainThread, tool("call_ok", forge.StateCompleted))
	b.add(forge.EventToolCall, "prt_call_no", mainThread, tool("call_no", forge.StatePending))
	b.add(forge.EventToolResponse, "prt_call_no", mainThread, tool("call_no", forge.StateError))
	b.add(forge.EventToolCall, "prt_call_wait", mainThread, tool("call_wait", forge.StatePending))
	b.add(forge.EventActionRequired, "turn_1", mainThread, map[string]any{"required_actions": []forge.RequiredAction{
		{Type: forge.ActionApproval, CallID: "call_wait", Tool: "t"},
		{Type: forge.ActionClientTool, CallID: "call_child", Tool: "c", ThreadID: "thr_child"},
	}})
	b.add(forge.EventTurnDone, "turn_1", "", forge.Turn{ID: "turn_1", Status: forge.TurnDone})
	steps := project(t, b.evs)
	var got []string
	for _, s := range steps {
		switch s.Kind {
		case protocol.ToolStarted, protocol.ToolDone:
			got = append(got, s.Part.CallID+":"+s.Resolution)
		case protocol.ActionRequired:
			got = append(got, "action:"+s.Action.CallID+":"+s.Part.ID)
		}
	}
	want := "call_ok:approval call_ok:approval call_no:approval call_no:approval action:call_wait:prt_call_wait action:call_child:call_child"
	if strings.Join(got, " ") != want {
		t.Fatalf("calls:\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}

func TestProjectionBadData(t *testing.T) {
	t.Parallel()
	p := protocol.NewProjector(mainThread)
	err := p.Apply(forge.Event{Seq: 1, Type: forge.EventTurnCreated, Data: json.RawMessage(`[`)}, func(protocol.Step) {})
	if err == nil {
		t.Fatal("undecodable data was accepted")
	}
}

func TestTrimDelta(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text         string
		offset, from int
		want         string
	}{
		{"hello", 10, 5, "hello"},
		{"hello", 10, 10, "hello"},
		{"hello", 10, 12, "llo"},
		{"hello", 10, 15, ""},
		{"hello", 10, 99, ""},
		{"héllo", 0, 2, "llo"}, // mid-rune: forward to the next character
		{"日本", 0, 1, "本"},
	} {
		if got := protocol.TrimDelta(tc.text, tc.offset, tc.from); got != tc.want {
			t.Errorf("TrimDelta(%q, %d, %d) = %q, want %q", tc.text, tc.offset, tc.from, got, tc.want)
		}
	}
}

// TestRunsStartAtEveryBoundary: only a delta after a delta continues a run.
func TestRunsStartAtEveryBoundary(t *testing.T) {
	var r protocol.Runs
	types := []string{forge.EventTurnCreated, forge.EventModelDelta, forge.EventModelDelta, forge.EventModelMessage, forge.EventModelDelta, forge.EventModelDelta}
	want := []bool{true, true, false, true, true, false}
	for i, typ := range types {
		if got := r.Starts(forge.Event{Type: typ}); got != want[i] {
			t.Fatalf("event %d (%s) starts a run: %v, want %v", i, typ, got, want[i])
		}
	}
}
