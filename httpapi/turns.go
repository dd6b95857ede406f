package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
)

// turnBody is the body of POST /v1/sessions/{sid}/turns.
type turnBody struct {
	Input          []inputBody `json:"input"`
	PreviousTurnID *string     `json:"previous_turn_id"`
	NewRoot        *bool       `json:"new_root"`
	Stream         *bool       `json:"stream"`
	Background     *bool       `json:"background"`
	Supersede      *bool       `json:"supersede"`
	// IfBusy is what the turn does while another runs (API.md, "Busy
	// sessions"): reject, enqueue, interrupt or steer.
	IfBusy *string `json:"if_busy"`
	// OutputSchema is this turn's structured output (the engine checks
	// it: shape, bounds, a valid JSON Schema).
	OutputSchema *forge.OutputSchema `json:"output_schema"`
	// Overrides are the turn's per-request settings, as the turn
	// records them (the engine checks them; a locked agent takes none).
	Overrides *forge.TurnOverrides `json:"overrides"`
}

// inputBody is one input item; which fields apply depends on its type.
type inputBody struct {
	Type     *string    `json:"type"`
	Text     *string    `json:"text"`
	CallID   *string    `json:"call_id"`
	Approved *bool      `json:"approved"`
	Reason   *string    `json:"reason"`
	Output   *string    `json:"output"`
	IsError  *bool      `json:"is_error"`
	Token    *string    `json:"token"`
	Files    []fileBody `json:"files"`
}

// fileBody is one attachment of a message item.
type fileBody struct {
	FileID   string  `json:"file_id"`
	Data     *string `json:"data"`
	MimeType string  `json:"mime_type"`
	Filename string  `json:"filename"`
	URL      string  `json:"url"`
}

// turnMode is how POST /turns answers.
type turnMode int

const (
	modeWait turnMode = iota
	modeBackground
	modeStream
)

// request validates the body's shape and returns the engine request and
// the answer mode. sse reports an Accept: text/event-stream header.
func (b *turnBody) request(sse bool) (engine.TurnRequest, turnMode, error) {
	var req engine.TurnRequest
	if len(b.Input) == 0 {
		return req, 0, invalid("input must hold at least one item: a message, or resolutions of open calls")
	}
	messages := 0
	for i := range b.Input {
		in, err := b.Input[i].input(i)
		if err != nil {
			return req, 0, err
		}
		if in.Type == forge.InputMessage {
			messages++
		}
		req.Input = append(req.Input, in)
	}
	if messages > 1 {
		return req, 0, invalid("input holds %d messages; send one message per turn", messages)
	}
	if messages == 1 && len(b.Input) > 1 {
		return req, 0, invalid("input mixes a message with resolutions of open calls: resolve the calls in one turn, then send the message")
	}
	if p := b.PreviousTurnID; p != nil {
		if *p == "" {
			return req, 0, invalid("previous_turn_id must be a turn id (omit it to chain from the session tip)")
		}
		req.PreviousTurnID = p
	}
	req.NewRoot = b.NewRoot != nil && *b.NewRoot
	req.OutputSchema = b.OutputSchema
	req.Overrides = b.Overrides
	req.Supersede = b.Supersede != nil && *b.Supersede
	if b.IfBusy != nil {
		if *b.IfBusy == "" {
			return req, 0, invalid("if_busy must be reject, enqueue, interrupt or steer (omit it for the agent's default)")
		}
		if err := forge.CheckIfBusy(*b.IfBusy, "if_busy"); err != nil {
			return req, 0, err
		}
		if req.Supersede && *b.IfBusy != forge.IfBusyInterrupt {
			return req, 0, invalid("supersede: true is if_busy: interrupt; it cannot be used with if_busy: %s", *b.IfBusy)
		}
		req.IfBusy = *b.IfBusy
	}
	if req.NewRoot && req.PreviousTurnID != nil {
		return req, 0, invalid("previous_turn_id and new_root: true exclude each other")
	}
	stream := sse || (b.Stream != nil && *b.Stream)
	background := b.Background != nil && *b.Background
	switch {
	case stream && background:
		if sse && (b.Stream == nil || !*b.Stream) {
			return req, 0, invalid("background: true asks for a 202 answer, but the Accept header asks for an event stream")
		}
		return req, 0, invalid("stream and background exclude each other")
	case stream:
		return req, modeStream, nil
	case background:
		return req, modeBackground, nil
	}
	return req, modeWait, nil
}

// input checks item i's shape: its type, the fields that type requires,
// and no field of another type.
func (in *inputBody) input(i int) (forge.Input, error) {
	if in.Type == nil || *in.Type == "" {
		return forge.Input{}, invalid("input[%d].type is required: message, approval, tool_result or auth", i)
	}
	t := *in.Type
	allowed := map[string][]string{
		forge.InputMessage:    {"text", "files"},
		forge.InputApproval:   {"call_id", "approved", "reason"},
		forge.InputToolResult: {"call_id", "output", "is_error"},
		forge.InputAuth:       {"call_id", "token"},
	}[t]
	if allowed == nil {
		return forge.Input{}, invalid("input[%d].type must be message, approval, tool_result or auth, got %q", i, t)
	}
	present := map[string]bool{
		"text": in.Text != nil, "call_id": in.CallID != nil, "approved": in.Approved != nil,
		"reason": in.Reason != nil, "output": in.Output != nil, "is_error": in.IsError != nil,
		"token": in.Token != nil, "files": in.Files != nil,
	}
	for _, f := range allowed {
		delete(present, f)
	}
	for _, f := range []string{"text", "call_id", "approved", "reason", "output", "is_error", "token", "files"} {
		if present[f] {
			return forge.Input{}, invalid("input[%d].%s does not apply to a %s item", i, f, t)
		}
	}
	out := forge.Input{Type: t}
	if t != forge.InputMessage {
		if in.CallID == nil || *in.CallID == "" {
			return out, invalid("input[%d].call_id is required for a %s item", i, t)
		}
		out.CallID = *in.CallID
	}
	switch t {
	case forge.InputMessage:
		if (in.Text == nil || strings.TrimSpace(*in.Text) == "") && len(in.Files) == 0 {
			return out, invalid("input[%d].text is required and must not be blank (unless the message carries files)", i)
		}
		if in.Text != nil && strings.TrimSpace(*in.Text) != "" {
			out.Text = *in.Text
		}
	case forge.InputApproval:
		if in.Approved == nil {
			return out, invalid("input[%d].approved is required: true or false", i)
		}
		out.Approved = in.Approved
		if in.Reason != nil {
			out.Reason = *in.Reason
		}
	case forge.InputToolResult:
		if in.Output == nil {
			return out, invalid("input[%d].output is required for a tool_result item", i)
		}
		out.Output = in.Output
		out.IsError = in.IsError != nil && *in.IsError
	case forge.InputAuth:
		if in.Token == nil || *in.Token == "" {
			return out, invalid("input[%d].token is required for an auth item", i)
		}
		out.Token = *in.Token
	}
	return out, nil
}

// attachFiles decodes and checks the attachments of the request's message
// (inline content is spooled, not stored: the engine stores it when the
// turn begins). The closer removes what was spooled.
func (s *Server) attachFiles(r *http.Request, b *turnBody, req *engine.TurnRequest) (func(), error) {
	for i := range b.Input {
		in := &b.Input[i]
		if len(in.Files) == 0 {
			continue
		}
		if s.files == nil {
			return func() {}, forge.Errorf(errNotImplemented, "this server's store keeps no files")
		}
		atts := make([]files.Attachment, len(in.Files))
		for j, f := range in.Files {
			atts[j] = files.Attachment{FileID: f.FileID, Data: f.Data, MimeType: f.MimeType, Filename: f.Filename, URL: f.URL}
		}
		inputs, closer, err := files.Resolve(atts, tenantOf(r), s.maxFileBytes, fmt.Sprintf("input[%d].files", i))
		if err != nil {
			return closer, err
		}
		req.Input[i].Files = inputs
		return closer, nil // one message per turn
	}
	return func() {}, nil
}

// detach returns the request's context without its cancellation: a state
// change the server has accepted (starting a turn, cancelling one) runs to
// its end even if the client hangs up.
func detach(r *http.Request) context.Context {
	return context.WithoutCancel(r.Context())
}

func turnPath(sid, tid string) string {
	return "/v1/sessions/" + url.PathEscape(sid) + "/turns/" + url.PathEscape(tid)
}

// turnScope is where the Idempotency-Keys of a session's turns live (POST
// /turns and /compact share it, as the engine keeps one key per turn).
func turnScope(sid string) string { return "turns:" + sid }

// createTurn starts a turn and answers in the requested mode. A request
// repeating an Idempotency-Key gets the turn the key's first request
// started, answered in the mode this request asks for (the mode its body
// asks for is the first request's: another body is idempotency_mismatch).
func (s *Server) createTurn(w http.ResponseWriter, r *http.Request) error {
	sid := r.PathValue("sid")
	var body turnBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	req, mode, err := body.request(acceptsSSE(r))
	if err != nil {
		return err
	}
	closeFiles, err := s.attachFiles(r, &body, &req)
	defer closeFiles()
	if err != nil {
		return err
	}
	q, err := s.newIdemRequest(r, turnScope(sid), &body, 0)
	if err != nil {
		return err
	}
	if q != nil {
		// The engine's read of the session is the only one: a key of a
		// session that is not the caller's is recorded in the caller's
		// tenant, pending, and its requests are answered not_found by
		// the engine like any other.
		req.IdempotencyKey = q.key
	}
	if mode == modeStream {
		// The stream's slot is taken before the turn starts: a refused
		// stream starts nothing.
		release, err := s.streams.open(tenantOf(r), sid)
		if err != nil {
			return err
		}
		defer release()
	}
	streamCtx, cancelStream := context.WithCancel(r.Context())
	defer cancelStream()
	st, err := s.startTurn(streamCtx, r, sid, req, mode == modeStream, q)
	if err != nil {
		return notFound(err, "session", sid)
	}
	noteTurn(w, st.id)
	if mode == modeStream {
		w.Header().Set("Location", turnPath(sid, st.id))
		w.Header().Set("Forge-Turn-Id", st.id)
		if st.replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		s.streamEvents(streamCtx, cancelStream, w, r, sid, st.id, 0, st.events)
		return nil
	}
	return s.answerTurn(w, r, sid, st, mode == modeBackground)
}

// startedTurn is the turn a request started, or the one its
// Idempotency-Key's first request started.
type startedTurn struct {
	id string
	// created is the turn as created, as JSON: the 202 answer. For a
	// repeated key, the first request's bytes. Encoded from turn when
	// needed (createdJSON): a wait-mode turn without a key never is.
	created  []byte
	turn     *forge.Turn
	events   iter.Seq2[forge.Event, error] // when streaming: from turn.created on
	replayed bool
}

// startTurn starts the turn req asks for; with an Idempotency-Key (q not
// nil) only the key's first request does, and the others find its turn.
// ctx bounds the event stream (when stream is set).
func (s *Server) startTurn(ctx context.Context, r *http.Request, sid string, req engine.TurnRequest, stream bool, q *idemRequest) (*startedTurn, error) {
	tenant := tenantOf(r)
	if q == nil {
		return s.newTurn(ctx, r, tenant, sid, req, stream)
	}
	rec, unlock, err := s.begin(detach(r), q)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec.Status != 0 {
		return s.knownTurn(ctx, tenant, sid, rec.Body, stream)
	}
	// The first request, or a retry of one that ended before recording its
	// turn (a crash, a refusal): the engine starts at most one turn per key
	// and returns that one to a repeat.
	// The engine owns the key's turn: a repeat, here or on another
	// replica, gets that turn back from it.
	st, err := s.newTurn(ctx, r, tenant, sid, req, stream)
	if err != nil {
		return nil, err
	}
	created, err := st.createdJSON()
	if err != nil {
		return nil, err
	}
	rec, err = s.complete(detach(r), q, http.StatusAccepted, created)
	switch {
	case err != nil:
		s.log.Warn("recording a turn's idempotency key failed", "session_id", sid, "turn_id", st.id, "err", err)
	case !bytes.Equal(rec.Body, st.created):
		st.created, st.replayed = rec.Body, true // another process recorded the key's turn first
	}
	return st, nil
}

// newTurn asks the engine for the turn.
func (s *Server) newTurn(ctx context.Context, r *http.Request, tenant, sid string, req engine.TurnRequest, stream bool) (*startedTurn, error) {
	var (
		turn   *forge.Turn
		events iter.Seq2[forge.Event, error]
		err    error
	)
	if stream {
		// Subscribed before the turn begins: no delta is missed however
		// fast the turn runs.
		turn, events, err = s.rt.StreamTurn(ctx, tenant, sid, req)
	} else {
		turn, err = s.rt.StartTurn(detach(r), tenant, sid, req)
	}
	if err != nil {
		return nil, err
	}
	return &startedTurn{id: turn.ID, turn: turn, events: events}, nil
}

// createdJSON returns the turn as created, as JSON.
func (st *startedTurn) createdJSON() ([]byte, error) {
	if st.created == nil {
		b, err := json.Marshal(st.turn)
		if err != nil {
			return nil, err
		}
		st.created = b
	}
	return st.created, nil
}

// knownTurn is the turn an earlier request started, created its JSON as
// recorded.
func (s *Server) knownTurn(ctx context.Context, tenant, sid string, created []byte, stream bool) (*startedTurn, error) {
	var t struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(created, &t); err != nil || t.ID == "" {
		return nil, fmt.Errorf("the idempotency record of a turn holds no turn: %.100q", created)
	}
	st := &startedTurn{id: t.ID, created: created, replayed: true}
	if stream {
		st.events = s.rt.Events(ctx, tenant, sid, engine.EventsQuery{TurnID: t.ID})
	}
	return st, nil
}

// answerTurn answers a started turn: 202 with it as created, or 200 with
// it once ended.
func (s *Server) answerTurn(w http.ResponseWriter, r *http.Request, sid string, st *startedTurn, background bool) error {
	w.Header().Set("Location", turnPath(sid, st.id))
	if st.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if background {
		created, err := st.createdJSON()
		if err != nil {
			return err
		}
		writeRaw(w, http.StatusAccepted, created)
		return nil
	}
	// A turn may outlast the server's WriteTimeout: no deadline while
	// waiting, a fresh one for the answer.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	done, err := s.rt.WaitTurn(r.Context(), tenantOf(r), sid, st.id)
	if err != nil {
		return err
	}
	_ = rc.SetWriteDeadline(time.Now().Add(s.writeWait))
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	writeJSON(w, http.StatusOK, done)
	return nil
}

func (s *Server) listTurns(w http.ResponseWriter, r *http.Request) error {
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	switch st := r.URL.Query().Get("status"); {
	case st == "queued" && opts.Cursor == "":
		// The queue, in the order it runs (the inspector's queue panel).
		turns, err := s.store.QueuedTurns(r.Context(), tenantOf(r), ses.ID, opts.Limit)
		if err != nil {
			return notFound(err, "session", ses.ID)
		}
		writeList(w, turns, "")
		return nil
	case st == "queued":
		return invalid("status=queued lists one page: it takes no cursor")
	case r.URL.Query().Has("status"):
		return invalid("status must be queued (or absent for every turn), got %q", st)
	}
	turns, next, err := s.store.ListTurns(r.Context(), tenantOf(r), ses.ID, opts)
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	writeList(w, turns, next)
	return nil
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request) error {
	sid, tid := r.PathValue("sid"), r.PathValue("tid")
	turn, err := s.store.GetTurn(r.Context(), tenantOf(r), sid, tid)
	if err != nil {
		if errors.Is(err, forge.ErrNotFound) {
			return forge.Errorf(forge.ErrNotFound, "turn %q not found in session %q", tid, sid)
		}
		return err
	}
	writeJSON(w, http.StatusOK, turn)
	return nil
}

// cancelBody is the optional body of POST /cancel.
type cancelBody struct {
	Reason *string `json:"reason"`
	// TurnID names the turn to cancel: a queued one (it then never runs)
	// or the running one. Absent: the running turn.
	TurnID *string `json:"turn_id"`
}

// cancel cancels the session's running turn. With an Idempotency-Key the
// first answer (the cancelled turn, or the conflict of an idle session) is
// recorded and replayed to retries for 24 h.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	tenant := tenantOf(r)
	var body cancelBody
	if err := decodeBody(w, r, &body, false); err != nil {
		return err
	}
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	reason := ""
	if body.Reason != nil {
		reason = *body.Reason
	}
	if body.TurnID != nil && *body.TurnID == "" {
		return invalid("turn_id must be a turn id (omit it to cancel the running turn)")
	}
	q, err := s.newIdemRequest(r, "cancel:"+ses.ID, &body, idempotencyTTL)
	if err != nil {
		return err
	}
	do := func(ctx context.Context) (*forge.Turn, error) {
		if body.TurnID == nil {
			turn, err := s.rt.Cancel(ctx, tenant, ses.ID, reason)
			return turn, cancelError(err, ses.ID)
		}
		turn, err := s.rt.CancelTurn(ctx, tenant, ses.ID, *body.TurnID, reason)
		switch {
		case err == nil:
			return turn, nil
		case errors.Is(err, forge.ErrNotFound):
			return nil, forge.Errorf(forge.ErrNotFound, "turn %q not found in session %q", *body.TurnID, ses.ID)
		case errors.Is(err, forge.ErrTurnEnded):
			return nil, forge.Errorf(forge.ErrConflict, "turn %q has already ended", *body.TurnID)
		}
		return nil, err
	}
	if q == nil {
		turn, err := do(detach(r))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, turn)
		return nil
	}
	return s.idempotent(w, r, q, func(ctx context.Context) (int, []byte, error) {
		turn, err := do(ctx)
		switch {
		case err == nil:
			b, err := json.Marshal(turn)
			return http.StatusOK, b, err
		case errors.Is(err, forge.ErrConflict) || errors.Is(err, forge.ErrTurnEnded):
			status, b := errorJSON(err)
			return status, b, nil
		}
		// Not an answer to remember: the request may be retried.
		return 0, nil, err
	})
}

func cancelError(err error, sid string) error {
	if err == nil {
		return nil
	}
	if bare(err, forge.ErrConflict) || errors.Is(err, forge.ErrTurnEnded) {
		return forge.Errorf(forge.ErrConflict, "no turn is running in session %q", sid)
	}
	return notFound(err, "session", sid)
}

// compactBody is the optional body of POST /compact.
type compactBody struct {
	Background *bool `json:"background"`
}

// compact runs a compaction now, as a turn of its own: 200 with the ended
// turn, or 202 with the running one when background is true.
func (s *Server) compact(w http.ResponseWriter, r *http.Request) error {
	var body compactBody
	if err := decodeBody(w, r, &body, false); err != nil {
		return err
	}
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	req := engine.TurnRequest{Compact: true}
	q, err := s.newIdemRequest(r, turnScope(ses.ID), &body, 0)
	if err != nil {
		return err
	}
	if q != nil {
		req.IdempotencyKey = q.key
	}
	st, err := s.startTurn(r.Context(), r, ses.ID, req, false, q)
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	noteTurn(w, st.id)
	return s.answerTurn(w, r, ses.ID, st, body.Background != nil && *body.Background)
}
