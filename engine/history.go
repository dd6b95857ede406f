package engine

import (
	"github.com/forge-runtime/forge/modelview"
)

// modelMemo keeps the model messages of a prefix of a thread's history
// that nothing later can change (modelview.Memo), so that each step
// converts and scans only what follows it.
type modelMemo = modelview.Memo
