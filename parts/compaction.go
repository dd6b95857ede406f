package parts

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// Compaction marks a compaction request (its Data a forge.CompactionData:
// the boundary and the reason). The model is never shown it: the model
// view puts the summary in its place.
var Compaction = register(&Kind{Type: forge.PartCompaction})

// CompactionOf is the data of a compaction part; false for another kind,
// or a part without data.
func CompactionOf(p *forge.Part) (forge.CompactionData, bool) {
	var d forge.CompactionData
	if p.Type != forge.PartCompaction || len(p.Data) == 0 || json.Unmarshal(p.Data, &d) != nil {
		return forge.CompactionData{}, false
	}
	return d, true
}
