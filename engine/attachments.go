package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// attachment is a file of the turn's message: stored already (file), or
// inline content to store when the turn begins (pending).
type attachment struct {
	input forge.InputFile
	file  *forge.File // nil while pending
	part  *forge.Part
}

// resolveAttachments looks up the files the message names by id (another
// tenant's, or a deleted one, is not found) and checks that the agent's
// model takes each kind of file. Nothing is stored.
func (e *Engine) resolveAttachments(ctx context.Context, tenant string, agent *forge.Agent, req TurnRequest) ([]*attachment, error) {
	var out []*attachment
	for _, in := range req.Input {
		if in.Type != forge.InputMessage {
			continue
		}
		for _, f := range in.Files {
			if e.files == nil {
				return nil, forge.Errorf(forge.ErrInvalid, "this server keeps no files: a message cannot carry attachments")
			}
			a := &attachment{input: f}
			if f.Pending == nil {
				stored, err := e.files.GetFile(ctx, tenant, f.FileID)
				if err != nil {
					return nil, err
				}
				a.file = stored
				a.input = forge.InputFile{FileID: stored.ID, Filename: stored.Filename, MimeType: stored.MimeType, Bytes: stored.Bytes}
			} else {
				pf := f.Pending.File()
				a.input = forge.InputFile{Filename: pf.Filename, MimeType: pf.MimeType, Bytes: pf.Bytes, Pending: f.Pending}
			}
			out = append(out, a)
		}
	}
	if err := e.checkModalities(agent.Model, out); err != nil {
		return nil, err
	}
	return out, nil
}

// fileParts appends one file part per attachment to msg.
func (th *thread) fileParts(msg *forge.Message, atts []*attachment) {
	for _, a := range atts {
		p := th.newPart(msg, forge.PartFile)
		p.State = forge.StateCompleted
		a.part = p
		if a.file != nil {
			a.fill(a.file)
		}
		msg.Parts = append(msg.Parts, p)
	}
}

// fill writes the stored file into the attachment's part.
func (a *attachment) fill(f *forge.File) {
	a.file = f
	a.input = forge.InputFile{FileID: f.ID, Filename: f.Filename, MimeType: f.MimeType, Bytes: f.Bytes}
	if a.part != nil {
		a.part.Data = parts.FileData(forge.FileData{FileID: f.ID, Filename: f.Filename, MimeType: f.MimeType, Bytes: f.Bytes})
	}
}

// storePending stores the attachments sent inline and returns the ids of
// the files it made (to delete should the turn not begin).
func (e *Engine) storePending(ctx context.Context, tenant string, atts []*attachment) ([]string, error) {
	var made []string
	for _, a := range atts {
		if a.input.Pending == nil {
			continue
		}
		f, err := a.input.Pending.Store(ctx, e.files)
		if err != nil {
			e.deleteFiles(ctx, tenant, made)
			return nil, err
		}
		made = append(made, f.ID)
		a.fill(f)
	}
	return made, nil
}

// deleteFiles deletes the files a refused turn stored.
func (e *Engine) deleteFiles(ctx context.Context, tenant string, ids []string) {
	for _, id := range ids {
		if err := e.files.DeleteFile(context.WithoutCancel(ctx), tenant, id); err != nil {
			e.log.Warn("deleting a refused turn's attachment failed", "file_id", id, "err", err)
		}
	}
}

// inputWithFiles is the turn's stored input: the message's files as
// stored (ids, names, types, sizes), never their bytes.
func inputWithFiles(input []forge.Input, atts []*attachment) []forge.Input {
	if len(atts) == 0 {
		return input
	}
	out := make([]forge.Input, len(input))
	copy(out, input)
	for i := range out {
		if out[i].Type != forge.InputMessage {
			continue
		}
		files := make([]forge.InputFile, len(atts))
		for j, a := range atts {
			files[j] = a.input
			files[j].Pending = nil
		}
		out[i].Files = files
	}
	return out
}

// InputModalities is the optional interface of forge.Models that tells
// which kinds of input a model takes ("text", "image", "pdf"); ok is
// false for a model it knows nothing about, which is taken to take every
// kind.
type InputModalities interface {
	InputModalities(model string) (kinds []string, ok bool)
}

// fileKind is the modality a file is given to a model as.
func fileKind(mimeType string) string {
	switch {
	case mimeType == "application/pdf":
		return "pdf"
	case len(mimeType) > 6 && mimeType[:6] == "image/":
		return "image"
	}
	return "text"
}

// checkModalities refuses attachments the model cannot take
// (unsupported_content), before anything is stored. Text files become
// text, which every model takes.
func (e *Engine) checkModalities(model string, atts []*attachment) error {
	if len(atts) == 0 {
		return nil
	}
	im, ok := e.models.(InputModalities)
	if !ok {
		return nil
	}
	kinds, ok := im.InputModalities(model)
	if !ok {
		return nil
	}
	takes := map[string]bool{"text": true}
	for _, k := range kinds {
		takes[k] = true
	}
	for _, a := range atts {
		if k := fileKind(a.input.MimeType); !takes[k] {
			return forge.Errorf(forge.ErrUnsupportedContent, "model %s does not take %s input (file %q is %s); it takes %v",
				model, k, a.input.Filename, a.input.MimeType, kinds)
		}
	}
	return nil
}

// fileCache holds the files a turn's model calls send, read once.
type fileCache struct {
	mu    sync.Mutex // guards the following
	byID  map[string]*forge.ModelFile
	gone  map[string]bool
	texts map[string]string
}

// maxTextFileBytes is the most of a text file the model is sent; the
// rest is cut with a note (a text file is sent as text, in the context
// window).
const maxTextFileBytes = 1 << 20

// withFiles returns msgs with each file's content, read through the
// store: an image or a PDF with its bytes, a text file as a text part
// headed by its name, a deleted file as a note saying so; the files of a
// tool result likewise (an image to a model that takes none: a note).
// Messages with no file are shared with msgs; the others are copies (the
// model view's arrays are reused from step to step and must stay without
// bytes).
func (th *thread) withFiles(msgs []forge.ModelMessage) ([]forge.ModelMessage, error) {
	x := th.x
	var out []forge.ModelMessage
	images, asked := false, false // whether the model takes images, once asked
	for i := range msgs {
		m := &msgs[i]
		has := false
		for j := range m.Parts {
			if m.Parts[j].Type == forge.ModelPartFile || len(m.Parts[j].Content) > 0 {
				has = true
				break
			}
		}
		if !has {
			continue
		}
		if out == nil {
			out = append([]forge.ModelMessage(nil), msgs...)
		}
		mparts := make([]forge.ModelPart, 0, len(m.Parts))
		for _, p := range m.Parts {
			var err error
			if len(p.Content) > 0 {
				content := make([]forge.ModelPart, 0, len(p.Content))
				for _, c := range p.Content {
					if c.Type == forge.ModelPartFile && c.File != nil {
						if !asked {
							images, asked = th.takesImages(), true
						}
						if !images {
							c = toolFileNote(c.File)
						} else if c, err = x.loadFile(c.File); err != nil {
							return nil, err
						}
					}
					content = append(content, c)
				}
				p.Content = content
			}
			if p.Type == forge.ModelPartFile && p.File != nil {
				if p, err = x.loadFile(p.File); err != nil {
					return nil, err
				}
			}
			mparts = append(mparts, p)
		}
		out[i] = forge.ModelMessage{Role: m.Role, Parts: mparts}
	}
	if out == nil {
		return msgs, nil
	}
	return out, nil
}

// loadFile is the model part a file becomes.
func (x *execution) loadFile(f *forge.ModelFile) (forge.ModelPart, error) {
	c := &x.files
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID, c.gone, c.texts = map[string]*forge.ModelFile{}, map[string]bool{}, map[string]string{}
	}
	name := f.Filename
	if name == "" {
		name = f.FileID
	}
	removed := forge.ModelPart{Type: forge.ModelPartText,
		Text: fmt.Sprintf("[The file %s (%s) was removed: its content is no longer available.]", name, f.FileID)}
	switch {
	case c.gone[f.FileID]:
		return removed, nil
	case c.byID[f.FileID] != nil:
		return forge.ModelPart{Type: forge.ModelPartFile, File: c.byID[f.FileID]}, nil
	}
	if t, ok := c.texts[f.FileID]; ok {
		return forge.ModelPart{Type: forge.ModelPartText, Text: t}, nil
	}
	if x.e.files == nil {
		c.gone[f.FileID] = true
		return removed, nil
	}
	text := fileKind(f.MimeType) == "text"
	limit := int64(-1)
	if text {
		limit = maxTextFileBytes
	}
	data, err := x.readFile(f.FileID, limit)
	if errors.Is(err, forge.ErrNotFound) {
		c.gone[f.FileID] = true
		return removed, nil
	}
	if err != nil {
		return forge.ModelPart{}, fmt.Errorf("reading file %s for the model: %w", f.FileID, err)
	}
	if text {
		t := "File: " + name + "\n\n" + string(data)
		if int64(len(data)) > maxTextFileBytes {
			t = "File: " + name + " (its first MiB)\n\n" + string(data[:maxTextFileBytes])
		}
		c.texts[f.FileID] = t
		return forge.ModelPart{Type: forge.ModelPartText, Text: t}, nil
	}
	mf := &forge.ModelFile{FileID: f.FileID, Filename: f.Filename, MimeType: f.MimeType, Data: data}
	c.byID[f.FileID] = mf
	return forge.ModelPart{Type: forge.ModelPartFile, File: mf}, nil
}

// readFile reads a file's bytes (up to limit+1 when limit >= 0).
func (x *execution) readFile(id string, limit int64) ([]byte, error) {
	rc, err := x.e.files.FileContent(x.ctx, x.tenant, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var r io.Reader = rc
	if limit >= 0 {
		r = io.LimitReader(rc, limit+1)
	}
	return io.ReadAll(r)
}

// attachmentsDir is where a session's attachments appear in its sandbox.
const attachmentsDir = "attachments"

// materializeAttachments writes the files the thread's messages attach
// into the sandbox's attachments/ directory (API.md: readable by sandbox
// tools), each once: a file already there is left alone. Two files with
// one name get their ids in front. A file that cannot be read (deleted
// since) is skipped: the model is told so in its view.
func (th *thread) materializeAttachments(sb forge.Sandbox) {
	e, x := th.x.e, th.x
	if e.files == nil {
		return
	}
	seen := map[string]string{} // name -> file id
	var root *os.Root           // the workspace, opened for the first file
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	for _, m := range th.history {
		for _, p := range m.Parts {
			d, ok := parts.FileOf(p)
			if !ok {
				continue
			}
			name := filepath.Base(filepath.Clean("/" + d.Filename))
			if name == "/" || name == "." || name == "" {
				name = d.FileID
			}
			if id, ok := seen[name]; ok && id != d.FileID {
				name = d.FileID + "-" + name
			}
			if _, ok := seen[name]; ok {
				continue
			}
			seen[name] = d.FileID
			if root == nil {
				// The workspace is the agent's: through os.Root no
				// symlink it left (attachments/ itself, or a file) leads a
				// write outside it.
				var err error
				if root, err = os.OpenRoot(sb.Dir()); err != nil {
					e.log.Warn("attachments not written to the sandbox", "session_id", x.session.ID, "err", err)
					return
				}
			}
			if err := writeAttachment(x.ctx, e.files, x.tenant, d.FileID, root, name); err != nil {
				e.log.Warn("attachment not written to the sandbox", "session_id", x.session.ID, "file_id", d.FileID, "err", err)
			}
		}
	}
}

// writeAttachment writes file id as attachments/name in root, unless
// something is there already.
func writeAttachment(ctx context.Context, fs forge.FileStore, tenant, id string, root *os.Root, name string) error {
	path := filepath.Join(attachmentsDir, name)
	if _, err := root.Lstat(path); err == nil {
		return nil // there already (or replaced by the agent: its business)
	}
	if err := root.MkdirAll(attachmentsDir, 0o755); err != nil {
		return err
	}
	rc, err := fs.FileContent(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer rc.Close()
	// Written aside and renamed: a reader never sees half a file.
	tmp := filepath.Join(attachmentsDir, ".attachment-"+id)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		_ = root.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return root.Rename(tmp, path)
}
