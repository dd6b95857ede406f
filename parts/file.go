package parts

import (
	"encoding/json"
	"strings"

	"github.com/forge-runtime/forge"
)

// File is a file a user message attaches (its Data a forge.FileData): the
// model is shown an image or a PDF as a file block whose bytes the engine
// reads from the store for each call, a text file as text (the engine
// again). A tool result's files (Tool) are the same blocks.
var File = register(&Kind{
	Type: forge.PartFile,
	Size: 1,
	Render: func(m *forge.Message, p *forge.Part, out []forge.ModelPart) []forge.ModelPart {
		if m.Role != forge.RoleUser {
			return out
		}
		if d, ok := FileOf(p); ok {
			out = append(out, FileBlock(d))
		}
		return out
	},
	Chars: func(p *forge.Part) int64 {
		d, ok := FileOf(p)
		if !ok {
			return 0
		}
		return FileChars(d)
	},
})

// FileOf is the file of a file part; false for another kind, or a part
// without a file id.
func FileOf(p *forge.Part) (forge.FileData, bool) {
	var d forge.FileData
	if p.Type != forge.PartFile || json.Unmarshal(p.Data, &d) != nil || d.FileID == "" {
		return forge.FileData{}, false
	}
	return d, true
}

// FileData is the Data of a file part holding d.
func FileData(d forge.FileData) json.RawMessage {
	b, _ := json.Marshal(d) // strings and a number: cannot fail
	return b
}

// FileBlock is the content block of a file, without its bytes (the engine
// reads them from the store for each call).
func FileBlock(d forge.FileData) forge.ModelPart {
	return forge.ModelPart{Type: forge.ModelPartFile,
		File: &forge.ModelFile{FileID: d.FileID, Filename: d.Filename, MimeType: d.MimeType}}
}

// imageChars is what an image is counted as: about the thousand tokens
// providers charge for a mid-sized image.
const imageChars = 1000 * CharsPerToken

// IsImage tells whether a file of mimeType is an image.
func IsImage(mimeType string) bool { return strings.HasPrefix(mimeType, "image/") && len(mimeType) > 6 }

// FileChars is the estimate of a file: an image's flat cost, a text or PDF
// file's size.
func FileChars(d forge.FileData) int64 {
	if IsImage(d.MimeType) {
		return imageChars
	}
	return d.Bytes + int64(len(d.Filename)) + MessageFraming
}
