package parts_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// allTypes are the part types message.go declares.
var allTypes = []string{forge.PartText, forge.PartReasoning, forge.PartTool, forge.PartFile, forge.PartAgent,
	forge.PartCompaction, forge.PartSubtask, forge.PartStepStart, forge.PartStepFinish, forge.PartPatch}

// TestEveryKindIsRegistered: each declared part type has its unit, and
// no unit is of an undeclared type.
func TestEveryKindIsRegistered(t *testing.T) {
	t.Parallel()
	for _, typ := range allTypes {
		if k := parts.Of(typ); k == nil || k.Type != typ || k.Render == nil || k.Chars == nil {
			t.Errorf("kind %q: %+v", typ, k)
		}
	}
	got := parts.Types()
	slices.Sort(got)
	want := slices.Clone(allTypes)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("registered %v, declared %v", got, want)
	}
	if parts.Of("hologram") != nil || parts.Chars(&forge.Part{Type: "hologram", Text: "x"}) != 0 ||
		len(parts.Render(&forge.Message{Role: forge.RoleUser}, &forge.Part{Type: "hologram", Text: "x"}, nil)) != 0 {
		t.Error("an unknown kind is shown to the model or counted")
	}
}

// TestRenderByRole: a kind is shown in the roles it belongs to only.
func TestRenderByRole(t *testing.T) {
	t.Parallel()
	user, asst := &forge.Message{Role: forge.RoleUser}, &forge.Message{Role: forge.RoleAssistant}
	file := &forge.Part{Type: forge.PartFile, Data: parts.FileData(forge.FileData{FileID: "file_1", Filename: "a.png", MimeType: "image/png", Bytes: 9})}
	call := &forge.Part{Type: forge.PartTool, CallID: "c1", Tool: "t", Arguments: json.RawMessage(`{}`)}
	reasoning := &forge.Part{Type: forge.PartReasoning, Text: "hm"}
	cases := []struct {
		m    *forge.Message
		p    *forge.Part
		want []string // model part types
	}{
		{user, file, []string{forge.ModelPartFile}},
		{asst, file, nil},
		{asst, call, []string{forge.ModelPartToolCall}},
		{user, call, nil},
		{asst, reasoning, []string{forge.ModelPartReasoning}},
		{user, reasoning, nil},
		{user, &forge.Part{Type: forge.PartText}, nil},
		{asst, &forge.Part{Type: forge.PartCompaction, Text: "x"}, nil},
		{user, &forge.Part{Type: forge.PartFile, Data: json.RawMessage(`{"filename":"no id"}`)}, nil},
	}
	for i, c := range cases {
		var got []string
		for _, mp := range parts.Render(c.m, c.p, nil) {
			got = append(got, mp.Type)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("case %d (%s in %s): %v, want %v", i, c.p.Type, c.m.Role, got, c.want)
		}
	}
	if f := parts.Render(user, file, nil)[0].File; f.FileID != "file_1" || f.Filename != "a.png" || f.MimeType != "image/png" || f.Data != nil {
		t.Errorf("file block %+v", f)
	}
}

// TestToolResultCarriesFiles: a completed call's files are file blocks
// of its result and count as images; a failed or unanswered call's
// result is its error alone.
func TestToolResultCarriesFiles(t *testing.T) {
	t.Parallel()
	out := "here"
	p := &forge.Part{Type: forge.PartTool, CallID: "c1", Tool: "snap", State: forge.StateCompleted, Output: &out,
		Data: parts.ToolData(forge.ToolOutputData{Files: []forge.FileData{{FileID: "file_1", Filename: "c1-1.png", MimeType: "image/png", Bytes: 100}}})}
	r := parts.Result(p)
	if r.Type != forge.ModelPartToolResult || r.Output != "here" || r.IsError || len(r.Content) != 1 ||
		r.Content[0].Type != forge.ModelPartFile || r.Content[0].File.FileID != "file_1" || r.Content[0].File.MimeType != "image/png" {
		t.Fatalf("result %+v", r)
	}
	plain := &forge.Part{Type: forge.PartTool, CallID: "c1", Tool: "snap", State: forge.StateCompleted, Output: &out}
	if got, base := parts.Chars(p), parts.Chars(plain); got != base+4000 {
		t.Errorf("a result with an image costs %d, without %d: want an image's 4000 more", got, base)
	}
	if r := parts.Result(plain); r.Content != nil {
		t.Errorf("a result without files has content %+v", r.Content)
	}
	msg := "boom"
	p.State, p.Output, p.Error = forge.StateError, nil, &msg
	if r := parts.Result(p); !r.IsError || r.Output != "boom" || r.Content != nil {
		t.Errorf("failed result %+v", r)
	}
	p.State, p.Error = forge.StateRunning, nil
	if r := parts.Result(p); !r.IsError || r.Output != "no result: the call was never answered" {
		t.Errorf("unanswered result %+v", r)
	}
	// A truncated output's data keeps its fields as before: no files key.
	if got := string(parts.ToolData(forge.ToolOutputData{FullOutput: "xyz", OutputBytes: 3})); got != `{"full_output":"xyz","output_bytes":3}` {
		t.Errorf("truncated output data %s", got)
	}
	if parts.ToolData(forge.ToolOutputData{}) != nil {
		t.Error("empty tool data is not nil")
	}
}

// TestModelChars counts a tool result's content blocks.
func TestModelChars(t *testing.T) {
	t.Parallel()
	r := forge.ModelPart{Type: forge.ModelPartToolResult, Output: "abcd",
		Content: []forge.ModelPart{{Type: forge.ModelPartText, Text: "ef"}, {Type: forge.ModelPartFile, File: &forge.ModelFile{Data: make([]byte, 10)}}}}
	if got := parts.ModelChars(&r); got != 4+parts.CallFraming+2+10 {
		t.Errorf("ModelChars = %d", got)
	}
}
