package forum

import (
	"encoding/json"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// View turns a stored message of a forum session into the API's shape.
func View(m *forge.Message) *forge.ForumMessage {
	fm := &forge.ForumMessage{ID: m.ID, ForumID: m.SessionID, Kind: forge.ForumKindMessage, Text: textOf(m),
		Mentions: []string{}, Metadata: m.Metadata, CreatedAt: m.CreatedAt}
	if len(fm.Metadata) == 0 {
		fm.Metadata = json.RawMessage(`{}`)
	}
	if f := m.Forum; f != nil {
		fm.Kind = f.Kind
		if f.ParticipantID != "" {
			fm.Author = &forge.ForumAuthor{ParticipantID: f.ParticipantID, ActorID: f.ActorID}
		}
		if f.ReplyTo != "" {
			r := f.ReplyTo
			fm.ReplyTo = &r
		}
		if f.Mentions != nil {
			fm.Mentions = f.Mentions
		}
	}
	fm.Files = filesOf(m)
	return fm
}

// filesOf returns the attachments of a message's file parts.
func filesOf(m *forge.Message) []forge.FileData {
	var out []forge.FileData
	for _, p := range m.Parts {
		if d, ok := parts.FileOf(p); ok {
			out = append(out, d)
		}
	}
	return out
}

// fileParts are file parts of message m naming files.
func fileParts(s *Service, m *forge.Message, files []forge.FileData) []*forge.Part {
	out := make([]*forge.Part, 0, len(files))
	for _, f := range files {
		out = append(out, &forge.Part{ID: s.ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: m.SessionID, Type: forge.PartFile,
			State: forge.StateCompleted, Data: parts.FileData(f), CreatedAt: m.CreatedAt, UpdatedAt: m.CreatedAt})
	}
	return out
}

// textOf joins a message's text parts.
func textOf(m *forge.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == forge.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// nameChar reports whether c may appear in an agent name
// ([A-Za-z0-9_-]).
func nameChar(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Mentions finds the agents text mentions: '@' followed by the longest run
// of name characters that names one of agents (a prefix of the run may be
// the name: "@support," and "@support-bot" when only support is a
// member). Each agent is listed once, in order of first mention.
func Mentions(text string, agents map[string]bool) []string {
	out := []string{}
	seen := map[string]bool{}
	for i := 0; i < len(text); i++ {
		if text[i] != '@' || (i > 0 && nameChar(text[i-1])) {
			continue
		}
		j := i + 1
		for j < len(text) && nameChar(text[j]) {
			j++
		}
		for k := j; k > i+1; k-- {
			name := text[i+1 : k]
			if agents[name] {
				if !seen[name] {
					seen[name] = true
					out = append(out, name)
				}
				break
			}
		}
		i = j - 1
	}
	return out
}

// sourceOf reads a copy's source metadata.
func sourceOf(m *forge.Message) (forge.SourceMeta, bool) {
	var meta forge.SourceMeta
	if len(m.Metadata) == 0 || json.Unmarshal(m.Metadata, &meta) != nil || meta.SourceMessageID == "" {
		return meta, false
	}
	return meta, true
}

// idTime is the time-sortable part of an id (after its type prefix):
// comparing it orders records of different types by creation.
func idTime(id string) string {
	if i := strings.IndexByte(id, '_'); i >= 0 {
		return id[i+1:]
	}
	return id
}
