// Package openairesp serves the OpenAI Responses API over Forge (API.md,
// "Speaking OpenAI Responses"): a response is a turn, a conversation is a
// session, a model is an agent. Mounted by httpapi under /openai/v1/.
package openairesp

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/internal/sse"
	"github.com/forge-runtime/forge/protocol"
)

// Prefix is where the API is served.
const Prefix = "/openai/v1/"

// recordScope is the idempotency-record scope keeping what a response has
// that a turn does not (metadata, background): see docs/decisions.md.
const recordScope = "openai:response"

// Protocol is the OpenAI Responses protocol, for httpapi.Config.Protocols.
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

type route struct {
	method string
	h      func(w http.ResponseWriter, r *http.Request, tenant string, args []string) error
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/"))
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var routes []route
	switch {
	case len(seg) == 1 && seg[0] == "responses":
		routes = []route{{"POST", h.create}}
	case len(seg) == 2 && seg[0] == "responses" && seg[1] != "":
		routes = []route{{"GET", h.get}, {"DELETE", h.deleteResponse}}
	case len(seg) == 3 && seg[0] == "responses" && seg[2] == "cancel":
		routes = []route{{"POST", h.cancel}}
	case len(seg) == 3 && seg[0] == "responses" && seg[2] == "input_items":
		routes = []route{{"GET", h.inputItems}}
	case len(seg) == 1 && seg[0] == "conversations":
		routes = []route{{"POST", h.createConversation}}
	case len(seg) == 2 && seg[0] == "conversations" && seg[1] != "":
		routes = []route{{"GET", h.getConversation}, {"POST", h.updateConversation}, {"DELETE", h.deleteConversation}}
	case len(seg) == 3 && seg[0] == "conversations" && seg[1] != "" && seg[2] == "items":
		routes = []route{{"GET", h.listItems}, {"POST", h.addItems}}
	case len(seg) == 4 && seg[0] == "conversations" && seg[1] != "" && seg[2] == "items" && seg[3] != "":
		routes = []route{{"GET", h.getItem}, {"DELETE", h.deleteItem}}
	case len(seg) == 1 && seg[0] == "files":
		routes = []route{{"POST", h.createFile}, {"GET", h.listFiles}}
	case len(seg) == 2 && seg[0] == "files" && seg[1] != "":
		routes = []route{{"GET", h.getFile}, {"DELETE", h.deleteFile}}
	case len(seg) == 3 && seg[0] == "files" && seg[1] != "" && seg[2] == "content":
		routes = []route{{"GET", h.fileContent}}
	case len(seg) == 1 && seg[0] == "models":
		routes = []route{{"GET", h.listModels}}
	case len(seg) == 2 && seg[0] == "models" && seg[1] != "":
		routes = []route{{"GET", h.getModel}}
	default:
		writeErrorBody(w, http.StatusNotFound, "", "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
		return
	}
	for _, rt := range routes {
		if r.Method == rt.method || (rt.method == "GET" && r.Method == "HEAD") {
			tenant, err := h.env.Tenant(r)
			if err == nil {
				err = rt.h(w, r, tenant, seg[1:])
			}
			if err != nil {
				h.fail(w, r, err)
			}
			return
		}
	}
	allow := routes[0].method
	for _, rt := range routes[1:] {
		allow += ", " + rt.method
	}
	w.Header().Set("Allow", allow)
	writeErrorBody(w, http.StatusMethodNotAllowed, "", "method_not_allowed", "method "+r.Method+" is not allowed on "+r.URL.Path)
}

// record is what Forge keeps of a response beside its turn.
type record struct {
	Metadata   map[string]string `json:"metadata,omitempty"`
	Background bool              `json:"background,omitempty"`
	// Format is the request's json_schema text.format, echoed on the
	// response.
	Format *forge.OutputSchema `json:"format,omitempty"`
}

func (h *handler) saveRecord(ctx context.Context, tenant, turnID string, rec record) {
	if len(rec.Metadata) == 0 && !rec.Background && rec.Format == nil {
		return
	}
	body, _ := json.Marshal(rec)
	_, err := h.env.Store.PutIdempotency(ctx, tenant, &forge.IdempotencyRecord{
		Key: turnID, Scope: recordScope, Status: http.StatusOK, Body: body, CreatedAt: h.env.Clock.Now(),
	})
	if err != nil {
		h.env.Log.Warn("keeping a response's metadata failed", "turn", turnID, "err", err)
	}
}

func (h *handler) loadRecord(ctx context.Context, tenant, turnID string) record {
	var rec record
	r, err := h.env.Store.GetIdempotency(ctx, tenant, recordScope, turnID)
	if err == nil {
		_ = json.Unmarshal(r.Body, &rec)
	}
	return rec
}

// base is the response object of a turn before any of its events.
func base(t *forge.Turn, ses *forge.Session, rec record) Response {
	r := Response{
		ID: t.ID, Object: "response", CreatedAt: t.CreatedAt.Unix(), Status: "in_progress",
		Background: rec.Background, Model: ses.Agent, Output: []any{}, ParallelToolCalls: true,
		PreviousResponseID: t.PreviousTurnID, Conversation: &Conversation{ID: ses.ID},
		ToolChoice: "auto", Tools: []any{}, Truncation: "disabled", Metadata: rec.Metadata, Store: true,
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	echoOverrides(&r, t.Overrides)
	r.Text.Format.Type = "text"
	if f := rec.Format; f != nil {
		strict := f.Strict
		r.Text.Format.Type, r.Text.Format.Name, r.Text.Format.Schema, r.Text.Format.Strict = "json_schema", f.Name, f.Schema, &strict
	}
	return r
}

// create serves POST /responses.
func (h *handler) create(w http.ResponseWriter, r *http.Request, tenant string, _ []string) error {
	var body createBody
	if err := h.env.Decode(w, r, &body, true); err != nil {
		return err
	}
	if name, ok := body.agentSettings(); ok {
		return invalid(name, "%s is set by the agent in Forge and cannot be sent per request: change the agent (PUT /v1/agents/{name}) instead", name)
	}
	prefix, input, atts, err := parseInputFiles(body.Input)
	if err != nil {
		return err
	}
	if len(atts) > 0 {
		if h.env.Files == nil {
			return invalid("input", "this server keeps no files: a message cannot carry images or files")
		}
		inputFiles, closeFiles, err := files.Resolve(atts, tenant, h.env.MaxFileBytes, "input.files")
		defer closeFiles()
		if err != nil {
			return err
		}
		for i := range input {
			if input[i].Type == forge.InputMessage {
				input[i].Files = inputFiles
			}
		}
	}
	meta, err := metadata(body.Metadata)
	if err != nil {
		return err
	}
	format, err := outputSchema(body.Text)
	if err != nil {
		return err
	}
	if format != nil {
		if err := h.env.Runtime.CheckOutputSchema(format, "text.format"); err != nil {
			return invalid("text.format", "%v", err)
		}
	}
	conv, err := conversationID(body.Conversation)
	if err != nil {
		return err
	}
	overrides, err := body.requestOverrides(format)
	if err != nil {
		return err
	}
	model := ""
	if body.Model != nil {
		model = *body.Model
	}
	checked := false
	if overrides != nil && body.PreviousResponseID == nil && model != "" {
		// A new session (a new conversation's, an imported history's, a
		// pending conversation's) may be made below: the settings are
		// checked before.
		if overrides, err = h.checkOverrides(r.Context(), tenant, model, overrides); err != nil {
			return err
		}
		checked = true
	}
	var res *resolved
	if len(prefix) > 0 {
		res, err = h.continueHistory(r.Context(), tenant, model, body.PreviousResponseID, conv, prefix, input, meta)
	} else {
		res = &resolved{input: input, record: body.PreviousResponseID == nil}
		res.ses, res.req, err = h.target(r.Context(), tenant, model, body.PreviousResponseID, conv, meta)
		// A new session, or a conversation with no turn yet: the request
		// is the whole conversation.
		res.whole = err == nil && res.ses.TipTurnID == nil
	}
	if err != nil {
		return err
	}
	res.inputFiles = attachmentNames(atts)
	ses, req := res.ses, res.req
	if overrides != nil && !checked {
		if overrides, err = h.checkOverrides(r.Context(), tenant, ses.Agent, overrides); err != nil {
			return err
		}
	}
	req.Input = input
	req.Overrides = overrides
	stream := body.Stream != nil && *body.Stream
	background := body.Background != nil && *body.Background
	rec := record{Metadata: meta, Background: background, Format: format}
	if stream {
		return h.createStream(w, r, tenant, res, req, rec)
	}
	if background {
		turn, err := h.env.Runtime.StartTurn(protocol.Detach(r), tenant, ses.ID, req)
		if err != nil {
			return startError(err)
		}
		h.saveRecord(protocol.Detach(r), tenant, turn.ID, rec)
		writeJSON(w, http.StatusOK, base(turn, ses, rec))
		return nil
	}
	// Waiting: the turn's live events build the answer as they come (no
	// read of the stored log afterwards).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, ses.ID, req)
	if err != nil {
		return startError(err)
	}
	h.saveRecord(protocol.Detach(r), tenant, turn.ID, rec)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a turn may outlast the server's WriteTimeout
	enc := newEncoder(base(turn, ses, rec), -1, nil)
	proj := protocol.NewProjector(ses.MainThreadID)
	for ev, err := range events {
		if err == nil {
			err = proj.Apply(ev, enc.step)
		}
		if err == nil {
			err = enc.err
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
	h.remember(protocol.Detach(r), tenant, res, turn.ID, &enc.resp)
	writeJSON(w, http.StatusOK, &enc.resp)
	return nil
}

// target resolves the session a new response goes to and how its turn
// chains: from previous_response_id (chain or fork), from a
// conversation's tip, or in a new session of the agent model names.
func (h *handler) target(ctx context.Context, tenant, model string, prevID *string, conv string, meta map[string]string) (*forge.Session, engine.TurnRequest, error) {
	var req engine.TurnRequest
	if prevID != nil && conv != "" {
		return nil, req, invalid("previous_response_id", "previous_response_id and conversation exclude each other: a response already belongs to its conversation")
	}
	var sid string
	switch {
	case prevID != nil:
		prev := *prevID
		if prev == "" {
			return nil, req, invalid("previous_response_id", "previous_response_id must be a response id")
		}
		t, err := h.turn(ctx, tenant, prev)
		if err != nil {
			return nil, req, notFound(err, "previous_response_id", "previous_response_not_found", "previous response %q not found", prev)
		}
		sid, req.PreviousTurnID = t.SessionID, &prev
	case conv != "":
		c, err := h.conversation(ctx, tenant, conv)
		if err != nil {
			if isNotFound(err) {
				return nil, req, newError(http.StatusNotFound, "conversation", "conversation_not_found", "conversation %q not found", conv)
			}
			return nil, req, err
		}
		if c.pending != nil {
			ses, err := h.startPending(ctx, tenant, model, c)
			return ses, req, err
		}
		sid = c.ses.ID
	default:
		if model == "" {
			return nil, req, invalid("model", "model is required: the name of a Forge agent")
		}
		if _, err := h.env.Store.GetAgent(ctx, tenant, model); err != nil {
			return nil, req, notFound(err, "model", "model_not_found", "The model `%s` does not exist: models are Forge agents (GET /openai/v1/models)", model)
		}
		now := h.env.Clock.Now()
		metaJSON, _ := json.Marshal(meta)
		ses := &forge.Session{
			ID: h.env.IDs.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: model,
			MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: metaJSON, CreatedAt: now, UpdatedAt: now,
		}
		if err := h.env.Store.CreateSession(ctx, ses); err != nil {
			return nil, req, err
		}
		return ses, req, nil
	}
	ses, err := h.env.Store.GetSession(ctx, tenant, sid)
	if err != nil {
		return nil, req, notFound(err, "conversation", "conversation_not_found", "conversation %q not found", sid)
	}
	if ses.Kind != forge.KindDirect {
		return nil, req, invalid("conversation", "conversation %q is a %s session; responses go to direct sessions only", sid, ses.Kind)
	}
	if model != "" && model != ses.Agent {
		return nil, req, invalid("model", "model %q does not match the conversation's agent %q: a conversation talks to one agent", model, ses.Agent)
	}
	return ses, req, nil
}

// startError words the engine's refusals of a new turn for this API.
func startError(err error) error {
	switch {
	case errors.Is(err, forge.ErrTurnInProgress):
		return newError(http.StatusConflict, "", "conversation_locked", "another response is in progress in this conversation; wait for it or cancel it")
	case errors.Is(err, forge.ErrPendingActions):
		return newError(http.StatusBadRequest, "input", "pending_actions", "%s: answer the open calls with function_call_output or mcp_approval_response items", err.Error())
	case errors.Is(err, forge.ErrUnknownCall), errors.Is(err, forge.ErrDuplicateCall), errors.Is(err, forge.ErrIncompleteResolution):
		return newError(http.StatusBadRequest, "input", forge.ErrorCode(err), "%s", err.Error())
	}
	return err
}

// createStream starts the turn subscribed, and streams it.
func (h *handler) createStream(w http.ResponseWriter, r *http.Request, tenant string, res *resolved, req engine.TurnRequest, rec record) error {
	ses := res.ses
	release, err := h.env.Open(tenant, ses.ID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, ses.ID, req)
	if err != nil {
		return startError(err)
	}
	h.saveRecord(protocol.Detach(r), tenant, turn.ID, rec)
	h.stream(ctx, cancel, w, ses, turn, rec, events, -1, func(resp *Response) {
		h.remember(protocol.Detach(r), tenant, res, turn.ID, resp)
	})
	return nil
}

// stream writes a turn's events (read with ctx, which cancel ends) as a
// Responses stream, skipping events numbered at or below after; done,
// when not nil, gets the response once the turn ended.
func (h *handler) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, ses *forge.Session, turn *forge.Turn, rec record, events iter.Seq2[forge.Event, error], after int64, done func(*Response)) {
	w.Header().Set("Forge-Turn-Id", turn.ID)
	sw := sse.NewWriter(w, sse.WriteWait)
	proj := protocol.NewProjector(ses.MainThreadID)
	enc := newEncoder(base(turn, ses, rec), after, func(typ string, data []byte) { sw.Event(0, typ, data) })
	var runs protocol.Runs
	sse.Pump(ctx, cancel, sw, h.env.KeepAlive, events, func(ev forge.Event, err error) bool {
		if err != nil || runs.Starts(ev) {
			sw.Urgent()
		}
		if err == nil {
			err = proj.Apply(ev, enc.step)
		}
		if err == nil {
			err = enc.err
		}
		if err != nil {
			_, code, msg := h.env.Classify(err)
			h.env.Log.Warn("response stream ended by an error", "turn", turn.ID, "err", err)
			data, _ := json.Marshal(streamEvent{Type: "error", SequenceNumber: enc.seq + 1, Code: code, Message: msg})
			sw.Event(0, "error", data)
			return true
		}
		if proj.Done() && done != nil {
			done(&enc.resp)
		}
		return proj.Done()
	}, nil)
}

// build is a turn's response object as its stored events make it now.
func (h *handler) build(ctx context.Context, tenant string, ses *forge.Session, t *forge.Turn, rec record) (*Response, error) {
	enc := newEncoder(base(t, ses, rec), -1, nil)
	proj := protocol.NewProjector(ses.MainThreadID)
	for ev, err := range protocol.StoredTurnEvents(ctx, h.env.Store, tenant, ses.ID, t.ID) {
		if err != nil {
			return nil, err
		}
		if err := proj.Apply(ev, enc.step); err != nil {
			return nil, err
		}
	}
	if enc.err != nil {
		return nil, enc.err
	}
	if !proj.Done() && t.Ended() {
		enc.finish(t) // a turn whose log lacks its end (an older store)
	}
	resp := enc.resp
	return &resp, nil
}

// lookup finds a response's turn and session.
func (h *handler) lookup(ctx context.Context, tenant, id string) (*forge.Turn, *forge.Session, error) {
	t, err := h.turn(ctx, tenant, id)
	if err != nil {
		return nil, nil, notFound(err, "", "not_found", "Response with id '%s' not found.", id)
	}
	ses, err := h.env.Store.GetSession(ctx, tenant, t.SessionID)
	if err != nil {
		return nil, nil, notFound(err, "", "not_found", "Response with id '%s' not found.", id)
	}
	return t, ses, nil
}

// getBody is the optional JSON body of GET /responses/{id}.
type getBody struct {
	Stream        *bool           `json:"stream"`
	StartingAfter *int64          `json:"starting_after"`
	Include       json.RawMessage `json:"include"`
}

// get serves GET /responses/{id}, with ?stream=true the event stream
// (replayed, then live) after ?starting_after.
func (h *handler) get(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	q := r.URL.Query()
	// The official SDKs ask for the stream in the query (JS) or in a JSON
	// body of the GET (Go); either works, as does Accept.
	var body getBody
	if err := h.env.Decode(w, r, &body, false); err != nil {
		return err
	}
	stream := body.Stream != nil && *body.Stream
	if v := q.Get("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return invalid("stream", "stream must be true or false")
		}
		stream = b
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		stream = true
	}
	after := int64(-1)
	if body.StartingAfter != nil {
		if *body.StartingAfter < 0 {
			return invalid("starting_after", "starting_after must be a non-negative sequence number")
		}
		after = *body.StartingAfter
	}
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("starting_after", "starting_after must be a non-negative sequence number")
		}
		after = n
	}
	t, ses, err := h.lookup(r.Context(), tenant, args[0])
	if err != nil {
		return err
	}
	rec := h.loadRecord(r.Context(), tenant, t.ID)
	if stream {
		release, err := h.env.Open(tenant, ses.ID)
		if err != nil {
			return err
		}
		defer release()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		h.stream(ctx, cancel, w, ses, t, rec, protocol.TurnEvents(ctx, h.env.Runtime, tenant, ses.ID, t.ID), after, nil)
		return nil
	}
	resp, err := h.build(r.Context(), tenant, ses, t, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// cancel serves POST /responses/{id}/cancel.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	t, ses, err := h.lookup(r.Context(), tenant, args[0])
	if err != nil {
		return err
	}
	if !t.Ended() {
		_, err := h.env.Runtime.Cancel(protocol.Detach(r), tenant, ses.ID, "cancelled through the OpenAI Responses API")
		if err != nil && !errors.Is(err, forge.ErrConflict) && !errors.Is(err, forge.ErrTurnEnded) {
			return err
		}
		if t, err = h.env.Runtime.WaitTurn(r.Context(), tenant, ses.ID, t.ID); err != nil {
			return err
		}
	}
	if t.Status != forge.TurnCancelled {
		return invalid("", "Cannot cancel a response that has already ended (its status is %s).", responseStatus(t.Status))
	}
	resp, err := h.build(r.Context(), tenant, ses, t, h.loadRecord(r.Context(), tenant, t.ID))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// inputItems serves GET /responses/{id}/input_items: the turn's input as
// Responses input items.
func (h *handler) inputItems(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	pg, err := readPage(r)
	if err != nil {
		return err
	}
	t, _, err := h.lookup(r.Context(), tenant, args[0])
	if err != nil {
		return err
	}
	var userMsg string
	msgs, err := h.env.Store.TurnMessages(r.Context(), tenant, t.ID)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Role == forge.RoleUser {
			userMsg = m.ID
			break
		}
	}
	type item = map[string]any
	items := make([]item, 0, len(t.Input))
	for i, in := range t.Input {
		id := itemID("fco", t.ID, "in"+strconv.Itoa(i))
		switch in.Type {
		case forge.InputMessage:
			id = itemID("msg", t.ID, "in"+strconv.Itoa(i))
			if userMsg != "" {
				id = itemID("msg", t.ID, userMsg)
			}
			items = append(items, item{"type": "message", "id": id, "role": "user", "status": "completed",
				"content": []item{{"type": "input_text", "text": in.Text}}})
		case forge.InputToolResult:
			out := ""
			if in.Output != nil {
				out = *in.Output
			}
			items = append(items, item{"type": "function_call_output", "id": id, "call_id": in.CallID, "output": out, "status": "completed"})
		case forge.InputApproval:
			items = append(items, item{"type": "mcp_approval_response", "id": itemID("mcpa", t.ID, "in"+strconv.Itoa(i)), "approval_request_id": in.CallID,
				"approve": in.Approved != nil && *in.Approved, "reason": in.Reason})
		}
	}
	return pg.write(w, items)
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func modelOf(a *forge.Agent) model {
	return model{ID: a.Name, Object: "model", Created: a.CreatedAt.Unix(), OwnedBy: "forge"}
}

// listModels serves GET /models: the tenant's agents.
func (h *handler) listModels(w http.ResponseWriter, r *http.Request, tenant string, _ []string) error {
	data := []model{}
	opts := forge.ListOptions{Limit: 1000}
	for {
		agents, next, err := h.env.Store.ListAgents(r.Context(), tenant, opts)
		if err != nil {
			return err
		}
		for _, a := range agents {
			data = append(data, modelOf(a))
		}
		if next == "" {
			break
		}
		opts.Cursor = next
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	return nil
}

// getModel serves GET /models/{name}.
func (h *handler) getModel(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	a, err := h.env.Store.GetAgent(r.Context(), tenant, args[0])
	if err != nil {
		return notFound(err, "model", "model_not_found", "The model `%s` does not exist: models are Forge agents", args[0])
	}
	writeJSON(w, http.StatusOK, modelOf(a))
	return nil
}

// responseStatus is a turn's status in the Responses API's words.
func responseStatus(status string) string {
	switch status {
	case forge.TurnDone:
		return "completed"
	case forge.TurnErrored:
		return "failed"
	case forge.TurnRunning:
		return "in_progress"
	}
	return status
}

// deletedScope is the idempotency-record scope marking deleted responses
// (key: the turn id).
const deletedScope = "openai:response-deleted"

// turn reads a response's turn: ErrNotFound for one deleted through this
// API (docs/decisions.md, "Deleting a response").
func (h *handler) turn(ctx context.Context, tenant, id string) (*forge.Turn, error) {
	t, err := h.env.Store.GetTurnByID(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if _, err := h.env.Store.GetIdempotency(ctx, tenant, deletedScope, t.ID); err == nil {
		return nil, forge.Errorf(forge.ErrNotFound, "response %s was deleted", id)
	} else if !errors.Is(err, forge.ErrNotFound) {
		return nil, err
	}
	return t, nil
}

// deleteResponse serves DELETE /responses/{id}. Forge's log is
// append-only: the response is no longer retrievable by its id (GET,
// input_items, cancel, previous_response_id, item_reference answer 404),
// while its turn stays in its conversation's history, which the turns
// after it were built on (deleting the conversation removes that).
func (h *handler) deleteResponse(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	t, _, err := h.lookup(r.Context(), tenant, args[0])
	if err != nil {
		return err
	}
	if !t.Ended() {
		return newError(http.StatusConflict, "", "response_in_progress",
			"Cannot delete a response that is %s: cancel it first (POST /openai/v1/responses/%s/cancel).", responseStatus(t.Status), t.ID)
	}
	if _, err := h.env.Store.PutIdempotency(r.Context(), tenant, &forge.IdempotencyRecord{
		Key: t.ID, Scope: deletedScope, Status: http.StatusOK, Body: []byte(`{}`), CreatedAt: h.env.Clock.Now(),
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": t.ID, "object": "response", "deleted": true})
	return nil
}
