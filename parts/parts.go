// Package parts is where each kind of message part is one unit: its typed
// payload (what its Data holds), how the model view renders it into the
// content blocks a provider maps (forge.ModelPart) and what it costs the
// model in characters. One file per kind; adding a kind is adding a file
// and registering it here.
//
// The part row itself (forge.Part), its JSON and the storage of that row
// are the same for every kind: a kind's own content is its Data, decoded
// by the kind's accessor (File, Tool, Compaction, ...). Providers map the
// content blocks (text, file — an image or a PDF —, reasoning, tool call,
// tool result, whose Content may hold text and file blocks) to their wire
// format, each in one function.
package parts

import (
	"github.com/forge-runtime/forge"
)

// Kind is what one part kind means beyond its row.
type Kind struct {
	Type string
	// Size is the most model parts Render appends for one part, a tool
	// call's result included (the model view sizes its arrays with it).
	Size int
	// Render appends what the model is shown of p, a part of message m, to
	// out; nothing for a kind the model never sees, or a role it is not
	// shown in.
	Render func(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart
	// Chars is what p costs the model, in characters (the model view's
	// local estimate counts CharsPerToken characters a token).
	Chars func(p *forge.Part) int64
}

// CharsPerToken is the local estimate of text a model has not counted.
const CharsPerToken = 4

// Framing characters counted on top of a message's and a tool call's own.
const (
	MessageFraming = 16 // role and framing
	CallFraming    = 32
)

// kinds holds every kind, by type.
var kinds = map[string]*Kind{}

func register(k *Kind) *Kind {
	if k.Render == nil {
		k.Render = func(_ *forge.Message, _ *forge.Part, out []forge.ModelPart) []forge.ModelPart { return out }
	}
	if k.Chars == nil {
		k.Chars = func(*forge.Part) int64 { return 0 }
	}
	kinds[k.Type] = k
	return k
}

// Of returns the kind of type typ; nil for a type no kind has (an unknown
// part, which the model is not shown and costs nothing).
func Of(typ string) *Kind { return kinds[typ] }

// Types lists the registered kinds' types.
func Types() []string {
	out := make([]string, 0, len(kinds))
	for t := range kinds {
		out = append(out, t)
	}
	return out
}

// Size is the most model parts p renders into (see Kind.Size).
func Size(p *forge.Part) int {
	if k := kinds[p.Type]; k != nil {
		return k.Size
	}
	return 0
}

// Render appends the model parts of p, a part of m (see Kind.Render).
func Render(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart {
	if k := kinds[p.Type]; k != nil {
		return k.Render(m, p, out)
	}
	return out
}

// Chars is what p costs the model in characters (see Kind.Chars).
func Chars(p *forge.Part) int64 {
	if k := kinds[p.Type]; k != nil {
		return k.Chars(p)
	}
	return 0
}

// ModelChars is what a content block of a model request costs in
// characters: its text, name, arguments, output and file bytes, and a
// call's framing; a tool result's content blocks count as theirs.
func ModelChars(p *forge.ModelPart) int64 {
	chars := int64(len(p.Text) + len(p.Name) + len(p.Arguments) + len(p.Output))
	if p.File != nil {
		chars += int64(len(p.File.Data))
	}
	if p.Type == forge.ModelPartToolCall || p.Type == forge.ModelPartToolResult {
		chars += CallFraming
	}
	for i := range p.Content {
		chars += ModelChars(&p.Content[i])
	}
	return chars
}
