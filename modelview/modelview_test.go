package modelview

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

func textMsg(id, role, text string) *forge.Message {
	m := &forge.Message{ID: id, Role: role, Parts: []*forge.Part{{Type: forge.PartText, Text: text}}}
	if role == forge.RoleAssistant {
		m.Finish = forge.FinishStop
	}
	return m
}

func ids(msgs []*forge.Message) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func TestMonologueOrder(t *testing.T) {
	t.Parallel()
	msg := func(id, turn string) *forge.Message { return &forge.Message{ID: id, TurnID: turn} }
	tests := []struct {
		name string
		in   []*forge.Message
		want []string
	}{
		{"empty", nil, []string{}},
		{"copies only, by id", []*forge.Message{msg("msg_03", ""), msg("msg_01", "")}, []string{"msg_01", "msg_03"}},
		{
			// turn_02 started before msg_03 was ingested: its messages
			// stay together, the copy after them.
			"a copy ingested while a turn ran follows the turn",
			[]*forge.Message{msg("msg_01", ""), msg("msg_02", "turn_02"), msg("msg_03", ""), msg("msg_04", "turn_02"), msg("msg_05", "turn_02")},
			[]string{"msg_01", "msg_02", "msg_04", "msg_05", "msg_03"},
		},
		{
			"turns in the order they started",
			[]*forge.Message{msg("msg_09", "turn_08"), msg("msg_05", "turn_04"), msg("msg_06", "turn_04")},
			[]string{"msg_05", "msg_06", "msg_09"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			same(t, "order", ids(MonologueOrder(tc.in)), tc.want)
			if !slices.Equal(in, tc.in) {
				t.Error("the input was reordered")
			}
		})
	}
}

func TestPage(t *testing.T) {
	t.Parallel()
	var view []*forge.Message
	for i := range 5 {
		view = append(view, textMsg(fmt.Sprintf("msg_%d", i), forge.RoleUser, "x"))
	}
	tests := []struct {
		cursor   string
		limit    int
		want     []string
		wantNext string
	}{
		{"", 2, []string{"msg_0", "msg_1"}, "msg_1"},
		{"msg_1", 2, []string{"msg_2", "msg_3"}, "msg_3"},
		{"msg_3", 2, []string{"msg_4"}, ""},
		{"msg_4", 2, []string{}, ""},
		{"", 0, []string{"msg_0", "msg_1", "msg_2", "msg_3", "msg_4"}, ""},
		{"", 5, []string{"msg_0", "msg_1", "msg_2", "msg_3", "msg_4"}, ""},
		{"msg_0", 4, []string{"msg_1", "msg_2", "msg_3", "msg_4"}, ""},
	}
	for _, tc := range tests {
		page, next, err := Page(view, tc.cursor, tc.limit)
		if err != nil || !reflect.DeepEqual(ids(page), tc.want) || next != tc.wantNext {
			t.Errorf("Page(%q, %d) = %v %q %v, want %v %q", tc.cursor, tc.limit, ids(page), next, err, tc.want, tc.wantNext)
		}
	}
	if _, _, err := Page(view, "msg_ghost", 2); forge.ErrorCode(err) != "invalid_request" {
		t.Errorf("an unknown cursor: %v", err)
	}
}

func TestTailStart(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 400) // 104 tokens a message with framing
	req := &forge.Message{ID: "msg_r", Role: forge.RoleUser, Parts: []*forge.Part{{Type: forge.PartCompaction}, {Type: forge.PartText, Text: "Summarize."}}}
	h := []*forge.Message{
		textMsg("msg_0", forge.RoleUser, long),
		textMsg("msg_1", forge.RoleAssistant, long),
		textMsg("msg_2", forge.RoleUser, long),
		textMsg("msg_3", forge.RoleAssistant, long),
		textMsg("msg_4", forge.RoleUser, long),
		textMsg("msg_5", forge.RoleAssistant, long),
	}
	tests := []struct {
		name    string
		history []*forge.Message
		window  int64
		minimal bool
		want    int
	}{
		{"no user message", h[1:2], 10_000, false, -1},
		{"no window: the newest user message", h, 0, false, 4},
		{"minimal: the newest exchange", h, 100_000, true, 4},
		{"a quarter of the window holds two exchanges", h, 4 * 420, false, 2},
		{"it holds them all", h, 100_000, false, 0},
		{"too small for more than the newest", h, 100, false, 4},
		{"a compaction request is no start", append(slices.Clone(h[:5]), req, textMsg("msg_6", forge.RoleAssistant, "s")), 0, false, 4},
	}
	for _, tc := range tests {
		if got := TailStart(tc.history, tc.window, tc.minimal); got != tc.want {
			t.Errorf("%s: TailStart = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReportedContext(t *testing.T) {
	t.Parallel()
	withUsage := func(m *forge.Message, in, out int64) *forge.Message {
		m.Usage = &forge.Usage{InputTokens: in, OutputTokens: out}
		return m
	}
	failed := withUsage(textMsg("msg_f", forge.RoleAssistant, "x"), 900, 9)
	failed.Finish = forge.FinishError
	summary := withUsage(textMsg("msg_s", forge.RoleAssistant, "sum"), 800, 8)
	summary.Summary = true
	tests := []struct {
		name    string
		history []*forge.Message
		used    int64
		at      int
		summary int
	}{
		{"none", []*forge.Message{textMsg("msg_1", forge.RoleUser, "q")}, 0, -1, -1},
		{"the newest report", []*forge.Message{withUsage(textMsg("msg_1", forge.RoleAssistant, "a"), 10, 2),
			withUsage(textMsg("msg_2", forge.RoleAssistant, "b"), 20, 3), textMsg("msg_3", forge.RoleUser, "q")}, 23, 1, -1},
		{"a failed call and a summary report nothing", []*forge.Message{withUsage(textMsg("msg_1", forge.RoleAssistant, "a"), 10, 2), failed}, 12, 0, -1},
		{"zero usage is no report", []*forge.Message{withUsage(textMsg("msg_1", forge.RoleAssistant, "a"), 10, 2),
			withUsage(textMsg("msg_2", forge.RoleAssistant, "b"), 0, 0)}, 12, 0, -1},
		{"a tail older than the summary is not counted", []*forge.Message{
			textMsg("msg_r", forge.RoleUser, "req"), summary,
			withUsage(textMsg("msg_0", forge.RoleAssistant, "old"), 700, 7)}, 0, -1, 1},
		{"a call after the summary is", []*forge.Message{
			textMsg("msg_r", forge.RoleUser, "req"), summary,
			withUsage(textMsg("msg_0", forge.RoleAssistant, "old"), 700, 7),
			withUsage(textMsg("msg_t", forge.RoleAssistant, "new"), 50, 5)}, 55, 3, 1},
	}
	for _, tc := range tests {
		used, at := ReportedContext(tc.history)
		if used != tc.used || at != tc.at || LatestSummary(tc.history) != tc.summary {
			t.Errorf("%s: ReportedContext = %d at %d, LatestSummary %d; want %d at %d, %d", tc.name, used, at,
				LatestSummary(tc.history), tc.used, tc.at, tc.summary)
		}
		_, memo := Memo{}.Convert(tc.history)
		if mu, ma := memo.ReportedContext(tc.history); mu != used || ma != at {
			t.Errorf("%s: Memo.ReportedContext = %d at %d", tc.name, mu, ma)
		}
	}
}

func TestEstimates(t *testing.T) {
	t.Parallel()
	out, errText := "12345678", "oops"
	m := &forge.Message{Parts: []*forge.Part{
		{Type: forge.PartText, Text: "abcd"},
		{Type: forge.PartReasoning, Text: "ef"},
		{Type: forge.PartTool, Tool: "bash", Arguments: json.RawMessage(`{}`), Output: &out, Error: &errText},
		{Type: forge.PartStepStart, Data: json.RawMessage(`{"iteration":1}`)},
	}}
	// 16 framing + 4 + 2 + (4 + 2 + 32 + 8 + 4)
	if got := MessageChars(m); got != 72 {
		t.Errorf("MessageChars = %d, want 72", got)
	}
	if got := EstimateTokens(m, m); got != 36 {
		t.Errorf("EstimateTokens = %d, want 36", got)
	}
	for chars, want := range map[int64]int64{0: 0, 1: 1, 4: 1, 5: 2, 8: 2} {
		if got := Tokens(chars); got != want {
			t.Errorf("Tokens(%d) = %d, want %d", chars, got, want)
		}
	}
	req := &forge.ModelRequest{System: "sys!", Tools: []forge.ToolDef{{Name: "ab", Description: "cd", InputSchema: json.RawMessage(`{}`)}},
		Messages: []forge.ModelMessage{{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
			{Type: forge.ModelPartText, Text: "hi"},
			{Type: forge.ModelPartToolCall, Name: "ab", Arguments: json.RawMessage(`{}`)},
		}}, {Role: forge.RoleTool, Parts: []forge.ModelPart{{Type: forge.ModelPartToolResult, Name: "ab", Output: "ok"}}}}}
	// 4 + 6 + 16 + 2 + (2 + 2 + 32) + 16 + (2 + 2 + 32) = 116
	if got := EstimateRequestTokens(req); got != 29 {
		t.Errorf("EstimateRequestTokens = %d, want 29", got)
	}
	// ceil(5/4) + floor(6/4)
	if got := PromptTokens("sys!!", req.Tools); got != 3 {
		t.Errorf("PromptTokens = %d, want 3", got)
	}
}

// oldPrune is PruneToolOutputs as the engine had it, the oracle.
func oldPrune(view []*forge.Message, budget int64) []*forge.Message {
	out := make([]*forge.Message, len(view))
	copy(out, view)
	var kept int64
	for i := len(out) - 1; i >= 0; i-- {
		m := out[i]
		var clone *forge.Message
		for j := len(m.Parts) - 1; j >= 0; j-- {
			p := m.Parts[j]
			if p.Type != forge.PartTool || p.Output == nil {
				continue
			}
			cost := int64(len(*p.Output)+3) / 4
			if kept+cost <= budget {
				kept += cost
				continue
			}
			kept = budget
			if clone == nil {
				clone = m.Clone()
				out[i] = clone
			}
			marker := fmt.Sprintf("[output pruned from the context: %d bytes; it is kept in the session's history]", len(*p.Output))
			clone.Parts[j].Output = &marker
		}
	}
	return out
}

func TestPruneToolOutputsAsBefore(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var view []*forge.Message
		for i := range rng.IntN(12) {
			m := &forge.Message{ID: fmt.Sprintf("msg_%d", i), Role: forge.RoleAssistant, Finish: forge.FinishToolCalls}
			for j := range rng.IntN(4) {
				p := &forge.Part{Type: forge.PartTool, CallID: fmt.Sprintf("call_%d_%d", i, j), Tool: "t", State: forge.StateCompleted}
				switch rng.IntN(4) {
				case 0: // no output
				case 1:
					empty := ""
					p.Output = &empty
				default:
					o := strings.Repeat("o", rng.IntN(40))
					p.Output = &o
				}
				m.Parts = append(m.Parts, p)
			}
			if rng.IntN(3) == 0 {
				m.Parts = append(m.Parts, &forge.Part{Type: forge.PartText, Text: "t"})
			}
			view = append(view, m)
		}
		budget := int64(rng.IntN(30)) - 2
		got, want := PruneToolOutputs(view, budget), oldPrune(view, budget)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d budget %d: pruned differently", round, budget)
		}
		for i := range view {
			if (got[i] == view[i]) != (want[i] == view[i]) {
				t.Fatalf("round %d: message %d copied in one and not the other", round, i)
			}
		}
	}
}

// TestMemoFollowsGrowingHistories grows histories at random, as turns do:
// steps that stream then end, calls that run then finish, calls paused
// for a later turn's tool message, compactions that rebuild the view, and
// forks that start again from an earlier point with an earlier memo.
// After each change the memo's answers are the whole history's.
func TestMemoFollowsGrowingHistories(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 0
		id := func() string { n++; return fmt.Sprintf("msg_%05d", n) }
		type state struct {
			h    []*forge.Message
			memo Memo
		}
		var saved []state
		var h []*forge.Message
		var memo Memo
		var open []*forge.Part // calls not answered yet
		check := func(step string) {
			t.Helper()
			got, next := memo.Convert(h)
			if want := Convert(h); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, %s: Convert\n%q\nwant\n%q", seed, step, render(got), render(want))
			}
			memo = next
			u, at := ReportedContext(h)
			if mu, ma := memo.ReportedContext(h); mu != u || ma != at {
				t.Fatalf("seed %d, %s: ReportedContext %d at %d, want %d at %d", seed, step, mu, ma, u, at)
			}
			if got, want := memo.TokensAfter(h, at), EstimateTokens(h[at+1:]...); got != want {
				t.Fatalf("seed %d, %s: TokensAfter(%d) %d, want %d", seed, step, at, got, want)
			}
			if got, want := memo.TokensAfter(h, -1), EstimateTokens(h...); got != want {
				t.Fatalf("seed %d, %s: TokensAfter(-1) %d, want %d", seed, step, got, want)
			}
			if memo.LatestSummary(h) != LatestSummary(h) {
				t.Fatalf("seed %d, %s: LatestSummary", seed, step)
			}
		}
		for step := range 120 {
			switch op := rng.IntN(12); {
			case op < 3:
				h = append(h, textMsg(id(), forge.RoleUser, "question"))
			case op < 6: // a step streams, then ends
				a := &forge.Message{ID: id(), Role: forge.RoleAssistant, Parts: []*forge.Part{{Type: forge.PartText}}}
				h = append(h, a)
				check(fmt.Sprintf("step %d streaming", step))
				a.Parts[0].Text, a.Finish = "answer", forge.FinishStop
				a.Usage = &forge.Usage{InputTokens: int64(step * 10), OutputTokens: 1}
			case op < 8: // a call runs, then completes or stays open
				p := &forge.Part{Type: forge.PartTool, CallID: id(), Tool: "t", State: forge.StateRunning, Arguments: json.RawMessage(`{}`)}
				h = append(h, &forge.Message{ID: id(), Role: forge.RoleAssistant, Finish: forge.FinishToolCalls, Parts: []*forge.Part{p}})
				check(fmt.Sprintf("step %d call running", step))
				if rng.IntN(2) == 0 {
					o := strings.Repeat("out", rng.IntN(5))
					p.State, p.Output = forge.StateCompleted, &o
				} else {
					p.State = forge.StatePending
					open = append(open, p)
				}
			case op < 9 && len(open) > 0: // a later turn answers the open calls
				tm := &forge.Message{ID: id(), Role: forge.RoleTool}
				for _, p := range open {
					o := "resolved"
					tm.Parts = append(tm.Parts, &forge.Part{Type: forge.PartTool, CallID: p.CallID, Tool: p.Tool, State: forge.StateCompleted, Output: &o})
				}
				open = nil
				h = append(h, tm)
			case op < 10 && len(h) > 2: // a compaction: the view is rebuilt
				req := &forge.Message{ID: id(), Role: forge.RoleUser, Parts: []*forge.Part{{Type: forge.PartCompaction}, {Type: forge.PartText, Text: "Summarize."}}}
				sum := &forge.Message{ID: id(), Role: forge.RoleAssistant, Summary: true, ParentID: &req.ID, Parts: []*forge.Part{{Type: forge.PartText, Text: "summary"}}}
				h = append(h, req, sum)
				check(fmt.Sprintf("step %d summary streaming", step))
				if rng.IntN(3) == 0 {
					sum.Finish = forge.FinishError // a failed compaction stays in place
				} else {
					sum.Finish = forge.FinishStop
					tail := h[len(h)-3-rng.IntN(2) : len(h)-2]
					h = append([]*forge.Message{req, sum}, tail...)
					open = nil
				}
			case op < 11: // keep this point to fork from later
				saved = append(saved, state{h: h, memo: memo})
			default: // fork: an earlier history and its memo go on
				if len(saved) > 0 {
					s := saved[rng.IntN(len(saved))]
					h, memo, open = slices.Clip(s.h), s.memo, nil
				}
			}
			check(fmt.Sprintf("step %d", step))
		}
	}
}
