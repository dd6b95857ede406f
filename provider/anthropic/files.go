package anthropic

import (
	"encoding/base64"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/forge-runtime/forge"
)

// fileBlock is an attached file in the Messages API's format: an image
// block or, for a PDF, a document block, each with its bytes in base64
// (Forge never hands the API a URL to fetch). A file whose bytes the
// engine did not fill is named in a text block.
func fileBlock(f *forge.ModelFile) sdk.ContentBlockParamUnion {
	switch {
	case f == nil || f.Data == nil:
		note := "[an attached file]"
		if f != nil {
			note = "[attached file " + f.Filename + " (" + f.MimeType + ")]"
		}
		return sdk.NewTextBlock(note)
	case strings.HasPrefix(f.MimeType, "image/"):
		return sdk.NewImageBlockBase64(f.MimeType, base64.StdEncoding.EncodeToString(f.Data))
	}
	block := sdk.NewDocumentBlock(sdk.Base64PDFSourceParam{Data: base64.StdEncoding.EncodeToString(f.Data)})
	if f.Filename != "" {
		block.OfDocument.Title = sdk.String(f.Filename)
	}
	return block
}
