package engine

import "github.com/forge-runtime/forge/modelview"

// FilterCompacted exposes the in-memory filterCompacted to the external
// tests, as the oracle the store-backed model view is checked against.
var FilterCompacted = modelview.FilterCompacted

// SummarySystem is the system prompt of a summary call.
const SummarySystem = summarySystem
