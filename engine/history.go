package engine

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// toModelMessages turns a thread's stored messages into what the model is
// sent: user messages, assistant messages with their tool calls, and each
// call's result right after the assistant message that made it. A call's
// result is the last state of its call id along the branch, so a result
// recorded by a later turn (a tool message) answers a call made earlier.
func toModelMessages(history []*forge.Message) []forge.ModelMessage {
	return convertMessages(history, 0, len(history), lastCallStates(history), nil)
}

// lastCallStates maps each call id of history to its last tool part.
func lastCallStates(history []*forge.Message) map[string]*forge.Part {
	var last map[string]*forge.Part
	for _, m := range history {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool {
				if last == nil {
					last = map[string]*forge.Part{}
				}
				last[p.CallID] = p
			}
		}
	}
	return last
}

// convertMessages appends to out the model messages of history[from:to]
// (see toModelMessages), last being lastCallStates(history).
func convertMessages(history []*forge.Message, from, to int, last map[string]*forge.Part, out []forge.ModelMessage) []forge.ModelMessage {
	// One backing array holds the parts of every message (a session's
	// history is converted on every step): a tool call takes two, the
	// call and its result.
	nparts := 0
	for _, m := range history[from:to] {
		for _, p := range m.Parts {
			switch p.Type {
			case forge.PartText, forge.PartReasoning:
				nparts++
			case forge.PartTool:
				nparts += 2
			}
		}
	}
	pool := make([]forge.ModelPart, 0, nparts)
	// take returns the parts appended to pool since start, capped so that
	// appending to them cannot overwrite another message's.
	take := func(start int) []forge.ModelPart {
		if len(pool) == start {
			return nil
		}
		return pool[start:len(pool):len(pool)]
	}
	if out == nil {
		n := to - from
		out = make([]forge.ModelMessage, 0, n+n/2)
	}
	for i := from; i < to; i++ {
		m := history[i]
		switch m.Role {
		case forge.RoleUser:
			if strayRequest(history, i) {
				continue
			}
			start := len(pool)
			for _, p := range m.Parts {
				if p.Type == forge.PartText && p.Text != "" {
					pool = append(pool, forge.ModelPart{Type: forge.ModelPartText, Text: copyText(m, p.Text)})
				}
			}
			if parts := take(start); parts != nil {
				out = append(out, forge.ModelMessage{Role: forge.RoleUser, Parts: parts})
			}
		case forge.RoleAssistant:
			if m.Summary && (m.Finish == "" || m.Finish == forge.FinishError) {
				continue // a failed summary: its compaction did not happen
			}
			start := len(pool)
			calls := 0
			for _, p := range m.Parts {
				switch p.Type {
				case forge.PartText:
					if p.Text != "" {
						pool = append(pool, forge.ModelPart{Type: forge.ModelPartText, Text: p.Text, Provider: p.Provider})
					}
				case forge.PartReasoning:
					if p.Text != "" || p.Provider != nil {
						pool = append(pool, forge.ModelPart{Type: forge.ModelPartReasoning, Text: p.Text, Provider: p.Provider})
					}
				case forge.PartTool:
					pool = append(pool, forge.ModelPart{Type: forge.ModelPartToolCall, CallID: p.CallID, Name: p.Tool, Arguments: p.Arguments, Provider: p.Provider})
					calls++
				}
			}
			parts := take(start)
			if parts == nil {
				continue
			}
			out = append(out, forge.ModelMessage{Role: forge.RoleAssistant, Parts: parts})
			if calls > 0 {
				start = len(pool)
				for _, p := range parts {
					if p.Type == forge.ModelPartToolCall {
						pool = append(pool, resultPart(last[p.CallID]))
					}
				}
				out = append(out, forge.ModelMessage{Role: forge.RoleTool, Parts: take(start)})
			}
		}
		// Tool messages are folded into the assistant message they answer.
	}
	return out
}

// modelMemo keeps the model messages of a prefix of a thread's history
// that nothing later can change, so that each step converts only what
// follows it (toModelMessages of a session's whole history on every step
// cost a long session tens of microseconds and kilobytes a turn). The
// model messages are shared by the requests that reuse them: providers
// only read a request.
type modelMemo struct {
	msgs []*forge.Message // the prefix
	conv []forge.ModelMessage
}

// convert returns toModelMessages(history), reusing the memo when history
// extends its prefix, and the memo for history.
func (mm modelMemo) convert(history []*forge.Message) ([]forge.ModelMessage, modelMemo) {
	k := len(mm.msgs)
	if k > len(history) || !samePrefix(mm.msgs, history) {
		mm, k = modelMemo{}, 0
	}
	last := lastCallStates(history)
	j := k
	for j < len(history) && settled(history[j], last) {
		j++
	}
	if j > k {
		conv := convertMessages(history, k, j, last, slices.Clip(mm.conv))
		mm = modelMemo{msgs: history[:j:j], conv: slices.Clip(conv)}
	}
	out := make([]forge.ModelMessage, len(mm.conv), len(mm.conv)+(len(history)-j)*3/2)
	copy(out, mm.conv)
	return convertMessages(history, j, len(history), last, out), mm
}

func samePrefix(prefix, history []*forge.Message) bool {
	for i, m := range prefix {
		if history[i] != m {
			return false
		}
	}
	return true
}

// settled reports whether m's model messages can no longer change: it is
// no compaction request or summary (whose conversion depends on the
// messages after them), an assistant message's step has ended, and every
// call it holds has its final result (a completed or failed call is no
// longer open: no later message resolves it).
func settled(m *forge.Message, last map[string]*forge.Part) bool {
	if m.Summary || (m.Role == forge.RoleAssistant && m.Finish == "") {
		return false
	}
	for _, p := range m.Parts {
		switch p.Type {
		case forge.PartCompaction:
			return false
		case forge.PartTool:
			if r := last[p.CallID]; r == nil || (r.State != forge.StateCompleted && r.State != forge.StateError) {
				return false
			}
		}
	}
	return true
}

func resultPart(p *forge.Part) forge.ModelPart {
	r := forge.ModelPart{Type: forge.ModelPartToolResult, CallID: p.CallID, Name: p.Tool}
	switch {
	case p.State == forge.StateCompleted && p.Output != nil:
		r.Output = *p.Output
	case p.State == forge.StateError && p.Error != nil:
		r.Output, r.IsError = *p.Error, true
	default:
		// An unanswered call (its turn was cancelled or abandoned): models
		// require a result for every call, so say what happened.
		r.Output, r.IsError = "no result: the call was never answered", true
	}
	return r
}

// monologueOrder puts a monologue's messages in the order the model reads
// them: a turn's messages stay together, and a copy ingested while a turn
// ran (or while it was paused) comes after that turn's messages, never
// between a tool call and the rest of its turn. Each message sorts by its
// anchor, the time in its turn's id (its own id for a message outside any
// turn), then by id; ids are time-sortable, so the anchor of a copy
// ingested during a turn is later than the turn's.
func monologueOrder(msgs []*forge.Message) []*forge.Message {
	anchor := func(m *forge.Message) string {
		if m.TurnID != "" {
			return idTime(m.TurnID)
		}
		return idTime(m.ID)
	}
	out := slices.Clone(msgs)
	slices.SortStableFunc(out, func(a, b *forge.Message) int {
		if c := strings.Compare(anchor(a), anchor(b)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// idTime is the time-sortable part of an id (after its type prefix).
func idTime(id string) string {
	if i := strings.IndexByte(id, '_'); i >= 0 {
		return id[i+1:]
	}
	return id
}

// copyText is how the model sees a forum message copied into a monologue:
// "<author name>: <text>" (API.md), the name as ingestion chose it
// (forge.SourceMeta.SourceName: "human:support" for a human whose id is an
// agent's name, so the human cannot pass for the agent), and every line of
// the text after its first indented by two spaces (a line break in a post
// cannot start a line naming another speaker). Every line break a model
// may read as one counts: \r\n, \r, \n, \v, \f, U+0085, U+2028 and
// U+2029. Other messages are shown as they are.
func copyText(m *forge.Message, text string) string {
	if len(m.Metadata) == 0 || m.TurnID != "" {
		return text
	}
	var meta forge.SourceMeta
	if json.Unmarshal(m.Metadata, &meta) != nil || meta.SourceActorID == "" {
		return text
	}
	name := meta.SourceName
	if name == "" {
		name = meta.SourceActorID
		if i := strings.IndexByte(name, ':'); i >= 0 {
			name = name[i+1:]
		}
	}
	var b strings.Builder
	b.Grow(len(name) + 2 + len(text) + 8)
	// Ids cannot hold line breaks or control characters; one stored
	// before that was refused still cannot break the author's line.
	for _, c := range name {
		if lineBreak(c) || unicode.IsControl(c) {
			c = utf8.RuneError
		}
		b.WriteRune(c)
	}
	b.WriteString(": ")
	for i := 0; i < len(text); {
		c, size := utf8.DecodeRuneInString(text[i:])
		if !lineBreak(c) {
			b.WriteString(text[i : i+size])
			i += size
			continue
		}
		if c == '\r' && i+1 < len(text) && text[i+1] == '\n' {
			size = 2
		}
		b.WriteString("\n  ")
		i += size
	}
	return b.String()
}

// lineBreak reports whether c ends a line.
func lineBreak(c rune) bool {
	switch c {
	case '\n', '\r', '\v', '\f', '\u0085', '\u2028', '\u2029':
		return true
	}
	return false
}
