// Package history maps a conversation a stateless client resends onto a
// durable session (API.md, "Stateless clients and Chat Completions"), for
// both OpenAI facades: a conversation is named by a chained hash of its
// messages in a canonical form, recorded in the idempotency table when a
// turn answering it ends, so one lookup finds where a resent conversation
// continues whatever its length; a conversation never seen is imported
// as a new session's history (messages of no turn), not re-run.
package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/protocol"
	"github.com/forge-runtime/forge/protocol/internal/openaierr"
)

// Message is a message as Forge compares conversations: role (user,
// assistant, tool), text, an assistant's tool calls, the call a tool
// message answers. Its JSON is its identity in a conversation's key.
type Message struct {
	Role       string `json:"role"`
	Text       string `json:"text"`
	ToolCalls  []Call `json:"tool_calls,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Files names a user message's images and files in its identity: a
	// file id, or a hash of the inline content as sent.
	Files []string `json:"files,omitempty"`
	// Atts are those attachments as sent, for the message Forge runs.
	Atts []files.Attachment `json:"-"`
}

// Call is a tool call of an assistant message.
type Call struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Record is what a conversation key points to: the turn that ended it.
type Record struct {
	SessionID string `json:"session_id"`
	TurnID    string `json:"turn_id"`
	// Whole: the conversation is the whole branch up to the turn (it was
	// not continued from a session's tip by a request holding only part).
	Whole bool `json:"whole"`
}

// Book keeps the conversation records of one facade: its records are in
// Scope and its keys start from Seed, so two facades' canonical forms
// never name each other's conversations.
type Book struct {
	Env   protocol.Env
	Scope string
	Seed  string
}

// Keys return the keys recording a conversation for agent: one for the
// tenant, one for the session holding it (for requests that name a
// session). A key is a chained SHA-256 of the messages in their JSON, so
// it names the whole conversation exactly.
func (b Book) Keys(agent, sessionID string, msgs []Message) (tenantKey, sessionKey string) {
	sum := sha256.Sum256([]byte(b.Seed + "\x00" + agent))
	for _, m := range msgs {
		raw, _ := json.Marshal(m)
		h := sha256.New()
		h.Write(sum[:])
		h.Write(raw)
		h.Sum(sum[:0])
	}
	hexSum := hex.EncodeToString(sum[:])
	return "a:" + hexSum, "s:" + sessionID + ":" + hexSum
}

// Lookup reads the record of a conversation key.
func (b Book) Lookup(ctx context.Context, tenant, key string) (Record, bool, error) {
	var rec Record
	r, err := b.Env.Store.GetIdempotency(ctx, tenant, b.Scope, key)
	if errors.Is(err, forge.ErrNotFound) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if json.Unmarshal(r.Body, &rec) != nil || rec.TurnID == "" {
		return rec, false, nil
	}
	return rec, true, nil
}

// Find looks up the conversation msgs of agent: in sessionID only when it
// is not "" (its own key, then the tenant's if that names this session),
// else under the tenant's key.
func (b Book) Find(ctx context.Context, tenant, agent, sessionID string, msgs []Message) (Record, bool, error) {
	tk, sk := b.Keys(agent, sessionID, msgs)
	if sessionID == "" {
		return b.Lookup(ctx, tenant, tk)
	}
	rec, ok, err := b.Lookup(ctx, tenant, sk)
	if err == nil && !ok {
		// Most conversations are recorded under the tenant's key only.
		rec, ok, err = b.Lookup(ctx, tenant, tk)
		ok = ok && rec.SessionID == sessionID
	}
	return rec, ok, err
}

// Remember records conv (the request's conversation and the answer) as
// ended by turnID of ses, so that a request resending it continues from
// there. The first record of a key stays: an equal conversation reached
// twice continues where it was first reached. A whole conversation goes
// under the tenant's key, and under the session's too only when the
// tenant's names another session; a partial one only under the
// session's, since it would give a client naming no session history it
// never sent. One write, mostly.
func (b Book) Remember(ctx context.Context, tenant string, ses *forge.Session, turnID string, whole bool, conv []Message) {
	body, _ := json.Marshal(Record{SessionID: ses.ID, TurnID: turnID, Whole: whole})
	tk, sk := b.Keys(ses.Agent, ses.ID, conv)
	put := func(key string) *forge.IdempotencyRecord {
		got, err := b.Env.Store.PutIdempotency(ctx, tenant, &forge.IdempotencyRecord{
			Key: key, Scope: b.Scope, Status: http.StatusOK, Body: body, CreatedAt: b.Env.Clock.Now(),
		})
		if err != nil {
			b.Env.Log.Warn("recording a conversation failed", "scope", b.Scope, "session_id", ses.ID, "turn_id", turnID, "err", err)
		}
		return got
	}
	if whole {
		var stored Record
		if got := put(tk); got != nil && json.Unmarshal(got.Body, &stored) == nil && stored.SessionID == ses.ID {
			return
		}
	}
	put(sk)
}

// MaxImported bounds the messages one request imports (the body limit
// bounds them too; this keeps one transaction's rows reasonable).
const MaxImported = 5000

// Import turns a conversation Forge has not seen into the messages of
// ses it imports: user and assistant messages with their text, an
// assistant's tool calls as tool parts completed with the outputs of the
// tool messages that answer them. param names the request's field
// ("messages", "input") in errors; at maps a message's index to the
// index of the request item it came from.
func Import(env protocol.Env, ses *forge.Session, prefix []Message, param string, at func(int) int) ([]*forge.Message, error) {
	if len(prefix) > MaxImported {
		return nil, openaierr.Invalid(param, "the conversation holds %d earlier messages Forge has not seen; at most %d are imported at once", len(prefix), MaxImported)
	}
	if at == nil {
		at = func(i int) int { return i }
	}
	p := func(i int) string { return param + "[" + strconv.Itoa(at(i)) + "]" }
	now := env.Clock.Now()
	var out []*forge.Message
	open := map[string]*forge.Part{} // the calls of the last assistant message not answered yet
	unanswered := func(i int) error {
		for id := range open {
			return openaierr.Invalid(param, "%s: tool call %q of the assistant message before it has no tool output answering it", p(i), id)
		}
		return nil
	}
	add := func(role, finish string) *forge.Message {
		m := &forge.Message{ID: env.IDs.New(forge.PrefixMessage), Tenant: ses.Tenant, SessionID: ses.ID, ThreadID: ses.MainThreadID,
			Role: role, Finish: finish, Metadata: json.RawMessage(`{"imported":true}`), CreatedAt: now}
		out = append(out, m)
		return m
	}
	part := func(m *forge.Message, pt forge.Part) *forge.Part {
		pt.ID, pt.MessageID, pt.SessionID, pt.CreatedAt, pt.UpdatedAt = env.IDs.New(forge.PrefixPart), m.ID, ses.ID, now, now
		m.Parts = append(m.Parts, &pt)
		return &pt
	}
	for i, m := range prefix {
		switch m.Role {
		case "user":
			if err := unanswered(i); err != nil {
				return nil, err
			}
			if len(m.Atts) > 0 {
				return nil, openaierr.New(http.StatusBadRequest, p(i)+".content", "history_not_found",
					"Forge has not seen this conversation, and importing earlier messages with images or files is not supported yet: send them as the last message, or upload them and continue a conversation Forge answered")
			}
			part(add(forge.RoleUser, ""), forge.Part{Type: forge.PartText, Text: m.Text, State: forge.StateCompleted})
		case "assistant":
			if err := unanswered(i); err != nil {
				return nil, err
			}
			finish := forge.FinishStop
			if len(m.ToolCalls) > 0 {
				finish = forge.FinishToolCalls
			}
			msg := add(forge.RoleAssistant, finish)
			if m.Text != "" {
				part(msg, forge.Part{Type: forge.PartText, Text: m.Text, State: forge.StateCompleted})
			}
			for j, call := range m.ToolCalls {
				if open[call.ID] != nil {
					return nil, openaierr.Invalid(p(i)+".tool_calls["+strconv.Itoa(j)+"].id", "%s holds tool call id %q twice", p(i), call.ID)
				}
				args := json.RawMessage(call.Arguments)
				if !json.Valid(args) {
					args, _ = json.Marshal(call.Arguments) // kept as the text the model wrote
				}
				open[call.ID] = part(msg, forge.Part{Type: forge.PartTool, CallID: call.ID, Tool: call.Name, Arguments: args, State: forge.StatePending})
			}
		case "tool":
			pt := open[m.ToolCallID]
			if pt == nil {
				return nil, openaierr.Invalid(p(i)+".tool_call_id", "%s answers tool call %q, which the assistant message before it did not make (or another tool output answered)", p(i), m.ToolCallID)
			}
			output := m.Text
			pt.State, pt.Output = forge.StateCompleted, &output
			delete(open, m.ToolCallID)
		}
	}
	if err := unanswered(len(prefix)); err != nil {
		return nil, err
	}
	return out, nil
}
