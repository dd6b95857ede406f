package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/scripted"
)

func render(ev forge.ModelEvent) string {
	switch ev.Type {
	case forge.TextStart:
		return "text+"
	case forge.TextDelta:
		return "text:" + ev.Delta
	case forge.TextEnd:
		return "text-"
	case forge.ReasoningStart:
		return "reason+"
	case forge.ReasoningDelta:
		return "reason:" + ev.Delta
	case forge.ReasoningEnd:
		return "reason-"
	case forge.ToolCallEvent:
		return fmt.Sprintf("call:%s %s", ev.ToolCall.Name, ev.ToolCall.Arguments)
	case forge.FinishEvent:
		u := ev.Finish.Usage
		return fmt.Sprintf("finish:%s in=%d out=%d", ev.Finish.Reason, u.InputTokens, u.OutputTokens)
	}
	return fmt.Sprintf("unknown(%d)", ev.Type)
}

func collect(ctx context.Context, req *forge.ModelRequest) ([]string, []forge.ModelEvent, error) {
	var out []string
	var evs []forge.ModelEvent
	for ev, err := range scripted.New("echo").Stream(ctx, req) {
		if err != nil {
			return out, evs, err
		}
		out = append(out, render(ev))
		evs = append(evs, ev)
	}
	return out, evs, nil
}

func user(text string) forge.ModelMessage {
	return forge.ModelMessage{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: text}}}
}

func assistant(text string) forge.ModelMessage {
	return forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: text}}}
}

func TestEcho(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msgs []forge.ModelMessage
		want []string
	}{
		{"user message", []forge.ModelMessage{user("Hello big  world")}, []string{
			"text+", "text:echo: ", "text:Hello ", "text:big  ", "text:world", "text-", "finish:stop in=4 out=5"}},
		{"last user message", []forge.ModelMessage{user("first"), assistant("echo: first"), user("second")}, []string{
			"text+", "text:echo: ", "text:second", "text-", "finish:stop in=5 out=3"}},
		{"no messages", nil, []string{"text+", "text:echo: ", "text-", "finish:stop in=1 out=1"}},
		{"tool results", []forge.ModelMessage{
			user("go"),
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolCall, CallID: "c1", Name: "read_file", Arguments: json.RawMessage(`{}`)},
				{Type: forge.ModelPartToolCall, CallID: "c2", Name: "bash", Arguments: json.RawMessage(`{}`)},
			}},
			{Role: forge.RoleTool, Parts: []forge.ModelPart{
				{Type: forge.ModelPartToolResult, CallID: "c1", Output: "hi"},
				{Type: forge.ModelPartToolResult, CallID: "c2", Output: "exit 1", IsError: true},
			}},
		}, []string{"text+", "text:tool ", "text:results: ", "text:read_file: ", "text:hi; ", "text:bash ",
			"text:(error): ", "text:exit ", "text:1", "text-", "finish:stop in=6 out=12"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := collect(t.Context(), &forge.ModelRequest{Messages: tt.msgs})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestEchoShortensLongResults(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 500)
	req := &forge.ModelRequest{Messages: []forge.ModelMessage{{Role: forge.RoleTool, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolResult, CallID: "c1", Name: "x", Output: long}}}}}
	_, evs, err := collect(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, ev := range evs {
		text.WriteString(ev.Delta)
	}
	if want := "tool results: x: " + strings.Repeat("é", 200) + "…"; text.String() != want {
		t.Errorf("text = %q", text.String())
	}
}

func TestScriptSteps(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile(filepath.Join("testdata", "demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	call := forge.ModelMessage{Role: forge.RoleAssistant, Parts: []forge.ModelPart{
		{Type: forge.ModelPartReasoning, Text: "The user wants a file."},
		{Type: forge.ModelPartToolCall, CallID: "call_x", Name: "read_file", Arguments: json.RawMessage(`{"path":"a.txt"}`)}}}
	result := forge.ModelMessage{Role: forge.RoleTool, Parts: []forge.ModelPart{
		{Type: forge.ModelPartToolResult, CallID: "call_x", Output: "hello"}}}
	tests := []struct {
		name string
		msgs []forge.ModelMessage
		want []string
	}{
		{"step 0", []forge.ModelMessage{user("read a.txt")}, []string{
			"reason+", "reason:The ", "reason:user ", "reason:wants ", "reason:a ", "reason:file.", "reason-",
			`call:read_file {"path":"a.txt"}`, "finish:tool_calls in=2 out=11"}},
		{"step 1", []forge.ModelMessage{user("read a.txt"), call, result}, []string{
			"text+", "text:The ", "text:file ", "text:says ", "text:hello.", "text-", "finish:stop in=120 out=6"}},
		{"exhausted: the last step repeats", []forge.ModelMessage{user("read a.txt"), call, result,
			assistant("The file says hello."), user("again")}, []string{
			"text+", "text:The ", "text:file ", "text:says ", "text:hello.", "text-", "finish:stop in=120 out=6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := collect(t.Context(), &forge.ModelRequest{Messages: tt.msgs, Params: forge.ModelParams{Script: script}})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestStepOptions: what only a script says (the conformance suite checks
// what every provider streams).
func TestStepOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		step scripted.Step
		want []string
	}{
		{"chunk runes", scripted.Step{Text: "héllo wörld", Chunk: 4, Usage: &scripted.Usage{InputTokens: 1, OutputTokens: 2}}, []string{
			"text+", "text:héll", "text:o wö", "text:rld", "text-", "finish:stop in=1 out=2"}},
		{"arguments forms", scripted.Step{ToolCalls: []scripted.ToolCall{
			{Name: "a", Arguments: json.RawMessage(`{"x": [1, 2]}`)},
			{Name: "b"},
			{Name: "c", Arguments: json.RawMessage(`"{not json"`)},
		}, Usage: &scripted.Usage{}}, []string{
			`call:a {"x":[1,2]}`, "call:b {}", "call:c {not json", "finish:tool_calls in=0 out=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &forge.ModelRequest{Messages: []forge.ModelMessage{user("x")}, Params: forge.ModelParams{Script: scripted.Script(tt.step)}}
			got, _, err := collect(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestCallIDs(t *testing.T) {
	t.Parallel()
	script := scripted.Script(scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "a"}, {Name: "b"}, {ID: "call_mine", Name: "c"}}})
	ids := func(msgs ...forge.ModelMessage) []string {
		_, evs, err := collect(t.Context(), &forge.ModelRequest{Messages: msgs, Params: forge.ModelParams{Script: script}})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			if ev.Type == forge.ToolCallEvent {
				out = append(out, ev.ToolCall.ID)
			}
		}
		return out
	}
	a1, a2, b := ids(user("x")), ids(user("x")), ids(user("y"))
	if !reflect.DeepEqual(a1, a2) {
		t.Errorf("same request, different ids: %q %q", a1, a2)
	}
	if a1[0] == a1[1] || a1[0] == b[0] || a1[1] == b[1] {
		t.Errorf("ids collide: %q %q", a1, b)
	}
	for _, id := range append(a1, b...) {
		if !strings.HasPrefix(id, "call_") {
			t.Errorf("id %q lacks the call_ prefix", id)
		}
	}
	if a1[2] != "call_mine" {
		t.Errorf("explicit id = %q", a1[2])
	}
}

// TestStepError: an error without a status is final (the conformance
// suite checks statuses and errors after the text).
func TestStepError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		step      scripted.Step
		want      []string
		status    int
		retryable bool
	}{
		{"plain", scripted.Step{Error: "model exploded"}, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &forge.ModelRequest{Params: forge.ModelParams{Script: scripted.Script(tt.step)}}
			got, _, err := collect(t.Context(), req)
			var me *forge.ModelError
			if !errors.As(err, &me) {
				t.Fatalf("err = %v, want a ModelError", err)
			}
			if me.Message != tt.step.Error || me.StatusCode != tt.status || me.Retryable != tt.retryable || me.Provider != "scripted" {
				t.Errorf("error = %+v", me)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestInvalidScripts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		msg    string
	}{
		{"file: unknown field", "@invalid_unknown_field.json", `invalid script: step 1: unknown field "txt"`},
		{"file: finish", "@invalid_finish.json", `invalid script: step 0: finish must be stop, tool_calls, length or content_filter, got "done"`},
		{"file: not an array", "@invalid_not_array.json", "invalid script: must be a JSON array of steps"},
		{"file: tool name", "@invalid_tool_name.json", "invalid script: step 0: tool_calls[0]: name is required"},
		{"empty", `[]`, "invalid script: it has no steps"},
		{"not JSON", `[{"text": }]`, "invalid script: must be a JSON array of steps"},
		{"wrong type", `[{"text": 5}]`, "invalid script: step 0: cannot unmarshal number into Go struct field Step.text of type string"},
		{"arguments type", `[{"tool_calls": [{"name": "a", "arguments": [1]}]}]`, "invalid script: step 0: tool_calls[0] (a): arguments must be an object or a string"},
		{"status without error", `[{"status": 500}]`, "invalid script: step 0: status needs error"},
		{"status range", `[{"error": "x", "status": 200}]`, "invalid script: step 0: status must be between 400 and 599, got 200"},
		{"negative chunk", `[{"text": "x", "chunk": -1}]`, "invalid script: step 0: chunk must not be negative"},
		{"negative delay", `[{"text": "x", "delay_ms": -1}]`, "invalid script: step 0: delay_ms must be between 0 and 600000"},
		{"negative usage", `[{"usage": {"input_tokens": -1, "output_tokens": 0}}]`, "invalid script: step 0: usage figures must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script := []byte(tt.script)
			if name, ok := strings.CutPrefix(tt.script, "@"); ok {
				var err error
				if script, err = os.ReadFile(filepath.Join("testdata", name)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := scripted.Parse(script)
			if !errors.Is(err, forge.ErrInvalid) || err.Error() != tt.msg {
				t.Errorf("Parse error = %v, want %q wrapping ErrInvalid", err, tt.msg)
			}
			_, _, err = collect(t.Context(), &forge.ModelRequest{Params: forge.ModelParams{Script: script}})
			var me *forge.ModelError
			if !errors.As(err, &me) || me.Message != tt.msg || me.Retryable {
				t.Errorf("stream error = %v, want ModelError %q", err, tt.msg)
			}
		})
	}
}

func TestNullScriptIsEcho(t *testing.T) {
	t.Parallel()
	got, _, err := collect(t.Context(), &forge.ModelRequest{Messages: []forge.ModelMessage{user("hi")},
		Params: forge.ModelParams{Script: json.RawMessage(" null ")}})
	if err != nil || got[1] != "text:echo: " {
		t.Fatalf("%q %v", got, err)
	}
}

func TestDelayHonoursContext(t *testing.T) {
	t.Parallel()
	req := &forge.ModelRequest{Params: forge.ModelParams{Script: scripted.Script(scripted.Step{Text: "a b c", DelayMS: 60_000})}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []string
	var err error
	start := time.Now()
	for ev, e := range scripted.New("x").Stream(ctx, req) {
		if e != nil {
			err = e
			break
		}
		got = append(got, render(ev))
		if ev.Type == forge.TextDelta {
			time.AfterFunc(20*time.Millisecond, cancel)
		}
	}
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	if want := []string{"text+", "text:a "}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %q", got)
	}
}

func TestDelayBetweenDeltas(t *testing.T) {
	t.Parallel()
	req := &forge.ModelRequest{Params: forge.ModelParams{Script: scripted.Script(scripted.Step{Text: "a b c", DelayMS: 30})}}
	start := time.Now()
	if _, _, err := collect(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Errorf("3 deltas with 30ms between took %v", d)
	}
}

func TestScriptRoundTrip(t *testing.T) {
	t.Parallel()
	in := []scripted.Step{{Text: "a", Reasoning: "r", ToolCalls: []scripted.ToolCall{{Name: "t", Arguments: json.RawMessage(`{"k":1}`)}},
		Usage: &scripted.Usage{InputTokens: 1, OutputTokens: 2}, Finish: "tool_calls", Chunk: 2, DelayMS: 1}}
	out, err := scripted.Parse(scripted.Script(in...))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: %+v != %+v", out, in)
	}
}

func BenchmarkScriptedStream(b *testing.B) {
	text := strings.Repeat("lorem ipsum ", 32) // 64 deltas
	req := &forge.ModelRequest{
		Messages: []forge.ModelMessage{user("hello")},
		Params:   forge.ModelParams{Script: scripted.Script(scripted.Step{Text: text, ToolCalls: []scripted.ToolCall{{Name: "ls"}}})},
	}
	m := scripted.New("echo")
	ctx := context.Background()
	b.ReportAllocs()
	deltas := 0
	for b.Loop() {
		for ev, err := range m.Stream(ctx, req) {
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == forge.TextDelta {
				deltas++
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(deltas), "ns/delta")
}

// TestReportsItsWaits: the model reports its waits (forge.ReportWaits): an
// undelayed reply comes with none, a delayed one with one before each
// pause (after the event before it was passed on), a hanging one before it
// hangs.
func TestReportsItsWaits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		step scripted.Step
		want []int // events passed on at each wait
	}{
		{"undelayed", scripted.Step{Text: "one two three", ToolCalls: []scripted.ToolCall{{Name: "ls"}}}, nil},
		{"delayed", scripted.Step{Text: "one two three", DelayMS: 1, ToolCalls: []scripted.ToolCall{{Name: "ls"}}}, []int{2, 3, 5}},
		{"hang", scripted.Step{Text: "one", Hang: true}, []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			n := 0
			var waits []int
			w := &forge.StreamWaits{Wait: func() {
				waits = append(waits, n)
				if tc.step.Hang {
					cancel()
				}
			}}
			req := &forge.ModelRequest{Messages: []forge.ModelMessage{user("hi")}, Params: forge.ModelParams{Script: scripted.Script(tc.step)}}
			for _, err := range scripted.New("echo").Stream(forge.WithStreamWaits(ctx, w), req) {
				if err != nil {
					break
				}
				n++
			}
			if !w.Reported() || !reflect.DeepEqual(waits, tc.want) {
				t.Fatalf("reported %v, waits at %v, want %v", w.Reported(), waits, tc.want)
			}
		})
	}
}
