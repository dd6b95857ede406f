package modelview

import (
	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// CharsPerToken is the local estimate of text a model has not counted.
const CharsPerToken = parts.CharsPerToken

// messageFraming is counted on top of a message's own characters: role
// and framing.
const messageFraming = parts.MessageFraming

// Tokens is the estimate of chars characters, rounded up.
func Tokens(chars int64) int64 { return (chars + CharsPerToken - 1) / CharsPerToken }

// MessageChars is what m costs the model in characters: what each of its
// parts costs (its kind says: package parts), and framing.
func MessageChars(m *forge.Message) int64 {
	chars := int64(messageFraming)
	for _, p := range m.Parts {
		chars += parts.Chars(p)
	}
	return chars
}

// EstimateTokens is a cheap local estimate of what msgs cost the model:
// about one token per 4 characters of text, arguments and results.
func EstimateTokens(msgs ...*forge.Message) int64 {
	var chars int64
	for _, m := range msgs {
		chars += MessageChars(m)
	}
	return Tokens(chars)
}

// EstimateRequestTokens is the same estimate for a whole model request:
// system prompt, tool definitions and messages.
func EstimateRequestTokens(req *forge.ModelRequest) int64 {
	chars := int64(len(req.System))
	for _, d := range req.Tools {
		chars += int64(len(d.Name) + len(d.Description) + len(d.InputSchema))
	}
	for _, m := range req.Messages {
		chars += messageFraming
		for j := range m.Parts {
			chars += parts.ModelChars(&m.Parts[j])
		}
	}
	return Tokens(chars)
}

// PromptTokens is the estimate of a system prompt and tool definitions,
// the part of a request that is not history.
func PromptTokens(instructions string, tools []forge.ToolDef) int64 {
	est := Tokens(int64(len(instructions)))
	for _, d := range tools {
		est += int64(len(d.Name)+len(d.Description)+len(d.InputSchema)) / CharsPerToken
	}
	return est
}
