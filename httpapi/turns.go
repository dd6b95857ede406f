package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// idempotencyTTL is how long a stored answer is replayed (API.md: 24 h).
const idempotencyTTL = 24 * time.Hour

// turnBody is the body of POST /v1/sessions/{sid}/turns.
type turnBody struct {
	Input          []inputBody `json:"input"`
	PreviousTurnID *string     `json:"previous_turn_id"`
	NewRoot        *bool       `json:"new_root"`
	Stream         *bool       `json:"stream"`
	Background     *bool       `json:"background"`
	Supersede      *bool       `json:"supersede"`
}

// inputBody is one input item; which fields apply depends on its type.
type inputBody struct {
	Type     *string `json:"type"`
	Text     *string `json:"text"`
	CallID   *string `json:"call_id"`
	Approved *bool   `json:"approved"`
	Reason   *string `json:"reason"`
	Output   *string `json:"output"`
	IsError  *bool   `json:"is_error"`
	Token    *string `json:"token"`
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
	req.Supersede = b.Supersede != nil && *b.Supersede
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
		forge.InputMessage:    {"text"},
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
		"token": in.Token != nil,
	}
	for _, f := range allowed {
		delete(present, f)
	}
	for _, f := range []string{"text", "call_id", "approved", "reason", "output", "is_error", "token"} {
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
		if in.Text == nil || strings.TrimSpace(*in.Text) == "" {
			return out, invalid("input[%d].text is required and must not be blank", i)
		}
		out.Text = *in.Text
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

// detach returns the request's context without its cancellation: a state
// change the server has accepted (starting a turn, cancelling one) runs to
// its end even if the client hangs up.
func detach(r *http.Request) context.Context {
	return context.WithoutCancel(r.Context())
}

func turnPath(sid, tid string) string {
	return "/v1/sessions/" + url.PathEscape(sid) + "/turns/" + url.PathEscape(tid)
}

// createTurn starts a turn and answers in the requested mode. A request
// repeating an Idempotency-Key gets the first turn, answered in the mode
// this request asks for.
func (s *Server) createTurn(w http.ResponseWriter, r *http.Request) error {
	tenant := tenantOf(r)
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	var body turnBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	req, mode, err := body.request(acceptsSSE(r))
	if err != nil {
		return err
	}
	if req.IdempotencyKey, err = idempotencyKey(r); err != nil {
		return err
	}
	var turn *forge.Turn
	var events iter.Seq2[forge.Event, error]
	streamCtx, cancelStream := context.WithCancel(r.Context())
	defer cancelStream()
	if mode == modeStream {
		// Subscribed before the turn begins: no delta is missed however
		// fast the turn runs.
		turn, events, err = s.rt.StreamTurn(streamCtx, tenant, ses.ID, req)
	} else {
		turn, err = s.rt.StartTurn(detach(r), tenant, ses.ID, req)
	}
	if err != nil {
		if req.PreviousTurnID != nil && bare(err, forge.ErrNotFound) {
			return forge.Errorf(forge.ErrNotFound, "previous turn %q not found in session %q", *req.PreviousTurnID, ses.ID)
		}
		return notFound(err, "session", ses.ID)
	}
	w.Header().Set("Location", turnPath(ses.ID, turn.ID))
	switch mode {
	case modeBackground:
		writeJSON(w, http.StatusAccepted, turn)
	case modeStream:
		w.Header().Set("Forge-Turn-Id", turn.ID)
		s.streamEvents(streamCtx, cancelStream, w, r, ses.ID, turn.ID, events)
	default:
		// A turn may outlast the server's WriteTimeout: no deadline while
		// waiting, a fresh one for the answer.
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{})
		done, err := s.rt.WaitTurn(r.Context(), tenant, ses.ID, turn.ID)
		if err != nil {
			return err
		}
		_ = rc.SetWriteDeadline(time.Now().Add(s.writeWait))
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		writeJSON(w, http.StatusOK, done)
	}
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
}

// cancel cancels the session's running turn. With an Idempotency-Key the
// first answer (the cancelled turn, or the conflict of an idle session) is
// stored and replayed to retries for 24 h.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	tenant := tenantOf(r)
	var body cancelBody
	if err := decodeBody(w, r, &body, false); err != nil {
		return err
	}
	key, err := idempotencyKey(r)
	if err != nil {
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
	ctx := detach(r)
	if key == "" {
		turn, err := s.rt.Cancel(ctx, tenant, ses.ID, reason)
		if err != nil {
			return cancelError(err, ses.ID)
		}
		writeJSON(w, http.StatusOK, turn)
		return nil
	}

	scope := "cancel:" + ses.ID
	unlock := s.locks.lock(tenant + "\x00" + scope + "\x00" + key)
	defer unlock()
	rec, err := s.store.GetIdempotency(ctx, tenant, scope, key)
	switch {
	case err == nil && s.clock.Now().Sub(rec.CreatedAt) < idempotencyTTL:
		replay(w, rec)
		return nil
	case err != nil && !errors.Is(err, forge.ErrNotFound):
		return err
	}
	var (
		status int
		answer []byte
	)
	turn, err := s.rt.Cancel(ctx, tenant, ses.ID, reason)
	switch {
	case err == nil:
		status = http.StatusOK
		if answer, err = json.Marshal(turn); err != nil {
			return err
		}
	case errors.Is(err, forge.ErrConflict):
		status, answer = errorJSON(cancelError(err, ses.ID))
	default:
		// Not an answer to remember: the request may be retried.
		return cancelError(err, ses.ID)
	}
	rec, err = s.store.PutIdempotency(ctx, tenant, &forge.IdempotencyRecord{
		Key: key, Scope: scope, Status: status, Body: answer, CreatedAt: s.clock.Now(),
	})
	if err != nil {
		s.log.Warn("storing the cancel answer for its idempotency key failed", "session", ses.ID, "err", err)
		writeRaw(w, status, answer)
		return nil
	}
	if !bytes.Equal(rec.Body, answer) && s.clock.Now().Sub(rec.CreatedAt) < idempotencyTTL {
		// Another request with this key answered first (in another
		// process): its answer is the one.
		replay(w, rec)
		return nil
	}
	writeRaw(w, status, answer)
	return nil
}

// replay answers a stored idempotent answer.
func replay(w http.ResponseWriter, rec *forge.IdempotencyRecord) {
	w.Header().Set("Idempotent-Replayed", "true")
	writeRaw(w, rec.Status, rec.Body)
}

func cancelError(err error, sid string) error {
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
	tenant := tenantOf(r)
	req := engine.TurnRequest{Compact: true}
	if req.IdempotencyKey, err = idempotencyKey(r); err != nil {
		return err
	}
	turn, err := s.rt.StartTurn(detach(r), tenant, ses.ID, req)
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	w.Header().Set("Location", turnPath(ses.ID, turn.ID))
	if body.Background != nil && *body.Background {
		writeJSON(w, http.StatusAccepted, turn)
		return nil
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	done, err := s.rt.WaitTurn(r.Context(), tenant, ses.ID, turn.ID)
	if err != nil {
		return err
	}
	_ = rc.SetWriteDeadline(time.Now().Add(s.writeWait))
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	writeJSON(w, http.StatusOK, done)
	return nil
}
