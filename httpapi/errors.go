package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
)

// apiError is the body of every error answer: {"error": {"code", "message"}}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

// errorKinds maps each sentinel to its status, API code and the message
// used when the error carries no sentence of its own. This table is the one
// place errors become HTTP answers.
var errorKinds = []struct {
	err     error
	status  int
	code    string
	message string
}{
	{forge.ErrInvalid, http.StatusBadRequest, "invalid_request", "the request is invalid"},
	{forge.ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "a valid API key is required"},
	{forge.ErrNotFound, http.StatusNotFound, "not_found", "not found"},
	{forge.ErrTurnInProgress, http.StatusConflict, "turn_in_progress", "another turn is running in this session; wait for it, cancel it, or send \"supersede\": true"},
	{forge.ErrPendingActions, http.StatusConflict, "pending_actions", "the session has open calls: resolve them before sending a message"},
	{forge.ErrUnknownCall, http.StatusBadRequest, "unknown_call", "a resolution names a call that is not open"},
	{forge.ErrDuplicateCall, http.StatusBadRequest, "duplicate_call", "a call is resolved more than once"},
	{forge.ErrIncompleteResolution, http.StatusBadRequest, "incomplete_resolution", "every open call of a thread must be resolved in the same request"},
	{forge.ErrConflict, http.StatusConflict, "conflict", "the request conflicts with the current state"},
	{forge.ErrTooLarge, http.StatusRequestEntityTooLarge, "payload_too_large", "the request body exceeds 4 MiB"},
	{forge.ErrTurnEnded, http.StatusConflict, "conflict", "the turn has already ended"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed"},
	{errNotImplemented, http.StatusNotImplemented, "not_implemented", "not implemented yet"},
}

// classify returns the status, code and client-facing message of err.
// Anything that wraps no known sentinel is a 500 with a generic message.
func classify(err error) (status int, code, message string) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, "payload_too_large",
			"the request body exceeds " + strconv.FormatInt(mbe.Limit, 10) + " bytes"
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			msg := err.Error()
			if msg == "" || bare(err, k.err) {
				msg = k.message
			}
			return k.status, k.code, msg
		}
	}
	return http.StatusInternalServerError, "internal", "internal error"
}

// writeError answers err. The detail of an internal error goes to the log
// only.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The client went away; nobody reads an answer.
		s.log.Debug("client gone", "method", r.Method, "path", r.URL.Path, "err", err)
		w.WriteHeader(499)
		return
	}
	status, code, msg := classify(err)
	if status >= 500 && status != http.StatusNotImplemented {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forge"`)
	}
	writeJSON(w, status, errorBody{apiError{Code: code, Message: msg}})
}

// errorJSON is the encoded error answer for err (used to store an answer).
func errorJSON(err error) (int, []byte) {
	status, code, msg := classify(err)
	b, _ := json.Marshal(errorBody{apiError{Code: code, Message: msg}})
	return status, b
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	writeRaw(w, status, b)
}

// writeRaw answers an already encoded JSON body.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	_, _ = w.Write([]byte("\n"))
}

// listPage is the shape of every list answer.
type listPage[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// writeList answers a page of a list; an empty cursor is null.
func writeList[T any](w http.ResponseWriter, data []T, next string) {
	if data == nil {
		data = []T{}
	}
	p := listPage[T]{Data: data}
	if next != "" {
		p.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, p)
}

// notFound translates a store's ErrNotFound into a sentence naming what was
// not found; other errors pass through.
func notFound(err error, what, id string) error {
	if bare(err, forge.ErrNotFound) {
		return forge.Errorf(forge.ErrNotFound, "%s %q not found", what, id)
	}
	return err
}

// bare reports whether err wraps sentinel without a sentence of its own
// (the sentinel itself, or fmt.Errorf("context: %w", sentinel)).
func bare(err, sentinel error) bool {
	if !errors.Is(err, sentinel) {
		return false
	}
	msg := err.Error()
	return msg == sentinel.Error() || strings.HasSuffix(msg, ": "+sentinel.Error())
}

func invalid(format string, args ...any) error {
	return forge.Errorf(forge.ErrInvalid, format, args...)
}
