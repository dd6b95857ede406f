// Package openaichat serves OpenAI Chat Completions over Forge (API.md,
// "Stateless clients and Chat Completions"): a model is an agent, and the
// conversation a client resends with every request is mapped onto a
// session, so that nothing Forge ran before runs again. Mounted by
// httpapi under /openai/v1/chat/ (the Responses API, protocol/openairesp,
// serves the rest of /openai/v1/).
package openaichat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/internal/sse"
	"github.com/forge-runtime/forge/protocol"
	"github.com/forge-runtime/forge/protocol/internal/history"
	"github.com/forge-runtime/forge/protocol/internal/openaierr"
)

// Prefix is where the API is served.
const Prefix = "/openai/v1/chat/"

// SessionHeader names the session a completion ran in; a request may pin
// its session with it.
const SessionHeader = "Forge-Session-Id"

// recordScope is the idempotency-record scope of the conversations
// completions ended (docs/decisions.md, "Chat Completions").
const recordScope = "openai:chat"

// Protocol is the OpenAI Chat Completions protocol, for
// httpapi.Config.Protocols.
type Protocol struct{}

// Prefix implements httpapi.Protocol.
func (Protocol) Prefix() string { return Prefix }

// WriteError implements httpapi.Protocol: OpenAI's error shape.
func (Protocol) WriteError(w http.ResponseWriter, status int, code, message string) {
	if status == http.StatusUnauthorized {
		code = "invalid_api_key"
	}
	writeErrorBody(w, status, "", code, message)
}

// Handler implements httpapi.Protocol.
func (Protocol) Handler(env protocol.Env) http.Handler { return &handler{env: env} }

type handler struct {
	env protocol.Env
}

// book keeps the conversations completions ended.
func (h *handler) book() history.Book {
	return history.Book{Env: h.env, Scope: recordScope, Seed: "forge chat"}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.TrimSuffix(r.URL.Path, "/") != Prefix+"completions" {
		writeErrorBody(w, http.StatusNotFound, "", "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeErrorBody(w, http.StatusMethodNotAllowed, "", "method_not_allowed", "method "+r.Method+" is not allowed on "+r.URL.Path)
		return
	}
	tenant, err := h.env.Tenant(r)
	if err == nil {
		err = h.create(w, r, tenant)
	}
	if err != nil {
		h.fail(w, r, err)
	}
}

// completion is a request resolved: where its turn runs and with what.
type completion struct {
	ses          *forge.Session
	req          engine.TurnRequest
	conversation []message // the request's messages
	// whole is whether conversation is all the branch it continues holds
	// (false for a pinned session continued from its tip by a request
	// that sends only the new message).
	whole bool
}

// create serves POST /chat/completions.
func (h *handler) create(w http.ResponseWriter, r *http.Request, tenant string) error {
	var body createBody
	if err := h.env.Decode(w, r, &body, true); err != nil {
		return err
	}
	if name, ok := body.unsupported(); ok {
		return invalid(name, "%s is not supported by Forge: a request may set system and developer messages, temperature, top_p, max_tokens (max_completion_tokens), response_format, tools and tool_choice auto or none; other settings are the agent's (PUT /v1/agents/{name})", name)
	}
	format, err := outputSchema(body.ResponseFormat)
	if err != nil {
		return err
	}
	if format != nil {
		if err := h.env.Runtime.CheckOutputSchema(format, "response_format.json_schema"); err != nil {
			return invalid("response_format.json_schema", "%v", err)
		}
	}
	if body.N != nil && *body.N != 1 {
		return invalid("n", "n must be 1: Forge runs one turn per request")
	}
	if body.Model == nil || *body.Model == "" {
		return invalid("model", "model is required: the name of a Forge agent")
	}
	model := *body.Model
	agent, err := h.env.Store.GetAgent(r.Context(), tenant, model)
	if err != nil {
		return notFound(err, "model", "model_not_found", "The model `%s` does not exist: models are Forge agents (GET /openai/v1/models)", model)
	}
	msgs, instructions, err := parseMessages(body.Messages)
	if err != nil {
		return err
	}
	// Checked before anything is stored (resolve may make a session).
	overrides, err := body.overrides(agent, instructions, format)
	if err != nil {
		return err
	}
	stream := body.Stream != nil && *body.Stream
	usage := body.StreamOptions != nil && body.StreamOptions.IncludeUsage != nil && *body.StreamOptions.IncludeUsage
	if body.StreamOptions != nil && !stream {
		return invalid("stream_options", "stream_options is only allowed with stream: true")
	}
	// The new message's images and files are checked (and inline ones
	// spooled) before anything is stored.
	var inputFiles []forge.InputFile
	if last := msgs[len(msgs)-1]; len(last.Atts) > 0 {
		if h.env.Files == nil {
			return invalid("messages", "this server keeps no files: a message cannot carry images or files")
		}
		var closeFiles func()
		inputFiles, closeFiles, err = files.Resolve(last.Atts, tenant, h.env.MaxFileBytes, "messages["+strconv.Itoa(len(msgs)-1)+"].content")
		defer closeFiles()
		if err != nil {
			return err
		}
		// A missing file_id is refused before a new session is made for
		// the message (the engine checks again when the turn begins).
		for _, f := range inputFiles {
			if f.FileID == "" || f.Pending != nil {
				continue
			}
			if _, err := h.env.Files.GetFile(r.Context(), tenant, f.FileID); err != nil {
				return notFound(err, "messages", "file_not_found", "file %q not found", f.FileID)
			}
		}
	}
	c, err := h.resolve(r, tenant, model, msgs)
	if err != nil {
		return err
	}
	if inputFiles != nil {
		c.req.Input[0].Files = inputFiles
	}
	c.req.Overrides = overrides
	w.Header().Set(SessionHeader, c.ses.ID)
	if stream {
		return h.createStream(w, r, tenant, c, usage)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, c.ses.ID, c.req)
	if err != nil {
		return startError(err)
	}
	w.Header().Set("Forge-Turn-Id", turn.ID)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a turn may outlast the server's WriteTimeout
	enc := newEncoder(turn, model, nil, false)
	proj := protocol.NewProjector(c.ses.MainThreadID)
	for ev, err := range events {
		if err == nil {
			err = proj.Apply(ev, enc.step)
		}
		if err != nil {
			return err
		}
		if proj.Done() {
			break
		}
	}
	if !proj.Done() {
		return r.Context().Err()
	}
	_ = rc.SetWriteDeadline(time.Now().Add(sse.WriteWait))
	if enc.failure != nil {
		return enc.failure
	}
	h.remember(protocol.Detach(r), tenant, c, enc)
	writeJSON(w, http.StatusOK, enc.completion())
	return nil
}

// resolve maps the request's conversation onto a session and the turn it
// chains from: the pinned session (Forge-Session-Id), the session and
// turn that ended the conversation's prefix, or a new session for a
// conversation of one user message.
func (h *handler) resolve(r *http.Request, tenant, model string, msgs []message) (*completion, error) {
	ctx := r.Context()
	prefix, input, err := split(msgs)
	if err != nil {
		return nil, err
	}
	c := &completion{conversation: msgs}
	c.req.Input = input
	if sid := r.Header.Get(SessionHeader); sid != "" {
		ses, err := h.env.Store.GetSession(ctx, tenant, sid)
		if err != nil {
			return nil, notFound(err, "", "session_not_found", "session %q (the %s header) not found", sid, SessionHeader)
		}
		if ses.Kind != forge.KindDirect {
			return nil, invalid("", "session %q is a %s session; chat completions go to direct sessions only", sid, ses.Kind)
		}
		if ses.Agent != model {
			return nil, invalid("model", "model %q does not match the session's agent %q: a session talks to one agent", model, ses.Agent)
		}
		c.ses = ses
		if len(prefix) == 0 {
			// One new message: it chains from the session's tip.
			c.whole = ses.TipTurnID == nil
			return c, nil
		}
		rec, ok, err := h.book().Find(ctx, tenant, model, ses.ID, prefix)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, newError(http.StatusBadRequest, "messages", "conversation_mismatch",
				"the %d messages before the last are not a conversation session %q holds: resend the messages as Forge answered them, or send only the new message", len(prefix), sid)
		}
		c.req.PreviousTurnID, c.whole = &rec.TurnID, rec.Whole
		return c, nil
	}
	if len(prefix) > 0 {
		rec, ok, err := h.book().Find(ctx, tenant, model, "", prefix)
		if err != nil {
			return nil, err
		}
		if ok {
			ses, err := h.env.Store.GetSession(ctx, tenant, rec.SessionID)
			if err == nil {
				c.ses, c.req.PreviousTurnID, c.whole = ses, &rec.TurnID, true
				return c, nil
			}
			if !errors.Is(err, forge.ErrNotFound) {
				return nil, err
			}
		}
		if input[0].Type != forge.InputMessage {
			return nil, newError(http.StatusBadRequest, "messages", "history_not_found",
				"Forge has not seen this conversation, and one ending with tool results cannot be imported (the calls they answer were never Forge's): import it ending with a user message, or continue a conversation as Forge answered it")
		}
	}
	now := h.env.Clock.Now()
	ses := &forge.Session{
		ID: h.env.IDs.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: model,
		MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now,
	}
	imported, err := history.Import(h.env, ses, prefix, "messages", nil)
	if err != nil {
		return nil, err
	}
	if err := h.env.Store.CreateSession(ctx, ses); err != nil {
		return nil, err
	}
	if len(imported) > 0 {
		// Messages of no turn: on every branch of the session, read by its
		// first turn as its history (nothing runs for them).
		if err := h.env.Store.AppendLoose(ctx, &forge.LooseAppend{Tenant: tenant, SessionID: ses.ID, Messages: imported}); err != nil {
			return nil, err
		}
	}
	c.ses, c.whole = ses, true
	return c, nil
}

// remember records the conversation a completion ended (the request's
// messages and the answer), so that a request resending it continues
// from this turn (history.Book.Remember).
func (h *handler) remember(ctx context.Context, tenant string, c *completion, enc *encoder) {
	conv := append(append([]message(nil), c.conversation...), enc.message())
	h.book().Remember(ctx, tenant, c.ses, enc.turn.ID, c.whole, conv)
}

// startError words the engine's refusals of a new turn for this API.
func startError(err error) error {
	switch {
	case errors.Is(err, forge.ErrTurnInProgress):
		return newError(http.StatusConflict, "", "conversation_locked", "another completion is in progress in this session; wait for it or cancel it")
	case errors.Is(err, forge.ErrPendingActions):
		return newError(http.StatusBadRequest, "messages", "pending_actions", "%s: answer the open tool calls with tool messages", err.Error())
	case errors.Is(err, forge.ErrUnknownCall), errors.Is(err, forge.ErrDuplicateCall), errors.Is(err, forge.ErrIncompleteResolution):
		return newError(http.StatusBadRequest, "messages", forge.ErrorCode(err), "%s", err.Error())
	}
	return err
}

// createStream starts the turn subscribed and streams it as chunks.
func (h *handler) createStream(w http.ResponseWriter, r *http.Request, tenant string, c *completion, usage bool) error {
	release, err := h.env.Open(tenant, c.ses.ID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, c.ses.ID, c.req)
	if err != nil {
		return startError(err)
	}
	w.Header().Set("Forge-Turn-Id", turn.ID)
	sw := sse.NewWriter(w, sse.WriteWait)
	proj := protocol.NewProjector(c.ses.MainThreadID)
	enc := newEncoder(turn, c.ses.Agent, func(data []byte) { sw.Event(0, "", data) }, usage)
	var runs protocol.Runs
	sse.Pump(ctx, cancel, sw, h.env.KeepAlive, events, func(ev forge.Event, err error) bool {
		if err != nil || runs.Starts(ev) {
			sw.Urgent()
		}
		if err == nil {
			err = proj.Apply(ev, enc.step)
		}
		if err == nil && proj.Done() && enc.failure != nil {
			err = enc.failure
		}
		if err != nil {
			status, param, code, msg := h.describe(err)
			h.env.Log.Warn("chat completion stream ended by an error", "turn_id", turn.ID, "err", err)
			data, _ := json.Marshal(openaierr.NewBody(status, param, code, msg))
			sw.Event(0, "", data)
			return true
		}
		if !proj.Done() {
			return false
		}
		h.remember(protocol.Detach(r), tenant, c, enc)
		sw.Event(0, "", []byte("[DONE]"))
		return true
	}, nil)
	return nil
}

// describe is what an error answer says of err.
func (h *handler) describe(err error) (status int, param, code, msg string) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status, ae.Param, ae.Code, ae.Msg
	}
	status, code, msg = h.env.Classify(err)
	return status, "", code, msg
}
