package engine

import (
	"context"
	"encoding/json"

	"github.com/forge-runtime/forge"
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
		a.part.Data, _ = json.Marshal(forge.FileData{FileID: f.ID, Filename: f.Filename, MimeType: f.MimeType, Bytes: f.Bytes})
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
