package engine

import (
	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/modelview"
)

// modelMessages is the thread's history as the model is sent it. Without
// pruning, the settled prefix's conversion is kept for the next steps.
func (th *thread) modelMessages() []forge.ModelMessage {
	if b := th.agent.Compaction.PruneToolOutputs; b != nil {
		return modelview.Convert(modelview.PruneToolOutputs(th.history, *b))
	}
	msgs, memo := th.memo.Convert(th.history)
	th.memo = memo
	return msgs
}
