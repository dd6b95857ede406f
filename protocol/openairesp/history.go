package openairesp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/protocol/internal/history"
)

// Resent history (API.md, "Stateless clients and Chat Completions"): the
// items before the new input repeat the conversation, as every SDK's
// default multi-turn sends it. They are matched against what Forge holds
// without reading the session: by Forge's own item ids where the client
// kept them (an item id names its turn, so one read finds it), else by
// the conversation's key (history.Book, as Chat Completions). The match
// chains or forks from the turn found; a conversation never seen starts a
// new session seeded with it (imported, not run).

// historyScope is the idempotency-record scope of the conversations
// responses ended.
const historyScope = "openai:responses-history"

func (h *handler) book() history.Book {
	return history.Book{Env: h.env, Scope: historyScope, Seed: "forge responses"}
}

// entry is one input item as Forge reads it.
type entry struct {
	index int    // in the request's input
	kind  string // user, assistant, reasoning, function_call, function_call_output, mcp_call, mcp_approval_request, mcp_approval_response, mcp_list_tools, item_reference
	id    string // the item's id as sent
	text  string // an assistant message's text
	call  history.Call
	in    forge.Input // user, function_call_output, mcp_approval_response
	atts  []files.Attachment
}

func (e *entry) resolution() bool {
	return e.kind == "function_call_output" || e.kind == "mcp_approval_response"
}

// splitInput cuts the items into the history Forge must already hold
// (prefix) and the new input at the end: one user message, or the
// function_call_output and mcp_approval_response items answering open
// calls.
func splitInput(entries []entry) (prefix []entry, input []forge.Input, atts []files.Attachment, err error) {
	last := len(entries) - 1
	switch {
	case entries[last].kind == "user":
		if last > 0 && entries[last-1].resolution() {
			return nil, nil, nil, invalid("input", "input mixes a message with function_call_output or mcp_approval_response items: answer the open calls first, then send the message")
		}
		return entries[:last], []forge.Input{entries[last].in}, entries[last].atts, nil
	case !entries[last].resolution():
		return nil, nil, nil, invalid("input", "input ends with a %s item: there is nothing to answer (end it with a user message, function_call_output or mcp_approval_response)", entries[last].kind)
	}
	start := last
	for start > 0 && entries[start-1].resolution() {
		start--
	}
	for _, e := range entries[start:] {
		input = append(input, e.in)
	}
	return entries[:start], input, nil, nil
}

// canonical is a conversation's items as history messages (the form its
// key is made of): a user message; the items of one answer (its texts
// joined by a blank line, its client calls and approval requests as tool
// calls; reasoning and the tools Forge ran are not part of it); a call's
// output or approval as a tool message. ok is false when an item has no
// content to compare (an item_reference). at maps each message to the
// index of its first item.
func canonical(entries []entry) (msgs []history.Message, at []int, ok bool) {
	var cur *history.Message
	flush := func() {
		if cur != nil {
			msgs = append(msgs, *cur)
			cur = nil
		}
	}
	for _, e := range entries {
		switch e.kind {
		case "item_reference":
			return nil, nil, false
		case "user":
			flush()
			m := history.Message{Role: "user", Text: e.in.Text, Atts: e.atts}
			m.Files = attachmentNames(e.atts)
			msgs, at = append(msgs, m), append(at, e.index)
		case "function_call_output", "mcp_approval_response":
			flush()
			msgs, at = append(msgs, toolMessage(e.in)), append(at, e.index)
		default: // a piece of an answer
			if cur == nil {
				cur = &history.Message{Role: "assistant"}
				at = append(at, e.index)
			}
			switch e.kind {
			case "assistant":
				if e.text != "" {
					if cur.Text != "" {
						cur.Text += "\n\n"
					}
					cur.Text += e.text
				}
			case "function_call", "mcp_approval_request":
				cur.ToolCalls = append(cur.ToolCalls, e.call)
			}
		}
	}
	flush()
	return msgs, at, true
}

// toolMessage is a resolution as a history message.
func toolMessage(in forge.Input) history.Message {
	m := history.Message{Role: "tool", ToolCallID: in.CallID}
	switch in.Type {
	case forge.InputToolResult:
		if in.Output != nil {
			m.Text = *in.Output
		}
	case forge.InputApproval:
		m.Text = "denied"
		if in.Approved != nil && *in.Approved {
			m.Text = "approved"
		}
	}
	return m
}

// attachmentName is an attachment in a message's identity: its file id,
// or a hash of its content as sent.
func attachmentName(a files.Attachment) string {
	if a.FileID != "" {
		return "id:" + a.FileID
	}
	s := a.URL
	if a.Data != nil {
		s = *a.Data
	}
	sum := sha256.Sum256([]byte(s))
	return "data:" + hex.EncodeToString(sum[:])
}

// answer is a response's output as history messages: one assistant
// message (with the calls it leaves to the client).
func answer(resp *Response) history.Message {
	m := history.Message{Role: "assistant"}
	for _, it := range resp.Output {
		switch it := it.(type) {
		case *messageItem:
			for _, c := range it.Content {
				if c.Text == "" {
					continue
				}
				if m.Text != "" {
					m.Text += "\n\n"
				}
				m.Text += c.Text
			}
		case *functionCallItem:
			m.ToolCalls = append(m.ToolCalls, history.Call{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		case *approvalRequestItem:
			m.ToolCalls = append(m.ToolCalls, history.Call{ID: it.ID, Name: "mcp_approval:" + it.Name, Arguments: it.Arguments})
		}
	}
	return m
}

// Item ids. An output item's id names the turn it belongs to and its
// part: KIND_TURN_PART (TURN and PART without their prefixes), so an id a
// client sends back (an item_reference, or an item of an earlier
// response it resends) is found with one read of the turn, however long
// the session. An mcp_approval_request's id stays the call id, as the
// mcp_approval_response that answers it names it (API.md).
var itemKinds = []string{"msg", "rs", "mcp", "fc", "fco", "mcpa"}

// itemID is the id of an item of turnID made of part (a part, message or
// call id, or an index).
func itemID(kind, turnID, part string) string {
	_, p, ok := strings.Cut(part, "_")
	if !ok {
		p = part
	}
	return kind + "_" + strings.TrimPrefix(turnID, forge.PrefixTurn) + "_" + p
}

// itemTurn is the turn an item id of Forge's names, or "".
func itemTurn(id string) string {
	kind, rest, ok := strings.Cut(id, "_")
	if !ok {
		return ""
	}
	known := false
	for _, k := range itemKinds {
		known = known || k == kind
	}
	turn, part, ok := strings.Cut(rest, "_")
	if !known || !ok || turn == "" || part == "" || strings.Contains(part, "_") {
		return ""
	}
	return forge.PrefixTurn + turn
}

// resolved is where a request with resent history continues.
type resolved struct {
	ses *forge.Session
	req engine.TurnRequest
	// conv is the conversation before the new input, when every item of
	// it has content (else nil, and nothing is recorded).
	conv  []history.Message
	input []forge.Input
	// whole: conv is all the branch the turn continues holds.
	whole bool
	// record: the conversation is recorded when the response ends.
	record bool
	// inputFiles name the new message's attachments in its identity.
	inputFiles []string
}

func attachmentNames(atts []files.Attachment) []string {
	var out []string
	for _, a := range atts {
		out = append(out, attachmentName(a))
	}
	return out
}

// continueHistory resolves a request whose input repeats history (prefix
// not empty): prev and conv are the request's previous_response_id and
// conversation. Nothing is stored unless a new session is made for a
// conversation never seen.
func (h *handler) continueHistory(ctx context.Context, tenant, model string, prev *string, conv string, prefix []entry, input []forge.Input, meta map[string]string) (*resolved, error) {
	msgs, at, complete := canonical(prefix)
	r := &resolved{conv: msgs, input: input, record: complete, whole: complete}
	// The session the request names, if any: a match must be in it.
	var named *forge.Session
	if prev != nil || conv != "" {
		ses, req, err := h.target(ctx, tenant, model, prev, conv, meta)
		if err != nil {
			return nil, err
		}
		named, r.req = ses, req
	}
	// By id: the last item carrying one of Forge's names its turn, unless
	// the client holds messages after it Forge has not seen.
	for i := len(prefix) - 1; i >= 0; i-- {
		e := &prefix[i]
		if e.kind == "user" || e.resolution() {
			if e.id == "" || itemTurn(e.id) == "" {
				break
			}
		}
		tid := itemTurn(e.id)
		if tid == "" {
			if e.kind == "item_reference" {
				return nil, newError(http.StatusNotFound, "input["+itoa(e.index)+"].id", "item_not_found", "item %q not found: an item_reference names an item of an earlier response of yours", e.id)
			}
			continue
		}
		t, err := h.turn(ctx, tenant, tid)
		if err != nil {
			if _, gone := h.env.Store.GetTurnByID(ctx, tenant, tid); gone == nil && e.kind != "item_reference" {
				continue // a deleted response's item: its content still counts
			}
			return nil, notFound(err, "input["+itoa(e.index)+"].id", "item_not_found", "item %q not found: it names no response of yours", e.id)
		}
		return h.chain(ctx, tenant, model, named, r, t.SessionID, t.ID, e.index)
	}
	if !complete {
		for _, e := range prefix {
			if e.kind == "item_reference" {
				return nil, newError(http.StatusBadRequest, "input["+itoa(e.index)+"]", "conversation_mismatch",
					"input holds messages after item_reference %q that Forge has not seen: resend the conversation as Forge answered it, or send only the new input", e.id)
			}
		}
	}
	// By content.
	sid := ""
	if named != nil {
		sid = named.ID
	}
	agent := model
	if named != nil {
		agent = named.Agent
	}
	if agent == "" {
		return nil, invalid("model", "model is required: the name of a Forge agent")
	}
	rec, ok, err := h.book().Find(ctx, tenant, agent, sid, msgs)
	if err != nil {
		return nil, err
	}
	if ok {
		r2, err := h.chain(ctx, tenant, model, named, r, rec.SessionID, rec.TurnID, prefix[0].index)
		if err == nil {
			r2.whole = r2.whole && rec.Whole
			return r2, nil
		}
		if !errors.Is(err, forge.ErrNotFound) {
			return nil, err
		}
		// The session went: the conversation is imported again.
	}
	if named != nil {
		return nil, newError(http.StatusBadRequest, "input", "conversation_mismatch",
			"the %d items before the new input are not a conversation %q holds: resend the items as Forge answered them, or send only the new input", len(prefix), named.ID)
	}
	if input[0].Type != forge.InputMessage {
		return nil, newError(http.StatusBadRequest, "input", "history_not_found",
			"Forge has not seen this conversation, and one ending with function_call_output or mcp_approval_response items cannot be imported (the calls they answer were never Forge's): import it ending with a user message, or continue a conversation as Forge answered it")
	}
	for i, m := range msgs {
		for _, c := range m.ToolCalls {
			if strings.HasPrefix(c.Name, "mcp_approval:") {
				return nil, newError(http.StatusBadRequest, "input["+itoa(at[i])+"]", "history_not_found",
					"Forge has not seen this conversation, and approvals of a conversation Forge did not run cannot be imported")
			}
		}
	}
	if _, err := h.env.Store.GetAgent(ctx, tenant, model); err != nil {
		return nil, notFound(err, "model", "model_not_found", "The model `%s` does not exist: models are Forge agents (GET /openai/v1/models)", model)
	}
	now := h.env.Clock.Now()
	metaJSON, _ := json.Marshal(meta)
	ses := &forge.Session{
		ID: h.env.IDs.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: model,
		MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: metaJSON, CreatedAt: now, UpdatedAt: now,
	}
	imported, err := history.Import(h.env, ses, msgs, "input", func(i int) int {
		if i < len(at) {
			return at[i]
		}
		return prefix[len(prefix)-1].index + 1
	})
	if err != nil {
		return nil, err
	}
	if err := h.env.Store.CreateSession(ctx, ses); err != nil {
		return nil, err
	}
	if err := h.env.Store.AppendLoose(ctx, &forge.LooseAppend{Tenant: tenant, SessionID: ses.ID, Messages: imported}); err != nil {
		return nil, err
	}
	r.ses = ses
	return r, nil
}

// chain continues r from turnID of session sid, found for the item at
// index: in the named session when the request names one (where
// previous_response_id, when given, stays the turn it continues).
func (h *handler) chain(ctx context.Context, tenant, model string, named *forge.Session, r *resolved, sid, turnID string, index int) (*resolved, error) {
	if named != nil {
		if sid != named.ID {
			return nil, newError(http.StatusBadRequest, "input["+itoa(index)+"]", "conversation_mismatch",
				"input repeats items of another conversation than %q, which the request names", named.ID)
		}
		r.ses = named
		if r.req.PreviousTurnID == nil {
			r.req.PreviousTurnID = &turnID
		}
		return r, nil
	}
	ses, err := h.env.Store.GetSession(ctx, tenant, sid)
	if err != nil {
		return nil, err
	}
	if ses.Kind != forge.KindDirect {
		return nil, invalid("input", "input repeats items of a %s session; responses go to direct sessions only", ses.Kind)
	}
	if model != "" && model != ses.Agent {
		return nil, invalid("model", "model %q does not match the conversation's agent %q: a conversation talks to one agent", model, ses.Agent)
	}
	r.ses, r.req.PreviousTurnID = ses, &turnID
	return r, nil
}

// remember records the conversation a response ended, so that a client
// resending it without ids continues from its turn.
func (h *handler) remember(ctx context.Context, tenant string, r *resolved, turnID string, resp *Response) {
	if r == nil || !r.record || (resp.Status != "completed" && resp.Status != "incomplete") {
		return
	}
	conv := append([]history.Message(nil), r.conv...)
	for _, in := range r.input {
		if in.Type == forge.InputMessage {
			conv = append(conv, history.Message{Role: "user", Text: in.Text, Files: r.inputFiles})
			continue
		}
		conv = append(conv, toolMessage(in))
	}
	h.book().Remember(ctx, tenant, r.ses, turnID, r.whole, append(conv, answer(resp)))
}
