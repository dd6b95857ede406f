package parts

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// Text is a text part: a user's words (a forum copy's headed by its
// author, see copyText) or an assistant's answer, with the provider state
// that must go back with it.
var Text = register(&Kind{
	Type: forge.PartText,
	Size: 1,
	Render: func(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart {
		if p.Text == "" {
			return out
		}
		switch m.Role {
		case forge.RoleUser:
			return append(out, forge.ModelPart{Type: forge.ModelPartText, Text: copyText(m, p.Text)})
		case forge.RoleAssistant:
			return append(out, forge.ModelPart{Type: forge.ModelPartText, Text: p.Text, Provider: p.Provider})
		}
		return out
	},
	Chars: func(p *forge.Part) int64 { return int64(len(p.Text)) },
})

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
