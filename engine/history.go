package engine

import (
	"github.com/forge-runtime/forge"
)

// toModelMessages turns a thread's stored messages into what the model is
// sent: user messages, assistant messages with their tool calls, and each
// call's result right after the assistant message that made it. A call's
// result is the last state of its call id along the branch, so a result
// recorded by a later turn (a tool message) answers a call made earlier.
func toModelMessages(history []*forge.Message) []forge.ModelMessage {
	last := map[string]*forge.Part{}
	for _, m := range history {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool {
				last[p.CallID] = p
			}
		}
	}
	out := make([]forge.ModelMessage, 0, len(history)+len(history)/2)
	for i, m := range history {
		switch m.Role {
		case forge.RoleUser:
			if strayRequest(history, i) {
				continue
			}
			mm := forge.ModelMessage{Role: forge.RoleUser}
			for _, p := range m.Parts {
				if p.Type == forge.PartText && p.Text != "" {
					mm.Parts = append(mm.Parts, forge.ModelPart{Type: forge.ModelPartText, Text: p.Text})
				}
			}
			if len(mm.Parts) > 0 {
				out = append(out, mm)
			}
		case forge.RoleAssistant:
			if m.Summary && (m.Finish == "" || m.Finish == forge.FinishError) {
				continue // a failed summary: its compaction did not happen
			}
			mm := forge.ModelMessage{Role: forge.RoleAssistant}
			var results []forge.ModelPart
			for _, p := range m.Parts {
				switch p.Type {
				case forge.PartText:
					if p.Text != "" {
						mm.Parts = append(mm.Parts, forge.ModelPart{Type: forge.ModelPartText, Text: p.Text, Provider: p.Provider})
					}
				case forge.PartReasoning:
					if p.Text != "" || p.Provider != nil {
						mm.Parts = append(mm.Parts, forge.ModelPart{Type: forge.ModelPartReasoning, Text: p.Text, Provider: p.Provider})
					}
				case forge.PartTool:
					mm.Parts = append(mm.Parts, forge.ModelPart{Type: forge.ModelPartToolCall, CallID: p.CallID, Name: p.Tool, Arguments: p.Arguments, Provider: p.Provider})
					results = append(results, resultPart(last[p.CallID]))
				}
			}
			if len(mm.Parts) == 0 {
				continue
			}
			out = append(out, mm)
			if len(results) > 0 {
				out = append(out, forge.ModelMessage{Role: forge.RoleTool, Parts: results})
			}
		}
		// Tool messages are folded into the assistant message they answer.
	}
	return out
}

func resultPart(p *forge.Part) forge.ModelPart {
	r := forge.ModelPart{Type: forge.ModelPartToolResult, CallID: p.CallID, Name: p.Tool}
	switch {
	case p.State == forge.StateCompleted && p.Output != nil:
		r.Output = *p.Output
	case p.State == forge.StateError && p.Error != nil:
		r.Output, r.IsError = *p.Error, true
	default:
		// An unanswered call (its turn was cancelled or abandoned): models
		// require a result for every call, so say what happened.
		r.Output, r.IsError = "no result: the call was never answered", true
	}
	return r
}
