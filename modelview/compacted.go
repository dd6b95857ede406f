package modelview

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// FilterCompacted is the model view of a thread's branch, oldest first
// (DESIGN.md): scanning newest to oldest, at the first successful summary
// whose parent user message carries a compaction part, keep the verbatim
// tail that part points to and stop; the result is [compaction request,
// summary, tail, everything after]. Without a boundary it is msgs.
func FilterCompacted(msgs []*forge.Message) []*forge.Message {
	byID := make(map[string]int, len(msgs))
	for i, m := range msgs {
		byID[m.ID] = i
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		s := msgs[i]
		if !Succeeded(s) || s.ParentID == nil {
			continue
		}
		ri, ok := byID[*s.ParentID]
		if !ok || msgs[ri].Role != forge.RoleUser {
			continue
		}
		cd, ok := CompactionData(msgs[ri])
		if !ok {
			continue
		}
		ti, ok := byID[cd.TailStartID]
		if !ok || cd.TailStartID == "" {
			ti = ri
		}
		return Arrange(msgs[ti:], msgs[ri], s)
	}
	return msgs
}

// Succeeded reports whether m is a summary that ended well: only such a
// summary makes a compaction boundary.
func Succeeded(m *forge.Message) bool {
	return m.Summary && m.Role == forge.RoleAssistant && m.Finish != "" && m.Finish != forge.FinishError
}

// Arrange puts request and summary first, then the rest of from in order.
func Arrange(from []*forge.Message, request, summary *forge.Message) []*forge.Message {
	out := make([]*forge.Message, 0, len(from)+2)
	out = append(out, request, summary)
	for _, m := range from {
		if m.ID != request.ID && m.ID != summary.ID {
			out = append(out, m)
		}
	}
	return out
}

// CompactionData is the data of m's compaction part; false when m has
// none (or its data does not decode).
func CompactionData(m *forge.Message) (forge.CompactionData, bool) {
	for _, p := range m.Parts {
		if p.Type == forge.PartCompaction {
			var cd forge.CompactionData
			if len(p.Data) > 0 {
				if err := json.Unmarshal(p.Data, &cd); err != nil {
					return cd, false
				}
			}
			return cd, true
		}
	}
	return forge.CompactionData{}, false
}

// StrayRequest reports whether history[i] is a compaction request not
// answered by a successful summary (its compaction failed or was cut off):
// the model is not sent it.
func StrayRequest(history []*forge.Message, i int) bool {
	if _, ok := CompactionData(history[i]); !ok {
		return false
	}
	if i+1 < len(history) {
		s := history[i+1]
		if s.Summary && s.Finish != "" && s.Finish != forge.FinishError && s.ParentID != nil && *s.ParentID == history[i].ID {
			return false
		}
	}
	return true
}

// LatestSummary is the index of the newest summary in history, -1 if
// none.
func LatestSummary(history []*forge.Message) int {
	return latestSummaryFrom(history, 0)
}

// latestSummaryFrom is LatestSummary among history[from:].
func latestSummaryFrom(history []*forge.Message, from int) int {
	for i := len(history) - 1; i >= from; i-- {
		if history[i].Summary {
			return i
		}
	}
	return -1
}

// ReportedContext is the context size the model last reported (input plus
// output of the newest call after the latest summary) and the index of
// that message; -1 when no usable report exists. Messages of a verbatim
// tail predate the summary (smaller ids): their usage describes the
// context before compaction and is not used.
func ReportedContext(history []*forge.Message) (int64, int) {
	s := LatestSummary(history)
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		if s >= 0 && m.ID < history[s].ID {
			continue
		}
		if u := reported(m); u > 0 {
			return u, i
		}
	}
	return 0, -1
}

// reported is the context size m's usage reports, 0 when m is no model
// call with a usable report.
func reported(m *forge.Message) int64 {
	if m.Role != forge.RoleAssistant || m.Summary || m.Usage == nil || m.Finish == forge.FinishError {
		return 0
	}
	return m.Usage.InputTokens + m.Usage.OutputTokens
}
