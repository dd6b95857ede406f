package modelview

import (
	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// Convert turns a thread's model view into what the model is sent: user
// messages, assistant messages with their tool calls, and each call's
// result right after the assistant message that made it. A call's result
// is the last state of its call id along the branch, so a result recorded
// by a later turn (a tool message) answers a call made earlier. A failed
// summary and a compaction request it did not answer are left out.
func Convert(history []*forge.Message) []forge.ModelMessage {
	return convertRange(history, 0, len(history), LastCallStates(history), nil)
}

// LastCallStates maps each call id of history to its last tool part.
func LastCallStates(history []*forge.Message) map[string]*forge.Part {
	var last map[string]*forge.Part
	for _, m := range history {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool {
				if last == nil {
					last = map[string]*forge.Part{}
				}
				last[p.CallID] = p
			}
		}
	}
	return last
}

// convertRange appends to out the model messages of history[from:to] (see
// Convert), last holding the last state of each call those messages make.
// Each part is rendered by its kind (package parts).
func convertRange(history []*forge.Message, from, to int, last map[string]*forge.Part, out []forge.ModelMessage) []forge.ModelMessage {
	// One backing array holds the parts of every message: a tool call
	// takes two, the call and its result.
	nparts := 0
	for _, m := range history[from:to] {
		for _, p := range m.Parts {
			nparts += parts.Size(p)
		}
	}
	pool := make([]forge.ModelPart, 0, nparts)
	// take returns the parts appended to pool since start, capped so that
	// appending to them cannot overwrite another message's.
	take := func(start int) []forge.ModelPart {
		if len(pool) == start {
			return nil
		}
		return pool[start:len(pool):len(pool)]
	}
	if out == nil {
		n := to - from
		out = make([]forge.ModelMessage, 0, n+n/2)
	}
	for i := from; i < to; i++ {
		m := history[i]
		switch m.Role {
		case forge.RoleUser:
			if StrayRequest(history, i) {
				continue
			}
		case forge.RoleAssistant:
			if m.Summary && (m.Finish == "" || m.Finish == forge.FinishError) {
				continue // a failed summary: its compaction did not happen
			}
		default:
			continue // tool messages are folded into the assistant message they answer
		}
		start := len(pool)
		for _, p := range m.Parts {
			pool = parts.Render(m, p, pool)
		}
		msgParts := take(start)
		if msgParts == nil {
			continue
		}
		out = append(out, forge.ModelMessage{Role: m.Role, Parts: msgParts})
		start = len(pool)
		for _, p := range msgParts {
			if p.Type == forge.ModelPartToolCall {
				pool = append(pool, parts.Result(last[p.CallID]))
			}
		}
		if results := take(start); results != nil {
			out = append(out, forge.ModelMessage{Role: forge.RoleTool, Parts: results})
		}
	}
	return out
}

// settled reports whether m's model messages can no longer change: it is
// no compaction request or summary (whose conversion depends on the
// messages after them), an assistant message's step has ended, and every
// call it holds has its final result (a completed or failed call is no
// longer open: no later message resolves it).
func settled(m *forge.Message, last map[string]*forge.Part) bool {
	if m.Summary || (m.Role == forge.RoleAssistant && m.Finish == "") {
		return false
	}
	for _, p := range m.Parts {
		switch p.Type {
		case forge.PartCompaction:
			return false
		case forge.PartTool:
			if r := last[p.CallID]; r == nil || (r.State != forge.StateCompleted && r.State != forge.StateError) {
				return false
			}
		}
	}
	return true
}
