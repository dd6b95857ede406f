package parts

import "github.com/forge-runtime/forge"

// Reasoning is an assistant's reasoning: its text (a summary, or nothing)
// and the provider state that lets the provider take it back (a thinking
// signature, encrypted content).
var Reasoning = register(&Kind{
	Type: forge.PartReasoning,
	Size: 1,
	Render: func(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart {
		if m.Role != forge.RoleAssistant || (p.Text == "" && p.Provider == nil) {
			return out
		}
		return append(out, forge.ModelPart{Type: forge.ModelPartReasoning, Text: p.Text, Provider: p.Provider})
	},
	Chars: func(p *forge.Part) int64 { return int64(len(p.Text)) },
})
