package aisdk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
)

// chatBody is what useChat's DefaultChatTransport posts. Other fields (an
// app's own body) are ignored.
type chatBody struct {
	ID        string      `json:"id"`
	Messages  []uiMessage `json:"messages"`
	Trigger   string      `json:"trigger"`
	MessageID *string     `json:"messageId"`
}

type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

type uiPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// A file part (FileUIPart): the content as a data: URL, or, as this
	// endpoint hands stored attachments back, /v1/files/{id}/content.
	MediaType  string          `json:"mediaType"`
	Filename   string          `json:"filename"`
	URL        string          `json:"url"`
	ToolCallID string          `json:"toolCallId"`
	State      string          `json:"state"`
	Output     json.RawMessage `json:"output"`
	ErrorText  string          `json:"errorText"`
	Approval   *struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	} `json:"approval"`
}

func (m *uiMessage) text() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func isToolPart(p uiPart) bool {
	return strings.HasPrefix(p.Type, "tool-") || p.Type == "dynamic-tool"
}

// exchange is a user message and the assistant message answering it: on
// Forge's side the turn the message started and the turns that resolved
// its calls.
type exchange struct {
	text  string
	turns []*forge.Turn
}

// uiID is the id of the exchange's assistant UI message: its first turn's.
func (x *exchange) uiID() string { return x.turns[0].ID }

func (x *exchange) lastTurn() *forge.Turn { return x.turns[len(x.turns)-1] }

// requestExchange is an exchange as the client sent it.
type requestExchange struct {
	user      *uiMessage
	assistant *uiMessage
}

// sessionID is the Forge session of a chat: the chat id itself when it is
// a session id, else an id derived from the tenant, agent and chat id (so
// the same chat finds its session again without a lookup table).
func sessionID(tenant, agent, chat string) string {
	if strings.HasPrefix(chat, forge.PrefixSession) {
		return chat
	}
	sum := sha256.Sum256([]byte(tenant + "\x00" + agent + "\x00" + chat))
	enc := base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)
	return forge.PrefixSession + "CHAT" + enc.EncodeToString(sum[:])[:26]
}

// session returns the chat's session, creating it when create is set.
func (h *handler) session(ctx context.Context, tenant, agent, chat string, create bool) (*forge.Session, error) {
	sid := sessionID(tenant, agent, chat)
	ses, err := h.env.Store.GetSession(ctx, tenant, sid)
	if errors.Is(err, forge.ErrNotFound) && create && !strings.HasPrefix(chat, forge.PrefixSession) {
		now := h.env.Clock.Now()
		meta, _ := json.Marshal(map[string]string{"aisdk_chat_id": chat})
		ses = &forge.Session{ID: sid, Tenant: tenant, Kind: forge.KindDirect, Agent: agent, Title: "chat " + chat,
			MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: meta, CreatedAt: now, UpdatedAt: now}
		err = h.env.Store.CreateSession(ctx, ses)
		if errors.Is(err, forge.ErrConflict) { // created by a racing request
			ses, err = h.env.Store.GetSession(ctx, tenant, sid)
		}
	}
	if err != nil {
		if errors.Is(err, forge.ErrNotFound) {
			return nil, forge.Errorf(forge.ErrNotFound, "chat %q not found", chat)
		}
		return nil, err
	}
	if ses.Kind != forge.KindDirect || ses.Agent != agent {
		return nil, forge.Errorf(forge.ErrInvalid, "chat %q is not a direct session of agent %q", chat, agent)
	}
	return ses, nil
}

// branch returns the exchanges along the session's branch, oldest first.
func (h *handler) branch(ctx context.Context, tenant string, ses *forge.Session) ([]*exchange, error) {
	if ses.TipTurnID == nil {
		return nil, nil
	}
	byID := map[string]*forge.Turn{}
	opts := forge.ListOptions{Limit: 1000}
	for {
		turns, next, err := h.env.Store.ListTurns(ctx, tenant, ses.ID, opts)
		if err != nil {
			return nil, err
		}
		for _, t := range turns {
			byID[t.ID] = t
		}
		if next == "" {
			break
		}
		opts.Cursor = next
	}
	var chain []*forge.Turn
	for id := *ses.TipTurnID; id != ""; {
		t := byID[id]
		if t == nil {
			break
		}
		chain = append(chain, t)
		id = ""
		if t.PreviousTurnID != nil {
			id = *t.PreviousTurnID
		}
	}
	var out []*exchange
	for i := len(chain) - 1; i >= 0; i-- {
		t := chain[i]
		if len(t.Input) == 1 && t.Input[0].Type == forge.InputMessage {
			out = append(out, &exchange{text: t.Input[0].Text, turns: []*forge.Turn{t}})
			continue
		}
		if len(out) > 0 { // resolutions and compactions continue the exchange
			x := out[len(out)-1]
			x.turns = append(x.turns, t)
		}
	}
	return out, nil
}

// plan is what a chat request asks Forge for.
type plan struct {
	req engine.TurnRequest
	// messageID is the assistant UI message the stream writes: a new one
	// (the new turn's id, known once it starts) or the one it continues.
	messageID string
	// earlier are the turns of the continued exchange before the new one.
	earlier []*forge.Turn
	// files are the new user message's file parts, to check and attach.
	files []files.Attachment
}

// fileParts returns the file parts of m as attachments: a data: URL is
// the content; a stored file's content URL names that file; any other URL
// is refused by files.Resolve (Forge fetches nothing).
func fileParts(m *uiMessage) []files.Attachment {
	var out []files.Attachment
	for _, p := range m.Parts {
		if p.Type != "file" {
			continue
		}
		if id, ok := storedFile(p.URL); ok {
			out = append(out, files.Attachment{FileID: id})
			continue
		}
		out = append(out, files.Attachment{URL: p.URL, Filename: p.Filename})
	}
	return out
}

// fileURL is where a stored attachment's content is (the native API).
func fileURL(id string) string { return "/v1/files/" + id + "/content" }

func storedFile(u string) (string, bool) {
	id, ok := strings.CutPrefix(u, "/v1/files/")
	if !ok {
		return "", false
	}
	id, ok = strings.CutSuffix(id, "/content")
	return id, ok && id != "" && !strings.ContainsAny(id, "/?#")
}

// diff compares the messages the client sent with the session's branch
// and returns the turn to start: one new user message chains; a
// regenerated or edited earlier message forks before it; an assistant
// message last carries the client's approvals and tool outputs for the
// calls the branch left open.
func diff(body *chatBody, branch []*exchange) (*plan, error) {
	var req []requestExchange
	for i := range body.Messages {
		m := &body.Messages[i]
		switch m.Role {
		case "user":
			req = append(req, requestExchange{user: m})
		case "assistant":
			if len(req) > 0 {
				req[len(req)-1].assistant = m
			}
		case "system":
		default:
			return nil, forge.Errorf(forge.ErrInvalid, "messages[%d] has role %q: user, assistant or system", i, m.Role)
		}
	}
	if len(req) == 0 || len(body.Messages) == 0 {
		return nil, forge.Errorf(forge.ErrInvalid, "messages must hold at least one user message")
	}
	matches := func(i int) bool {
		if i >= len(branch) || req[i].user.text() != branch[i].text {
			return false
		}
		return req[i].assistant == nil || req[i].assistant.ID == branch[i].uiID()
	}
	last := body.Messages[len(body.Messages)-1]
	if last.Role == "assistant" {
		n := len(req)
		for i := 0; i < n; i++ {
			if !matches(i) {
				return nil, forge.Errorf(forge.ErrConflict, "message %d differs from the chat as Forge keeps it: send a user message to fork there", i)
			}
		}
		if n != len(branch) {
			return nil, forge.Errorf(forge.ErrConflict, "the chat has moved on since this assistant message: reload it")
		}
		x := branch[n-1]
		input, err := resolutions(&last, x.lastTurn())
		if err != nil {
			return nil, err
		}
		prev := x.lastTurn().ID
		return &plan{req: engine.TurnRequest{Input: input, PreviousTurnID: &prev}, messageID: x.uiID(), earlier: x.turns}, nil
	}
	m := len(req) - 1
	for i := 0; i < m; i++ {
		if !matches(i) {
			return nil, forge.Errorf(forge.ErrConflict, "message %d differs from the chat as Forge keeps it: edit a message by resending the chat up to it", i)
		}
	}
	if m > len(branch) {
		return nil, forge.Errorf(forge.ErrConflict, "the chat holds messages Forge does not have: reload it")
	}
	text := req[m].user.text()
	if strings.TrimSpace(text) == "" {
		return nil, forge.Errorf(forge.ErrInvalid, "the last user message has no text")
	}
	p := &plan{req: engine.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: text}}}, files: fileParts(req[m].user)}
	switch {
	case m > 0:
		prev := branch[m-1].lastTurn().ID
		p.req.PreviousTurnID = &prev // the tip (a chain) or an earlier turn (a fork)
	case len(branch) > 0:
		p.req.NewRoot = true // the first message edited or regenerated
	}
	return p, nil
}

// resolutions reads the client's answers to the calls turn left open
// from the tool parts of the assistant message.
func resolutions(m *uiMessage, t *forge.Turn) ([]forge.Input, error) {
	open := map[string]forge.RequiredAction{}
	if t.Status == forge.TurnDone {
		for _, a := range t.RequiredActions {
			open[a.CallID] = a
		}
	}
	var out []forge.Input
	for _, p := range m.Parts {
		a, ok := open[p.ToolCallID]
		if !isToolPart(p) || !ok {
			continue
		}
		switch {
		case a.Type == forge.ActionApproval && p.Approval != nil && p.Approval.Approved != nil:
			out = append(out, forge.Input{Type: forge.InputApproval, CallID: a.CallID, Approved: p.Approval.Approved, Reason: p.Approval.Reason})
		case a.Type == forge.ActionApproval && p.State == "output-denied":
			no := false
			out = append(out, forge.Input{Type: forge.InputApproval, CallID: a.CallID, Approved: &no})
		case a.Type == forge.ActionClientTool && p.State == "output-available":
			s := outputString(p.Output)
			out = append(out, forge.Input{Type: forge.InputToolResult, CallID: a.CallID, Output: &s})
		case a.Type == forge.ActionClientTool && p.State == "output-error":
			s := p.ErrorText
			out = append(out, forge.Input{Type: forge.InputToolResult, CallID: a.CallID, Output: &s, IsError: true})
		}
	}
	if len(out) == 0 {
		return nil, forge.Errorf(forge.ErrInvalid, "the last message is the assistant's but answers none of its open calls: add a tool output or an approval response, or send a user message")
	}
	return out, nil
}

// outputString is a client tool's output as the model sees it: a string
// as is, anything else as JSON.
func outputString(raw json.RawMessage) string {
	v := bytes.TrimSpace(raw)
	var s string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
		return s
	}
	if len(v) == 0 {
		return "null"
	}
	return string(v)
}
