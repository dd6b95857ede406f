package modelview

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// Convert turns a thread's model view into what the model is sent: user
// messages, assistant messages with their tool calls, and each call's
// result right after the assistant message that made it. A call's result
// is the last state of its call id along the branch, so a result recorded
// by a later turn (a tool message) answers a call made earlier. A failed
// summary and a compaction request it did not answer are left out.
func Convert(history []*forge.Message) []forge.ModelMessage {
	return convertRange(history, 0, len(history), LastCallStates(history), nil)
}

// LastCallStates maps each call id of history to its last tool part.
func LastCallStates(history []*forge.Message) map[string]*forge.Part {
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

// convertRange appends to out the model messages of history[from:to] (see
// Convert), last holding the last state of each call those messages make.
func convertRange(history []*forge.Message, from, to int, last map[string]*forge.Part, out []forge.ModelMessage) []forge.ModelMessage {
	// One backing array holds the parts of every message: a tool call
	// takes two, the call and its result.
	nparts := 0
	for _, m := range history[from:to] {
		for _, p := range m.Parts {
			switch p.Type {
			case forge.PartText, forge.PartReasoning, forge.PartFile:
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
			if StrayRequest(history, i) {
				continue
			}
			start := len(pool)
			for _, p := range m.Parts {
				switch {
				case p.Type == forge.PartText && p.Text != "":
					pool = append(pool, forge.ModelPart{Type: forge.ModelPartText, Text: copyText(m, p.Text)})
				case p.Type == forge.PartFile:
					if f := filePart(p); f != nil {
						pool = append(pool, forge.ModelPart{Type: forge.ModelPartFile, File: f})
					}
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

// filePart is the model file of a file part, without its bytes (the
// engine reads them from the store); nil for a part without a file id.
func filePart(p *forge.Part) *forge.ModelFile {
	var d forge.FileData
	if json.Unmarshal(p.Data, &d) != nil || d.FileID == "" {
		return nil
	}
	return &forge.ModelFile{FileID: d.FileID, Filename: d.Filename, MimeType: d.MimeType}
}
