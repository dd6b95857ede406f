package openai

import (
	"encoding/base64"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/jsonenc"
)

// Files in OpenAI's wire formats: Chat Completions takes an image as an
// image_url content part holding a data URL and a PDF as a file content
// part (file_data, a data URL); the Responses API takes input_image and
// input_file. A file whose bytes the engine did not fill is named in text.

func countFiles(parts []forge.ModelPart) int {
	n := 0
	for j := range parts {
		if parts[j].Type == forge.ModelPartFile && parts[j].File != nil {
			n++
		}
	}
	return n
}

func isImage(f *forge.ModelFile) bool { return strings.HasPrefix(f.MimeType, "image/") }

// appendDataURL appends the JSON string "data:<type>;base64,<bytes>".
func appendDataURL(b []byte, f *forge.ModelFile) []byte {
	b = append(b, `"data:`...)
	b = append(b, f.MimeType...) // a type Forge sniffed: no character to escape
	b = append(b, `;base64,`...)
	b = base64.StdEncoding.AppendEncode(b, f.Data)
	return append(b, '"')
}

// fileNote is the text a file without bytes is sent as.
func fileNote(f *forge.ModelFile) string {
	if f == nil {
		return "[an attached file]"
	}
	return "[attached file " + f.Filename + " (" + f.MimeType + ")]"
}

// appendChatBlock appends a Chat Completions content part for a content
// block: text, or a file (appendChatFile).
func appendChatBlock(b []byte, p *forge.ModelPart) []byte {
	if p.Type == forge.ModelPartFile {
		return appendChatFile(b, p.File)
	}
	b = append(b, `{"type":"text","text":`...)
	b = jsonenc.AppendString(b, p.Text)
	return append(b, '}')
}

// appendChatFile appends a Chat Completions content part for f.
func appendChatFile(b []byte, f *forge.ModelFile) []byte {
	switch {
	case f == nil || f.Data == nil:
		b = append(b, `{"type":"text","text":`...)
		b = jsonenc.AppendString(b, fileNote(f))
		return append(b, '}')
	case isImage(f):
		b = append(b, `{"type":"image_url","image_url":{"url":`...)
		b = appendDataURL(b, f)
		return append(b, `}}`...)
	}
	b = append(b, `{"type":"file","file":{"filename":`...)
	b = jsonenc.AppendString(b, f.Filename)
	b = append(b, `,"file_data":`...)
	b = appendDataURL(b, f)
	return append(b, `}}`...)
}

// chatToolText is a tool message's content: the result's output, its
// text blocks, and a line for each file, which follows in a user message
// (appendChatResultFiles): a Chat Completions tool message holds text
// alone.
func chatToolText(p *forge.ModelPart) string {
	if len(p.Content) == 0 {
		return p.Output
	}
	var sb strings.Builder
	sb.WriteString(p.Output)
	for i := range p.Content {
		c := &p.Content[i]
		switch {
		case c.Type == forge.ModelPartText:
			sb.WriteString("\n")
			sb.WriteString(c.Text)
		case c.Type == forge.ModelPartFile && c.File != nil:
			sb.WriteString("\n[the tool returned the file " + c.File.Filename + " (" + c.File.MimeType + "): it follows in the next message]")
		}
	}
	return sb.String()
}

// appendChatResultFiles appends the user message holding the files of
// the tool results among parts, each result's headed by its call id.
func appendChatResultFiles(b []byte, parts []forge.ModelPart) []byte {
	b = append(b, `{"role":"user","content":[`...)
	n := 0
	for i := range parts {
		p := &parts[i]
		if p.Type != forge.ModelPartToolResult || countFiles(p.Content) == 0 {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"type":"text","text":`...)
		b = jsonenc.AppendString(b, "The files tool call "+p.CallID+" returned:")
		b = append(b, '}')
		for j := range p.Content {
			if c := &p.Content[j]; c.Type == forge.ModelPartFile && c.File != nil {
				b = append(b, ',')
				b = appendChatBlock(b, c)
			}
		}
	}
	return append(b, "]}"...)
}

// dataURL is "data:<type>;base64,<bytes>".
func dataURL(f *forge.ModelFile) string {
	return "data:" + f.MimeType + ";base64," + base64.StdEncoding.EncodeToString(f.Data)
}

// responsesContent is a user message's content for the Responses API,
// its blocks in order (responsesBlock).
func responsesContent(parts []forge.ModelPart) responses.ResponseInputMessageContentListParam {
	list := make(responses.ResponseInputMessageContentListParam, 0, len(parts))
	for _, p := range parts {
		if c, ok := responsesBlock(p); ok {
			list = append(list, c)
		}
	}
	return list
}

// responsesBlock maps a content block to the Responses API's input
// content: input_text, input_image (a data URL), input_file (file_data, a
// data URL, and its name); a file without its bytes is named in text.
// ok is false for a block that is no content (calls, results, reasoning).
func responsesBlock(p forge.ModelPart) (responses.ResponseInputContentUnionParam, bool) {
	switch {
	case p.Type == forge.ModelPartText:
		return responses.ResponseInputContentParamOfInputText(p.Text), true
	case p.Type != forge.ModelPartFile:
		return responses.ResponseInputContentUnionParam{}, false
	case p.File == nil || p.File.Data == nil:
		return responses.ResponseInputContentParamOfInputText(fileNote(p.File)), true
	case isImage(p.File):
		return responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
			Detail: responses.ResponseInputImageDetailAuto, ImageURL: sdk.String(dataURL(p.File))}}, true
	}
	return responses.ResponseInputContentUnionParam{OfInputFile: &responses.ResponseInputFileParam{
		Filename: sdk.String(p.File.Filename), FileData: sdk.String(dataURL(p.File))}}, true
}

// responsesOutput is a tool result as function_call_output's output: its
// text alone as a string, as always; with content blocks (an MCP tool's
// images) the output array, the text first and then each block as
// responsesBlock maps it.
func responsesOutput(p forge.ModelPart) responses.ResponseInputItemFunctionCallOutputOutputUnionParam {
	var out responses.ResponseInputItemFunctionCallOutputOutputUnionParam
	if len(p.Content) == 0 {
		out.OfString = sdk.String(p.Output)
		return out
	}
	list := make(responses.ResponseFunctionCallOutputItemListParam, 0, len(p.Content)+1)
	if p.Output != "" {
		list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
			OfInputText: &responses.ResponseInputTextContentParam{Text: p.Output}})
	}
	for _, c := range p.Content {
		b, ok := responsesBlock(c)
		switch {
		case !ok:
		case b.OfInputText != nil:
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
				OfInputText: &responses.ResponseInputTextContentParam{Text: b.OfInputText.Text}})
		case b.OfInputImage != nil:
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
				OfInputImage: &responses.ResponseInputImageContentParam{
					Detail: responses.ResponseInputImageContentDetailAuto, ImageURL: b.OfInputImage.ImageURL}})
		case b.OfInputFile != nil:
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
				OfInputFile: &responses.ResponseInputFileContentParam{
					Filename: b.OfInputFile.Filename, FileData: b.OfInputFile.FileData}})
		}
	}
	out.OfResponseFunctionCallOutputItemArray = list
	return out
}
