package modelview

import "github.com/forge-runtime/forge"

// TailStart picks the first message of a compaction's verbatim tail in
// history: the newest user message (always kept, with everything after
// it), extended back to earlier user messages while the tail's estimate
// stays within a quarter of window, unless window is 0 (unknown) or
// minimal (a compaction asked for through POST /compact keeps only the
// newest exchange). -1 when there is no user message to start from.
func TailStart(history []*forge.Message, window int64, minimal bool) int {
	isStart := func(m *forge.Message) bool { return m.Role == forge.RoleUser && !hasCompactionPart(m) }
	start := -1
	for i := len(history) - 1; i >= 0; i-- {
		if isStart(history[i]) {
			start = i
			break
		}
	}
	if start < 0 || window <= 0 || minimal {
		return start
	}
	budget := window / 4
	used := EstimateTokens(history[start:]...)
	for i := start - 1; i >= 0; i-- {
		used += EstimateTokens(history[i])
		if used > budget {
			break
		}
		if isStart(history[i]) {
			start = i
		}
	}
	return start
}

func hasCompactionPart(m *forge.Message) bool {
	for _, p := range m.Parts {
		if p.Type == forge.PartCompaction {
			return true
		}
	}
	return false
}
