package parts

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// SubagentPrefix begins the name of the tool that delegates to a subagent
// (subagent_<name>).
const SubagentPrefix = "subagent_"

// MaxAgentParts bounds the agent parts of one message: a message that
// mentions many subagents asks for the first ones.
const MaxAgentParts = 16

// Agent is an agent part. In a direct session's user message its Data (a
// forge.AgentData) is an @mention of a subagent, which the model is shown
// as a request to delegate to it (as OpenCode does). A forum's copy names
// a mentioned agent in its Text and has no Data: the model is not shown
// it (the text holds the mention).
var Agent = register(&Kind{
	Type: forge.PartAgent,
	Size: 1,
	Render: func(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart {
		if d, ok := AgentOf(p); ok && m.Role == forge.RoleUser {
			out = append(out, forge.ModelPart{Type: forge.ModelPartText, Text: DelegationRequest(d.Name)})
		}
		return out
	},
	Chars: func(p *forge.Part) int64 {
		if d, ok := AgentOf(p); ok {
			return int64(len(DelegationRequest(d.Name)))
		}
		return 0
	},
})

// AgentOf is the mention of an agent part; false for another kind, or a
// part without a name in its data (a forum copy's).
func AgentOf(p *forge.Part) (forge.AgentData, bool) {
	var d forge.AgentData
	if p.Type != forge.PartAgent || len(p.Data) == 0 || json.Unmarshal(p.Data, &d) != nil || d.Name == "" {
		return forge.AgentData{}, false
	}
	return d, true
}

// DelegationRequest is what the model is shown of a mention of subagent
// name, after the message that holds it.
func DelegationRequest(name string) string {
	return "Use the above message and context to generate a prompt and call the " + SubagentPrefix + name +
		" tool: the user asks for the " + name + " subagent."
}

// Mentions finds the @mentions in text of the agents names lists: "@"
// where no name character or letter comes before it, then a name that is
// the whole token (the run of name characters after "@", or that run
// without trailing dots ending a sentence; no letter, digit or "@" after
// it). "a@writer.com", "@writer@host" and "@writer-2" mention no agent
// writer. Each agent is listed once, at its
// first mention, in order, and at most MaxAgentParts are. Offsets count
// UTF-16 code units; a byte that is not UTF-8 counts one (it is U+FFFD to
// a JSON reader).
func Mentions(text string, names []string) []forge.AgentData {
	if len(names) == 0 {
		return nil
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	var out []forge.AgentData
	seen := map[string]bool{}
	// Code units are counted only up to a match: text without one is
	// scanned at the speed of IndexByte.
	units, counted := 0, 0 // UTF-16 code units in text[:counted]
	for i := strings.IndexByte(text, '@'); i >= 0 && len(out) < min(MaxAgentParts, len(want)); {
		j := i + 1
		for j < len(text) && nameByte(text[j]) {
			j++
		}
		if prev, _ := utf8.DecodeLastRuneInString(text[:i]); i == 0 || !wordRune(prev) {
			name := text[i+1 : j]
			if !want[name] {
				for len(name) > 0 && name[len(name)-1] == '.' {
					name = name[:len(name)-1]
				}
			}
			// A letter or digit beyond ASCII, or "@" (an address),
			// right after the run continues the token.
			next, _ := utf8.DecodeRuneInString(text[j:])
			if want[name] && !seen[name] && next != '@' && !unicode.IsLetter(next) && !unicode.IsDigit(next) {
				seen[name] = true
				units, counted = units+utf16Len(text[counted:i]), i
				out = append(out, forge.AgentData{Name: name, Start: units, End: units + 1 + len(name)})
			}
		}
		k := strings.IndexByte(text[j:], '@')
		if k < 0 {
			break
		}
		i = j + k
	}
	return out
}

// nameByte reports whether c may appear in an agent name.
func nameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// wordRune reports whether r, next to a mention, makes it part of a
// longer word (an address, a longer name).
func wordRune(r rune) bool {
	return r < utf8.RuneSelf && nameByte(byte(r)) || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// utf16Len is the length of s in UTF-16 code units, a byte that is not
// UTF-8 counting one (range decodes it as U+FFFD, one byte at a time).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
