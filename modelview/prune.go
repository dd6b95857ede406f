package modelview

import (
	"fmt"

	"github.com/forge-runtime/forge"
)

// PruneToolOutputs returns view with the outputs of older tool calls
// replaced by a marker once, newest first, the outputs kept add up to more
// than budget tokens (estimated at 4 bytes a token). Pruned messages are
// copies: view and its messages are not changed, and storage keeps every
// output whole.
func PruneToolOutputs(view []*forge.Message, budget int64) []*forge.Message {
	out := make([]*forge.Message, len(view))
	copy(out, view)
	at, part := PruneCutoff(view, budget)
	if at < 0 {
		return out
	}
	out[at] = PruneFrom(view[at], part)
	for i := range at {
		out[i] = PruneFrom(view[i], len(view[i].Parts))
	}
	return out
}

// PruneCutoff is where PruneToolOutputs starts pruning view: the indexes
// of the message and of its part whose output is the newest one pruned
// (everything older with an output is pruned too); -1, -1 when none is.
func PruneCutoff(view []*forge.Message, budget int64) (msg, part int) {
	var kept int64
	for i := len(view) - 1; i >= 0; i-- {
		parts := view[i].Parts
		for j := len(parts) - 1; j >= 0; j-- {
			p := parts[j]
			if p.Type != forge.PartTool || p.Output == nil {
				continue
			}
			cost := Tokens(int64(len(*p.Output)))
			if kept+cost > budget {
				return i, j
			}
			kept += cost
		}
	}
	return -1, -1
}

// PruneFrom returns m as PruneToolOutputs leaves it when its part cut is
// the cutoff (PruneCutoff) or, with cut len(m.Parts), when m is older than
// the cutoff's message: the output of part cut and every non-empty output
// before it replaced by the marker. m itself when nothing is pruned, a
// copy otherwise.
func PruneFrom(m *forge.Message, cut int) *forge.Message {
	var clone *forge.Message
	for j := min(cut, len(m.Parts)-1); j >= 0; j-- {
		p := m.Parts[j]
		if p.Type != forge.PartTool || p.Output == nil || (j < cut && Tokens(int64(len(*p.Output))) == 0) {
			continue
		}
		if clone == nil {
			clone = m.Clone()
		}
		marker := PrunedMarker(len(*p.Output))
		clone.Parts[j].Output = &marker
	}
	if clone == nil {
		return m
	}
	return clone
}

// PrunedMarker is what the model is sent instead of a pruned output of n
// bytes.
func PrunedMarker(n int) string {
	return fmt.Sprintf("[output pruned from the context: %d bytes; it is kept in the session's history]", n)
}
