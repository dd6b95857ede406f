package modelview

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// CharsPerToken is the local estimate of text a model has not counted.
const CharsPerToken = 4

// Framing characters counted on top of a message's and a tool call's own.
const (
	messageFraming = 16 // role and framing
	callFraming    = 32
)

// Tokens is the estimate of chars characters, rounded up.
func Tokens(chars int64) int64 { return (chars + CharsPerToken - 1) / CharsPerToken }

// MessageChars is what m costs the model in characters: its text and
// reasoning, its calls' names, arguments and results, and framing.
func MessageChars(m *forge.Message) int64 {
	chars := int64(messageFraming)
	for _, p := range m.Parts {
		switch p.Type {
		case forge.PartText, forge.PartReasoning:
			chars += int64(len(p.Text))
		case forge.PartFile:
			chars += fileChars(p)
		case forge.PartTool:
			chars += int64(len(p.Tool) + len(p.Arguments) + callFraming)
			if p.Output != nil {
				chars += int64(len(*p.Output))
			}
			if p.Error != nil {
				chars += int64(len(*p.Error))
			}
		}
	}
	return chars
}

// imageChars is what an image is counted as: about the thousand tokens
// providers charge for a mid-sized image.
const imageChars = 1000 * CharsPerToken

// fileChars is the estimate of a file part: an image's flat cost, a text
// or PDF file's size.
func fileChars(p *forge.Part) int64 {
	f := filePart(p)
	if f == nil {
		return 0
	}
	if len(f.MimeType) > 6 && f.MimeType[:6] == "image/" {
		return imageChars
	}
	var d forge.FileData
	_ = json.Unmarshal(p.Data, &d)
	return d.Bytes + int64(len(d.Filename)) + messageFraming
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
		for _, p := range m.Parts {
			chars += int64(len(p.Text) + len(p.Name) + len(p.Arguments) + len(p.Output))
			if p.File != nil {
				chars += int64(len(p.File.Data))
			}
			if p.Type == forge.ModelPartToolCall || p.Type == forge.ModelPartToolResult {
				chars += callFraming
			}
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
