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

// dataURL is "data:<type>;base64,<bytes>".
func dataURL(f *forge.ModelFile) string {
	return "data:" + f.MimeType + ";base64," + base64.StdEncoding.EncodeToString(f.Data)
}

// responsesContent is a user message's content for the Responses API,
// in order: input_text, input_image (a data URL), input_file (file_data,
// a data URL, and its name).
func responsesContent(parts []forge.ModelPart) responses.ResponseInputMessageContentListParam {
	list := make(responses.ResponseInputMessageContentListParam, 0, len(parts))
	for _, p := range parts {
		switch {
		case p.Type == forge.ModelPartText:
			list = append(list, responses.ResponseInputContentParamOfInputText(p.Text))
		case p.Type != forge.ModelPartFile:
		case p.File == nil || p.File.Data == nil:
			list = append(list, responses.ResponseInputContentParamOfInputText(fileNote(p.File)))
		case isImage(p.File):
			list = append(list, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
				Detail: responses.ResponseInputImageDetailAuto, ImageURL: sdk.String(dataURL(p.File))}})
		default:
			list = append(list, responses.ResponseInputContentUnionParam{OfInputFile: &responses.ResponseInputFileParam{
				Filename: sdk.String(p.File.Filename), FileData: sdk.String(dataURL(p.File))}})
		}
	}
	return list
}
