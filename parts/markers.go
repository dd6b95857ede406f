package parts

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// The kinds the model is never shown and that cost it nothing: records of
// the turn for clients and the store.
var (
	// Subtask is a delegated call's child thread.
	Subtask = register(&Kind{Type: forge.PartSubtask})
	// StepStart opens a model call.
	StepStart = register(&Kind{Type: forge.PartStepStart})
	// StepFinish closes one (its Data a forge.StepFinishData).
	StepFinish = register(&Kind{Type: forge.PartStepFinish})
	// Patch lists the files a step's tools changed in the sandbox.
	Patch = register(&Kind{Type: forge.PartPatch})
)

// StepFinishOf is the data of a step-finish part; false for another kind,
// or a part without data.
func StepFinishOf(p *forge.Part) (forge.StepFinishData, bool) {
	var d forge.StepFinishData
	if p.Type != forge.PartStepFinish || len(p.Data) == 0 || json.Unmarshal(p.Data, &d) != nil {
		return forge.StepFinishData{}, false
	}
	return d, true
}
