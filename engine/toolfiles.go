package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/parts"
)

// storeToolFiles stores the files of a tool's result (an MCP tool's
// images) as files of the tenant, checked as uploads are, and returns
// them as the tool part keeps them (data.files), in order. A file that
// cannot be kept (no file store, a type Forge does not take, a store
// failure) is named in notes instead, which the output ends with: the
// model still learns the tool returned it.
func (th *thread) storeToolFiles(p *forge.Part, res []forge.ToolFile) (kept []forge.FileData, notes string) {
	x := th.x
	var b strings.Builder
	for i, tf := range res {
		var err error
		var f *forge.File
		if x.e.files == nil {
			err = fmt.Errorf("this server keeps no files")
		} else {
			name := tf.Filename
			if name == "" {
				name = fmt.Sprintf("%s-%d%s", p.CallID, i+1, files.Extension(tf.MimeType))
			}
			// The result is recorded even when the turn is being
			// cancelled: its files too.
			f, err = files.Take(context.WithoutCancel(x.ctx), x.e.files, bytes.NewReader(tf.Data), x.e.maxFileBytes(),
				x.tenant, tf.MimeType, name, "tool_result")
		}
		if err != nil {
			x.e.log.Warn("a tool result's file was not kept", "session_id", x.session.ID, "call_id", p.CallID, "err", err)
			fmt.Fprintf(&b, "\n[%s file of %d bytes returned by the tool, not kept: %v]", tf.MimeType, len(tf.Data), err)
			continue
		}
		kept = append(kept, forge.FileData{FileID: f.ID, Filename: f.Filename, MimeType: f.MimeType, Bytes: f.Bytes})
	}
	return kept, b.String()
}

// takesImages tells whether the thread's model takes images (a model the
// server has no settings for is taken to).
func (th *thread) takesImages() bool {
	im, ok := th.x.e.models.(InputModalities)
	if !ok {
		return true
	}
	kinds, ok := im.InputModalities(th.agent.Model)
	if !ok {
		return true
	}
	for _, k := range kinds {
		if k == "image" {
			return true
		}
	}
	return false
}

// toolFileNote is what a model that takes no images is shown of an image
// a tool returned.
func toolFileNote(f *forge.ModelFile) forge.ModelPart {
	return forge.ModelPart{Type: forge.ModelPartText,
		Text: fmt.Sprintf("[The tool returned the image %s (%s, file %s); this model does not take images.]", f.Filename, f.MimeType, f.FileID)}
}

// recordFiles stores the files of a completed call's result and keeps
// them on its part (data.files, beside a truncated output's whole);
// the output, which it returns, ends with a note for each not kept.
func (th *thread) recordFiles(p *forge.Part, out string, res []forge.ToolFile) string {
	if len(res) == 0 {
		return out
	}
	kept, notes := th.storeToolFiles(p, res)
	if len(kept) > 0 {
		d := parts.ToolOf(p)
		d.Files = kept
		p.Data = parts.ToolData(d)
	}
	return out + notes
}

// maxFileBytes is the most bytes a tool result's file may have.
func (e *Engine) maxFileBytes() int64 {
	if e.cfg.MaxFileBytes > 0 {
		return e.cfg.MaxFileBytes
	}
	return files.DefaultMaxBytes
}
