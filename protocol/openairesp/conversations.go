package openairesp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/history"
)

// The Conversations API over sessions (API.md, "Stateless clients and
// Chat Completions"; docs/decisions.md, "Conversations"). A conversation
// is a session, and a session's id is a conversation id. Since a session
// talks to one agent and POST /conversations names none, a conversation
// created there is pending until it is bound to a session: by its first
// response (conversation: id; the session then gets the conversation's
// id and its initial items, imported), or by items a client adds that
// repeat a conversation Forge answered (the Agents SDK's
// OpenAIConversationsSession runs without conversation and then adds the
// run's items). The pending state is an idempotency record (scope
// conversationScope, key the id) whose completion binds it, once.

const conversationScope = "openai:conversation"

// pendingConversation is a conversation before it is bound.
type pendingConversation struct {
	Metadata  map[string]string `json:"metadata,omitempty"`
	Items     []history.Message `json:"items,omitempty"`
	CreatedAt int64             `json:"created_at"`
}

// boundConversation is the completion of a pending conversation.
type boundConversation struct {
	SessionID string            `json:"session_id,omitempty"`
	Deleted   bool              `json:"deleted,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	CreatedAt int64             `json:"created_at"`
}

// conversation is a conversation as read: its session, or pending.
type conversation struct {
	id      string
	ses     *forge.Session
	pending *pendingConversation
	created int64
	meta    map[string]string
}

type conversationObject struct {
	ID        string            `json:"id"`
	Object    string            `json:"object"`
	CreatedAt int64             `json:"created_at"`
	Metadata  map[string]string `json:"metadata"`
}

func (c *conversation) object() conversationObject {
	meta := c.meta
	if meta == nil {
		meta = map[string]string{}
	}
	return conversationObject{ID: c.id, Object: "conversation", CreatedAt: c.created, Metadata: meta}
}

// sessionMetadata is a session's metadata as OpenAI's (string values).
func sessionMetadata(raw json.RawMessage) map[string]string {
	var all map[string]any
	_ = json.Unmarshal(raw, &all)
	out := map[string]string{}
	for k, v := range all {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func conversationNotFound(id string) error {
	return newError(http.StatusNotFound, "", "not_found", "Conversation with id '%s' not found.", id)
}

// conversation reads conversation id.
func (h *handler) conversation(ctx context.Context, tenant, id string) (*conversation, error) {
	ses, err := h.env.Store.GetSession(ctx, tenant, id)
	if err == nil {
		if ses.Kind != forge.KindDirect {
			return nil, invalid("conversation", "%q is a %s session; conversations are direct sessions", id, ses.Kind)
		}
		return &conversation{id: id, ses: ses, created: ses.CreatedAt.Unix(), meta: sessionMetadata(ses.Metadata)}, nil
	}
	if !errors.Is(err, forge.ErrNotFound) {
		return nil, err
	}
	rec, err := h.env.Store.GetIdempotency(ctx, tenant, conversationScope, id)
	if errors.Is(err, forge.ErrNotFound) {
		return nil, conversationNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	if rec.Status == 0 {
		var p pendingConversation
		_ = json.Unmarshal(rec.Body, &p)
		return &conversation{id: id, pending: &p, created: p.CreatedAt, meta: p.Metadata}, nil
	}
	var b boundConversation
	_ = json.Unmarshal(rec.Body, &b)
	if b.Deleted || b.SessionID == "" {
		return nil, conversationNotFound(id)
	}
	ses, err = h.env.Store.GetSession(ctx, tenant, b.SessionID)
	if errors.Is(err, forge.ErrNotFound) {
		return nil, conversationNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	return &conversation{id: id, ses: ses, created: b.CreatedAt, meta: b.Metadata}, nil
}

// bind completes a pending conversation with sid (or its deletion): the
// first binding wins, and is returned.
func (h *handler) bind(ctx context.Context, tenant string, c *conversation, sid string, deleted bool) (boundConversation, error) {
	body, _ := json.Marshal(boundConversation{SessionID: sid, Deleted: deleted, Metadata: c.meta, CreatedAt: c.created})
	rec, err := h.env.Store.CompleteIdempotency(ctx, tenant, conversationScope, c.id, http.StatusOK, body)
	var b boundConversation
	if err == nil {
		err = json.Unmarshal(rec.Body, &b)
	}
	return b, err
}

// startPending binds a pending conversation to a new session of agent
// (its first response): the session gets the conversation's id, metadata
// and initial items.
func (h *handler) startPending(ctx context.Context, tenant, agent string, c *conversation) (*forge.Session, error) {
	if agent == "" {
		return nil, invalid("model", "model is required: conversation %q has no response yet, and its first one names its agent", c.id)
	}
	if _, err := h.env.Store.GetAgent(ctx, tenant, agent); err != nil {
		return nil, notFound(err, "model", "model_not_found", "The model `%s` does not exist: models are Forge agents (GET /openai/v1/models)", agent)
	}
	now := h.env.Clock.Now()
	metaJSON, _ := json.Marshal(c.object().Metadata)
	ses := &forge.Session{
		ID: c.id, Tenant: tenant, Kind: forge.KindDirect, Agent: agent,
		MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: metaJSON, CreatedAt: now, UpdatedAt: now,
	}
	imported, err := history.Import(h.env, ses, c.pending.Items, "conversation.items", nil)
	if err != nil {
		return nil, err
	}
	bound, err := h.bind(ctx, tenant, c, c.id, false)
	switch {
	case err != nil:
		return nil, err
	case bound.Deleted:
		return nil, conversationNotFound(c.id)
	case bound.SessionID != c.id:
		return h.env.Store.GetSession(ctx, tenant, bound.SessionID) // bound by another request meanwhile
	}
	if err := h.env.Store.CreateSession(ctx, ses); err != nil {
		if errors.Is(err, forge.ErrConflict) {
			return h.env.Store.GetSession(ctx, tenant, c.id)
		}
		return nil, err
	}
	if len(imported) > 0 {
		if err := h.env.Store.AppendLoose(ctx, &forge.LooseAppend{Tenant: tenant, SessionID: ses.ID, Messages: imported}); err != nil {
			return nil, err
		}
	}
	return ses, nil
}

// parseItemList reads an items array of a conversation request into
// history messages (items with content only: no item_reference).
func parseItemList(raw json.RawMessage, param string) ([]history.Message, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return nil, invalid(param, "%s must be an array of items", param)
	}
	if len(items) > maxInputItems {
		return nil, invalid(param, "%s holds %d items; at most %d", param, len(items), maxInputItems)
	}
	entries := make([]entry, 0, len(items))
	for i, it := range items {
		e, err := parseItem(i, it)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				ae.Param = strings.Replace(ae.Param, "input", param, 1)
				ae.Msg = strings.ReplaceAll(ae.Msg, "input[", param+"[")
			}
			return nil, err
		}
		if len(e.atts) > 0 {
			return nil, invalid(param+"["+strconv.Itoa(i)+"]", "a conversation's items cannot carry images or files yet: send them with a response")
		}
		entries = append(entries, e)
	}
	msgs, _, ok := canonical(entries)
	if !ok {
		return nil, invalid(param, "item_reference items cannot be added to a conversation: add the items themselves")
	}
	return msgs, nil
}

type createConversationBody struct {
	Items    json.RawMessage `json:"items"`
	Metadata json.RawMessage `json:"metadata"`
}

// createConversation serves POST /conversations: a pending conversation
// (above), with the initial items checked as an import would.
func (h *handler) createConversation(w http.ResponseWriter, r *http.Request, tenant string, _ []string) error {
	var body createConversationBody
	if err := h.env.Decode(w, r, &body, true); err != nil {
		return err
	}
	meta, err := metadata(body.Metadata)
	if err != nil {
		return err
	}
	msgs, err := parseItemList(body.Items, "items")
	if err != nil {
		return err
	}
	id := h.env.IDs.New(forge.PrefixSession)
	probe := &forge.Session{ID: id, Tenant: tenant, MainThreadID: "thr_probe"}
	if _, err := history.Import(h.env, probe, msgs, "items", nil); err != nil {
		return err
	}
	c := &conversation{id: id, created: h.env.Clock.Now().Unix(), meta: meta}
	raw, _ := json.Marshal(pendingConversation{Metadata: meta, Items: msgs, CreatedAt: c.created})
	if _, err := h.env.Store.PutIdempotency(r.Context(), tenant, &forge.IdempotencyRecord{
		Key: id, Scope: conversationScope, Body: raw, CreatedAt: h.env.Clock.Now(),
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c.object())
	return nil
}

// getConversation serves GET /conversations/{id}.
func (h *handler) getConversation(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	c, err := h.conversation(r.Context(), tenant, args[0])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c.object())
	return nil
}

// updateConversation serves POST /conversations/{id}: not supported (a
// session's metadata is set when it is made).
func (h *handler) updateConversation(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	if _, err := h.conversation(r.Context(), tenant, args[0]); err != nil {
		return err
	}
	return invalid("metadata", "a conversation's metadata cannot be changed in Forge: it is set when the conversation is created")
}

// deleteConversation serves DELETE /conversations/{id}: the session is
// deleted (as DELETE /v1/sessions/{id}); a pending one is marked deleted.
func (h *handler) deleteConversation(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	ctx := r.Context()
	c, err := h.conversation(ctx, tenant, args[0])
	if err != nil {
		return err
	}
	if c.pending != nil {
		// Marked deleted, unless bound to a session meanwhile: then that
		// is deleted.
		bound, err := h.bind(ctx, tenant, c, "", true)
		if err != nil {
			return err
		}
		c.ses = nil
		if bound.SessionID != "" {
			c.ses = &forge.Session{ID: bound.SessionID}
		}
	}
	if c.ses != nil {
		if err := h.env.Store.DeleteSession(ctx, tenant, c.ses.ID); err != nil {
			if errors.Is(err, forge.ErrTurnInProgress) {
				return newError(http.StatusConflict, "", "conversation_locked", "a response of this conversation is in progress; cancel it before deleting the conversation")
			}
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": args[0], "object": "conversation.deleted", "deleted": true})
	return nil
}

// isNotFound reports whether err is answered 404.
func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

type addItemsBody struct {
	Items json.RawMessage `json:"items"`
}

// addItems serves POST /conversations/{id}/items. Forge's log is
// append-only by turns: new messages are sent as responses. So items
// added must repeat what the conversation holds (the Agents SDK adds the
// run's items after the run): they are accepted and nothing is stored.
// A pending conversation is bound to the session whose conversation the
// items (after its initial items) are.
func (h *handler) addItems(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	ctx := r.Context()
	var body addItemsBody
	if err := h.env.Decode(w, r, &body, true); err != nil {
		return err
	}
	msgs, err := parseItemList(body.Items, "items")
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return invalid("items", "items must hold at least one item")
	}
	c, err := h.conversation(ctx, tenant, args[0])
	if err != nil {
		return err
	}
	if c.pending != nil {
		conv := append(append([]history.Message(nil), c.pending.Items...), msgs...)
		// Keys are per agent, and a pending conversation names none.
		rec, ok, err := h.findAnyAgent(ctx, tenant, conv)
		if err != nil {
			return err
		}
		if !ok {
			return newError(http.StatusBadRequest, "items", "append_only",
				"conversation %q has no response yet, and Forge adds messages to a conversation only by running them: send the items with its first response (POST /openai/v1/responses with conversation), or give them when creating the conversation", c.id)
		}
		bound, err := h.bind(ctx, tenant, c, rec.SessionID, false)
		if err != nil {
			return err
		}
		if bound.SessionID != rec.SessionID {
			return newError(http.StatusConflict, "items", "conversation_mismatch", "conversation %q was bound to another session meanwhile", args[0])
		}
	} else if held, err := h.holds(ctx, tenant, c.ses, msgs); err != nil {
		return err
	} else if !held {
		return newError(http.StatusBadRequest, "items", "append_only",
			"Forge adds messages to a conversation only by running them, and these items are not the conversation's latest: send new messages as a response (POST /openai/v1/responses with conversation %q)", c.id)
	}
	var raw []json.RawMessage
	_ = json.Unmarshal(body.Items, &raw)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": raw, "has_more": false, "first_id": nil, "last_id": nil})
	return nil
}

// findAnyAgent looks a whole conversation up under each of the tenant's
// agents (a pending conversation names none). Equal conversations of
// several agents (a first "hi" has the same answer everywhere) go to the
// newest turn (ids sort by time): the run whose items a client adds has
// just ended.
func (h *handler) findAnyAgent(ctx context.Context, tenant string, conv []history.Message) (history.Record, bool, error) {
	var best history.Record
	found := false
	opts := forge.ListOptions{Limit: 100}
	for range 10 {
		agents, next, err := h.env.Store.ListAgents(ctx, tenant, opts)
		if err != nil {
			return history.Record{}, false, err
		}
		for _, a := range agents {
			rec, ok, err := h.book().Find(ctx, tenant, a.Name, "", conv)
			if err != nil {
				return history.Record{}, false, err
			}
			if ok && (!found || rec.TurnID > best.TurnID) {
				best, found = rec, true
			}
		}
		if next == "" {
			break
		}
		opts.Cursor = next
	}
	return best, found, nil
}

// holds reports whether msgs are the latest messages of ses's branch:
// the turns from its tip back, as many as msgs can cover, give the same
// messages.
func (h *handler) holds(ctx context.Context, tenant string, ses *forge.Session, msgs []history.Message) (bool, error) {
	if ses.TipTurnID == nil {
		return false, nil
	}
	var got []history.Message
	tid := *ses.TipTurnID
	for range len(msgs) {
		t, err := h.env.Store.GetTurn(ctx, tenant, ses.ID, tid)
		if err != nil {
			return false, err
		}
		resp, err := h.build(ctx, tenant, ses, t, record{})
		if err != nil {
			return false, err
		}
		turn := make([]history.Message, 0, len(t.Input)+1)
		for _, in := range t.Input {
			if in.Type == forge.InputMessage {
				turn = append(turn, history.Message{Role: "user", Text: in.Text})
			} else {
				turn = append(turn, toolMessage(in))
			}
		}
		got = append(append(turn, answer(resp)), got...)
		if len(got) >= len(msgs) {
			break
		}
		if t.PreviousTurnID == nil {
			break
		}
		tid = *t.PreviousTurnID
	}
	if len(got) < len(msgs) {
		return false, nil
	}
	got = got[len(got)-len(msgs):]
	for i := range msgs {
		a, _ := json.Marshal(got[i])
		b, _ := json.Marshal(msgs[i])
		if !bytes.Equal(a, b) {
			return false, nil
		}
	}
	return true, nil
}

// maxListed bounds the messages a conversation's item list reads.
const maxListed = 20000

// items are a conversation's items, oldest first: its initial items
// while pending, else its branch (from the tip) as response items, with
// the ids the responses gave them.
func (h *handler) items(ctx context.Context, tenant string, c *conversation) ([]map[string]any, error) {
	type item = map[string]any
	var out []item
	if c.pending != nil {
		for i, m := range c.pending.Items {
			out = append(out, messageItems(m, c.id+"_"+strconv.Itoa(i))...)
		}
		return out, nil
	}
	ses := c.ses
	client := map[string]bool{}
	if a, err := h.env.Store.GetAgent(ctx, tenant, ses.Agent); err == nil {
		for _, t := range a.Tools {
			if t.Client {
				client[t.Name] = true
			}
		}
	}
	q := forge.MessageQuery{SessionID: ses.ID, ThreadID: ses.MainThreadID, ListOptions: forge.ListOptions{Limit: 500}}
	if ses.TipTurnID != nil {
		q.TipTurnID = *ses.TipTurnID
	}
	read := 0
	for {
		msgs, next, err := h.env.Store.ListMessages(ctx, tenant, q)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			out = append(out, storedItems(m, client)...)
		}
		read += len(msgs)
		if next == "" || read >= maxListed {
			break
		}
		q.Cursor = next
	}
	return out, nil
}

// id of a stored message's item: named by its turn, as a response's.
func storedID(kind string, m *forge.Message, part string) string {
	if m.TurnID == "" {
		return part // imported: no response has it
	}
	return itemID(kind, m.TurnID, part)
}

// storedItems are a stored message as conversation items.
func storedItems(m *forge.Message, client map[string]bool) []map[string]any {
	type item = map[string]any
	if m.Summary {
		return nil
	}
	for _, p := range m.Parts {
		if p.Type == forge.PartCompaction {
			return nil
		}
	}
	if m.Role == forge.RoleUser {
		var content []item
		for _, p := range m.Parts {
			if p.Type == forge.PartText {
				content = append(content, item{"type": "input_text", "text": p.Text})
			}
		}
		if content == nil {
			return nil
		}
		return []item{{"type": "message", "id": storedID("msg", m, m.ID), "role": "user", "status": "completed", "content": content}}
	}
	var out []item
	for _, p := range m.Parts {
		switch p.Type {
		case forge.PartText:
			out = append(out, item{"type": "message", "id": storedID("msg", m, p.ID), "role": "assistant", "status": "completed",
				"content": []item{{"type": "output_text", "text": p.Text, "annotations": []any{}, "logprobs": []any{}}}})
		case forge.PartReasoning:
			r := item{"type": "reasoning", "id": storedID("rs", m, p.ID), "status": "completed",
				"content": []item{{"type": "reasoning_text", "text": p.Text}}, "summary": []item{}}
			if p.Text != "" {
				r["summary"] = []item{{"type": "summary_text", "text": p.Text}}
			}
			out = append(out, r)
		case forge.PartTool:
			if client[p.Tool] {
				out = append(out, item{"type": "function_call", "id": storedID("fc", m, p.ID), "call_id": p.CallID, "name": p.Tool,
					"arguments": arguments(p.Arguments), "status": "completed"})
				if p.Output != nil {
					out = append(out, item{"type": "function_call_output", "id": storedID("fco", m, p.ID), "call_id": p.CallID,
						"output": *p.Output, "status": "completed"})
				}
				continue
			}
			c := item{"type": "mcp_call", "id": storedID("mcp", m, p.ID), "server_label": serverLabel, "name": p.Tool,
				"arguments": arguments(p.Arguments), "output": p.Output, "error": p.Error, "status": "completed"}
			if p.State != forge.StateCompleted {
				c["status"] = "failed"
			}
			out = append(out, c)
		}
	}
	return out
}

// messageItems are a pending conversation's initial message as items.
func messageItems(m history.Message, id string) []map[string]any {
	type item = map[string]any
	switch m.Role {
	case "user":
		return []item{{"type": "message", "id": id, "role": "user", "status": "completed", "content": []item{{"type": "input_text", "text": m.Text}}}}
	case "tool":
		return []item{{"type": "function_call_output", "id": id, "call_id": m.ToolCallID, "output": m.Text, "status": "completed"}}
	}
	var out []item
	if m.Text != "" {
		out = append(out, item{"type": "message", "id": id, "role": "assistant", "status": "completed",
			"content": []item{{"type": "output_text", "text": m.Text, "annotations": []any{}, "logprobs": []any{}}}})
	}
	for j, c := range m.ToolCalls {
		out = append(out, item{"type": "function_call", "id": id + "_" + strconv.Itoa(j), "call_id": c.ID, "name": c.Name, "arguments": c.Arguments, "status": "completed"})
	}
	return out
}

// listItems serves GET /conversations/{id}/items (order, after, limit).
func (h *handler) listItems(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	pg, err := readPage(r)
	if err != nil {
		return err
	}
	items, _, err := h.conversationItems(r, tenant, args[0])
	if err != nil {
		return err
	}
	return pg.write(w, items)
}

// conversationItems reads conversation id and its items.
func (h *handler) conversationItems(r *http.Request, tenant, id string) ([]map[string]any, *conversation, error) {
	c, err := h.conversation(r.Context(), tenant, id)
	if err != nil {
		return nil, nil, err
	}
	items, err := h.items(r.Context(), tenant, c)
	return items, c, err
}

// getItem serves GET /conversations/{id}/items/{item}.
func (h *handler) getItem(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	items, c, err := h.conversationItems(r, tenant, args[0])
	if err != nil {
		return err
	}
	for _, it := range items {
		if it["id"] == args[2] {
			writeJSON(w, http.StatusOK, it)
			return nil
		}
	}
	return newError(http.StatusNotFound, "", "not_found", "Item with id '%s' not found in conversation '%s'.", args[2], c.id)
}

// deleteItem serves DELETE /conversations/{id}/items/{item}: refused,
// since Forge's log is append-only (docs/decisions.md, "Conversations").
func (h *handler) deleteItem(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	c, err := h.conversation(r.Context(), tenant, args[0])
	if err != nil {
		return err
	}
	return newError(http.StatusBadRequest, "", "append_only",
		"Forge's conversation log is append-only: an item of conversation %q cannot be deleted. Continue from an earlier point instead (previous_response_id names any earlier response, and resent history forks where it differs), or delete the conversation", c.id)
}
