package modelview

import "github.com/forge-runtime/forge"

// Memo keeps what a prefix of a thread's history that nothing later can
// change converts to, so that each model step converts and scans only what
// follows it: the prefix's model messages, its estimated size and its
// newest usage report. Converting, estimating and finding the last report
// of a long session's history then cost what was added since, not the
// session's length. The zero Memo is empty.
//
// A Memo is a value, copied into the history cache and on to the next
// turn of its session; the copies share the backing array of the model
// messages. The copy that last extended the array may go on appending to
// it in place; any other copies first (once). The requests a Memo
// converted share its messages too: a request is read only during its
// model call, and the next step's conversion may reuse what lies past the
// prefix. One goroutine at a time uses a Memo and its copies (one turn of
// a session runs at a time).
type Memo struct {
	msgs []*forge.Message     // the prefix, history[:len(msgs)]
	conv []forge.ModelMessage // its model messages
	arr  *claim               // conv's backing array
	// Of msgs: their MessageChars, and 1 + the index of the newest
	// message reporting its context size (0: none), that size and the
	// characters up to and including it.
	chars    int64
	report   int
	reported int64
	charsTo  int64
}

// claim records how much of a backing array of model messages a Memo has
// claimed; the Memo whose messages end there owns what follows.
type claim struct{ n int }

// Convert returns Convert(history), reusing m when history extends its
// prefix, and the Memo for history.
func (m Memo) Convert(history []*forge.Message) ([]forge.ModelMessage, Memo) {
	k, ok := m.prefixOf(history)
	switch {
	case !ok:
		m, k = Memo{}, 0
	case k > 0 && &m.msgs[0] != &history[0]:
		m.msgs = history[:k:k] // the same messages in another array: follow it
	}
	// Calls made in the prefix have their final states there: only the
	// rest is scanned.
	last := LastCallStates(history[k:])
	j := k
	for j < len(history) && settled(history[j], last) {
		j++
	}
	// A message converts to at most two model messages (a call's results
	// follow it).
	rest := 2 * (len(history) - j)
	if j > k {
		m.conv = convertRange(history, k, j, last, m.appendable(2*(j-k)+rest))
		m.arr.n = len(m.conv)
		for i := k; i < j; i++ {
			m.chars += MessageChars(history[i])
			if u := reported(history[i]); u > 0 {
				m.report, m.reported, m.charsTo = i+1, u, m.chars
			}
		}
		m.msgs = history[:j:j]
	}
	return convertRange(history, j, len(history), last, m.appendable(rest)), m
}

// prefixOf reports whether m's prefix is a prefix of history, and its
// length. A history that shares its backing array with the prefix extends
// it (a history only grows: nothing rewrites its messages in place);
// another is compared message by message.
func (m *Memo) prefixOf(history []*forge.Message) (int, bool) {
	k := len(m.msgs)
	switch {
	case k == 0:
		return 0, true
	case k > len(history):
		return 0, false
	case &m.msgs[0] == &history[0]:
		return k, true
	}
	for i, msg := range m.msgs {
		if history[i] != msg {
			return 0, false
		}
	}
	return k, true
}

// appendable returns m.conv with room for at least n more model messages
// that may be written in place: when m owns the end of its backing array
// and the room is there, m.conv itself; otherwise m.conv moves to a new
// array m owns, with room to spare.
func (m *Memo) appendable(n int) []forge.ModelMessage {
	if m.arr != nil && m.arr.n == len(m.conv) && cap(m.conv)-len(m.conv) >= n {
		return m.conv
	}
	grown := make([]forge.ModelMessage, len(m.conv), 2*(len(m.conv)+n)+16)
	copy(grown, m.conv)
	m.conv, m.arr = grown, &claim{n: len(grown)}
	return m.conv
}

// Settled is the number of messages of the prefix m converted.
func (m Memo) Settled() int { return len(m.msgs) }

// LatestSummary is LatestSummary(history), scanning only what follows m's
// prefix when history extends it (a prefix holds no summary: a summary
// never settles).
func (m Memo) LatestSummary(history []*forge.Message) int {
	k, ok := m.prefixOf(history)
	if !ok {
		return LatestSummary(history)
	}
	return latestSummaryFrom(history, k)
}

// ReportedContext is ReportedContext(history), scanning only what follows
// m's prefix when history extends it and holds no summary (the common
// case; with a summary the whole history is read).
func (m Memo) ReportedContext(history []*forge.Message) (int64, int) {
	k, ok := m.prefixOf(history)
	if !ok || k == 0 || latestSummaryFrom(history, k) >= 0 {
		return ReportedContext(history)
	}
	for i := len(history) - 1; i >= k; i-- {
		if u := reported(history[i]); u > 0 {
			return u, i
		}
	}
	if m.report > 0 {
		return m.reported, m.report - 1
	}
	return 0, -1
}

// TokensAfter is EstimateTokens(history[at+1:]...), at being -1 or the
// index ReportedContext returned, reading only what follows m's prefix
// when history extends it.
func (m Memo) TokensAfter(history []*forge.Message, at int) int64 {
	k, ok := m.prefixOf(history)
	switch {
	case !ok || at+1 >= k:
		return EstimateTokens(history[at+1:]...)
	case at == -1:
		return Tokens(m.chars + charsOf(history[k:]))
	case at == m.report-1:
		return Tokens(m.chars - m.charsTo + charsOf(history[k:]))
	}
	return EstimateTokens(history[at+1:]...)
}

func charsOf(msgs []*forge.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += MessageChars(m)
	}
	return n
}
