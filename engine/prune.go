package engine

import (
	"fmt"

	"github.com/forge-runtime/forge"
)

// pruneToolOutputs returns view with the outputs of older tool calls
// replaced by a marker once, newest first, the outputs kept add up to more
// than budget tokens (estimated at 4 bytes a token). Pruned messages are
// copies: storage keeps every output whole.
func pruneToolOutputs(view []*forge.Message, budget int64) []*forge.Message {
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
			kept = budget // everything older is pruned too
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

// modelMessages is the thread's history as the model is sent it. Without
// pruning, the settled prefix's conversion is kept for the next steps.
func (th *thread) modelMessages() []forge.ModelMessage {
	if b := th.agent.Compaction.PruneToolOutputs; b != nil {
		return toModelMessages(pruneToolOutputs(th.history, *b))
	}
	msgs, memo := th.memo.convert(th.history)
	th.memo = memo
	return msgs
}
