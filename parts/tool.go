package parts

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// Tool is a tool call of an assistant message and, as the call's state
// moves on, its result: the model is shown the call where the assistant
// made it and the result of its last state right after (Result). Its Data
// (forge.ToolOutputData) keeps an output too long to show whole, and the
// files the result carries (an MCP tool's images), which the model is
// shown as file blocks of the result.
var Tool = register(&Kind{
	Type: forge.PartTool,
	Size: 2, // the call and its result
	Render: func(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart {
		if m.Role != forge.RoleAssistant {
			return out
		}
		return append(out, forge.ModelPart{Type: forge.ModelPartToolCall, CallID: p.CallID, Name: p.Tool, Arguments: p.Arguments, Provider: p.Provider})
	},
	Chars: func(p *forge.Part) int64 {
		chars := int64(len(p.Tool) + len(p.Arguments) + CallFraming)
		if p.Output != nil {
			chars += int64(len(*p.Output))
		}
		if p.Error != nil {
			chars += int64(len(*p.Error))
		}
		for _, f := range ToolOf(p).Files {
			chars += FileChars(f)
		}
		return chars
	},
})

// ToolOf is the data of a tool part; zero when it has none (or is of
// another kind).
func ToolOf(p *forge.Part) forge.ToolOutputData {
	var d forge.ToolOutputData
	if p.Type != forge.PartTool || len(p.Data) == 0 || json.Unmarshal(p.Data, &d) != nil {
		return forge.ToolOutputData{}
	}
	return d
}

// ToolData is the Data of a tool part holding d; nil when d holds nothing.
func ToolData(d forge.ToolOutputData) json.RawMessage {
	if d.OutputBytes == 0 && d.FullOutput == "" && len(d.Files) == 0 {
		return nil
	}
	b, _ := json.Marshal(d) // strings, numbers: cannot fail
	return b
}

// Result is the tool result block of a call's last state p: its output,
// or its error, and the files it carries; an unanswered call says so.
func Result(p *forge.Part) forge.ModelPart {
	r := forge.ModelPart{Type: forge.ModelPartToolResult, CallID: p.CallID, Name: p.Tool}
	switch {
	case p.State == forge.StateCompleted && p.Output != nil:
		r.Output = *p.Output
		if files := ToolOf(p).Files; len(files) > 0 {
			r.Content = make([]forge.ModelPart, len(files))
			for i, f := range files {
				r.Content[i] = FileBlock(f)
			}
		}
	case p.State == forge.StateError && p.Error != nil:
		r.Output, r.IsError = *p.Error, true
	default:
		// An unanswered call (its turn was cancelled or abandoned): models
		// require a result for every call, so say what happened.
		r.Output, r.IsError = "no result: the call was never answered", true
	}
	return r
}
