package parts

import (
	"encoding/json"
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
// without trailing dots ending a sentence). "a@writer.com" and
// "@writer-2" mention no agent writer. Each agent is listed once, at its
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
	units := 0             // UTF-16 code units before text[i]
	prev := utf8.RuneError // the rune before text[i] (none at the start)
	for i := 0; i < len(text) && len(out) < min(MaxAgentParts, len(want)); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if r == '@' && !wordRune(prev) {
			j := i + 1
			for j < len(text) && nameByte(text[j]) {
				j++
			}
			name := text[i+1 : j]
			if !want[name] {
				for len(name) > 0 && name[len(name)-1] == '.' {
					name = name[:len(name)-1]
				}
			}
			// A letter or digit beyond ASCII right after the run
			// continues the word.
			next, _ := utf8.DecodeRuneInString(text[j:])
			if want[name] && !seen[name] && !unicode.IsLetter(next) && !unicode.IsDigit(next) {
				seen[name] = true
				out = append(out, forge.AgentData{Name: name, Start: units, End: units + 1 + len(name)})
			}
			// The run is ASCII: one code unit a byte.
			units += j - i
			prev, i = rune(text[j-1]), j
			continue
		}
		units += utf16Len(r)
		prev, i = r, i+size
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

func utf16Len(r rune) int {
	if r >= 0x10000 && r <= unicode.MaxRune {
		return 2
	}
	return 1
}
