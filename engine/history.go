package engine

import (
	"encoding/json"
	"slices"
	"strings"

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
					mm.Parts = append(mm.Parts, forge.ModelPart{Type: forge.ModelPartText, Text: copyText(m, p.Text)})
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

// monologueOrder puts a monologue's messages in the order the model reads
// them: a turn's messages stay together, and a copy ingested while a turn
// ran (or while it was paused) comes after that turn's messages, never
// between a tool call and the rest of its turn. Each message sorts by its
// anchor, the time in its turn's id (its own id for a message outside any
// turn), then by id; ids are time-sortable, so the anchor of a copy
// ingested during a turn is later than the turn's.
func monologueOrder(msgs []*forge.Message) []*forge.Message {
	anchor := func(m *forge.Message) string {
		if m.TurnID != "" {
			return idTime(m.TurnID)
		}
		return idTime(m.ID)
	}
	out := slices.Clone(msgs)
	slices.SortStableFunc(out, func(a, b *forge.Message) int {
		if c := strings.Compare(anchor(a), anchor(b)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// idTime is the time-sortable part of an id (after its type prefix).
func idTime(id string) string {
	if i := strings.IndexByte(id, '_'); i >= 0 {
		return id[i+1:]
	}
	return id
}

// copyText is how the model sees a forum message copied into a monologue:
// "<author name>: <text>". Other messages are shown as they are.
func copyText(m *forge.Message, text string) string {
	if len(m.Metadata) == 0 || m.TurnID != "" {
		return text
	}
	var meta forge.SourceMeta
	if json.Unmarshal(m.Metadata, &meta) != nil || meta.SourceActorID == "" {
		return text
	}
	name := meta.SourceActorID
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	return name + ": " + text
}
