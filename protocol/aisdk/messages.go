package aisdk

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

// outPart is a part of a UIMessage as this endpoint answers it (useChat's
// shapes: text, reasoning, step-start, tool-NAME).
type outPart struct {
	Type             string          `json:"type"`
	Text             *string         `json:"text,omitempty"`
	State            string          `json:"state,omitempty"`
	ToolCallID       string          `json:"toolCallId,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           any             `json:"output,omitempty"`
	ErrorText        string          `json:"errorText,omitempty"`
	ProviderExecuted *bool           `json:"providerExecuted,omitempty"`
	MediaType        string          `json:"mediaType,omitempty"`
	Filename         string          `json:"filename,omitempty"`
	URL              string          `json:"url,omitempty"`
	Approval         *outApproval    `json:"approval,omitempty"`
}

type outApproval struct {
	ID string `json:"id"`
}

type outMessage struct {
	ID    string     `json:"id"`
	Role  string     `json:"role"`
	Parts []*outPart `json:"parts"`
}

// messages serves GET /agents/{agent}/chat/{chat}/messages: the chat's
// branch as useChat's UIMessages, so a reloaded page shows the chat and
// its next message continues it (diff matches user messages by text and
// assistant messages by these ids). A chat Forge has no session for is
// empty. The assistant message of a running turn is left out: GET
// .../stream resumes it.
func (h *handler) messages(w http.ResponseWriter, r *http.Request, tenant, agent string, seg []string) error {
	out := []*outMessage{}
	ses, err := h.session(r.Context(), tenant, agent, seg[3], false)
	if errors.Is(err, forge.ErrNotFound) {
		return writeJSON(w, out)
	}
	if err != nil {
		return err
	}
	branch, err := h.branch(r.Context(), tenant, ses)
	if err != nil {
		return err
	}
	for _, x := range branch {
		text := x.text
		user := &outMessage{ID: "user_" + x.uiID(), Role: "user", Parts: []*outPart{{Type: "text", Text: &text}}}
		for _, f := range x.turns[0].Input[0].Files {
			// Sent back as they are (by their content URL) they attach
			// the same stored files again.
			user.Parts = append(user.Parts, &outPart{Type: "file", MediaType: f.MimeType, Filename: f.Filename, URL: fileURL(f.FileID)})
		}
		out = append(out, user)
		if !x.lastTurn().Ended() {
			break
		}
		m, err := h.assistantMessage(r, tenant, ses, x)
		if err != nil {
			return err
		}
		out = append(out, m)
	}
	return writeJSON(w, out)
}

// assistantMessage folds the stored events of an exchange's turns into
// one assistant UIMessage, through the encoder the streams use.
func (h *handler) assistantMessage(r *http.Request, tenant string, ses *forge.Session, x *exchange) (*outMessage, error) {
	m := &outMessage{ID: x.uiID(), Role: "assistant", Parts: []*outPart{}}
	parts := map[string]*outPart{} // stream part id -> part
	tools := map[string]*outPart{} // tool call id -> part
	enc := &encoder{messageID: m.ID, write: func(c chunk) {
		switch c.Type {
		case "start-step":
			m.Parts = append(m.Parts, &outPart{Type: "step-start"})
		case "text-start", "reasoning-start":
			p := &outPart{Type: c.Type[:len(c.Type)-len("-start")], Text: new(string), State: "done"}
			parts[c.ID] = p
			m.Parts = append(m.Parts, p)
		case "text-delta", "reasoning-delta":
			if p := parts[c.ID]; p != nil && c.Delta != nil {
				*p.Text += *c.Delta
			}
		case "tool-input-available":
			p := &outPart{Type: "tool-" + c.ToolName, ToolCallID: c.ToolCallID, State: "input-available",
				Input: c.Input, ProviderExecuted: c.ProviderExecuted}
			tools[c.ToolCallID] = p
			m.Parts = append(m.Parts, p)
		case "tool-output-available", "tool-output-error", "tool-output-denied", "tool-approval-request":
			p := tools[c.ToolCallID]
			if p == nil {
				return
			}
			p.State = c.Type[len("tool-"):]
			switch c.Type {
			case "tool-output-available":
				p.Output = c.Output
			case "tool-output-error":
				p.ErrorText = c.ErrorText
			case "tool-approval-request":
				p.State, p.Approval = "approval-requested", &outApproval{ID: c.ApprovalID}
			}
		}
	}}
	for i, t := range x.turns {
		enc.last = i == len(x.turns)-1
		proj := protocol.NewProjector(ses.MainThreadID)
		for ev, err := range protocol.StoredTurnEvents(r.Context(), h.env.Store, tenant, ses.ID, t.ID) {
			if err == nil {
				err = proj.Apply(ev, enc.step)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func writeJSON(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(append(b, '\n'))
	return err
}
