package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/protocol"
)

// apiError is the body of every error answer: {"error": {"code", "message"}}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

// codeStatus maps each API error code to its HTTP status and the message
// used when an error carries no sentence of its own. forge.ErrorKinds maps
// sentinels to codes; with httpKinds below, these are the one place errors
// become HTTP answers.
var codeStatus = map[string]struct {
	status  int
	message string
}{
	"invalid_request":        {http.StatusBadRequest, "the request is invalid"},
	"unauthorized":           {http.StatusUnauthorized, "a valid API key is required"},
	"forbidden":              {http.StatusForbidden, "this request is not allowed"},
	"not_found":              {http.StatusNotFound, "not found"},
	"turn_in_progress":       {http.StatusConflict, "another turn is running in this session; wait for it, cancel it, or send \"supersede\": true"},
	"pending_actions":        {http.StatusConflict, "the session has open calls: resolve them before sending a message"},
	"unknown_call":           {http.StatusBadRequest, "a resolution names a call that is not open"},
	"duplicate_call":         {http.StatusBadRequest, "a call is resolved more than once"},
	"incomplete_resolution":  {http.StatusBadRequest, "every open call of a thread must be resolved in the same request"},
	"conflict":               {http.StatusConflict, "the request conflicts with the current state"},
	"payload_too_large":      {http.StatusRequestEntityTooLarge, "the request body exceeds 4 MiB"},
	"unsupported_media_type": {http.StatusUnsupportedMediaType, "a request body must be sent with Content-Type: application/json"},
	"unsupported_content":    {http.StatusBadRequest, "the model cannot take this kind of input"},
	"idempotency_mismatch":   {http.StatusUnprocessableEntity, "this Idempotency-Key was first used with another request"},
	"store_error":            {http.StatusServiceUnavailable, "the store failed; retry later"},
	"unavailable":            {http.StatusServiceUnavailable, "the server is shutting down; retry (another replica serves the request)"},
	"rate_limited":           {http.StatusTooManyRequests, "over this tenant's quota; retry after the Retry-After delay"},
	"too_many_subscribers":   {http.StatusTooManyRequests, "too many event streams are open; close one, or retry after the Retry-After delay"},
	// The HTTP layer's own codes (httpKinds).
	"method_not_allowed": {http.StatusMethodNotAllowed, "method not allowed"},
	"header_too_large":   {http.StatusRequestHeaderFieldsTooLarge, "the request's header fields exceed 64 KiB"},
	"request_timeout":    {http.StatusRequestTimeout, "the request body did not arrive in time"},
	"not_implemented":    {http.StatusNotImplemented, "not implemented yet"},
	"internal":           {http.StatusInternalServerError, "internal error"},
}

// httpKinds are the HTTP layer's own sentinels: answers about the
// transport rather than the domain.
var httpKinds = []forge.ErrorKind{
	{Err: errMethodNotAllowed, Code: "method_not_allowed"},
	{Err: errHeaderTooLarge, Code: "header_too_large"},
	{Err: errRequestTimeout, Code: "request_timeout"},
	{Err: errNotImplemented, Code: "not_implemented"},
	{Err: engine.ErrShuttingDown, Code: "unavailable"},
}

var (
	// errMethodNotAllowed is the 405 of a known path asked with another method.
	errMethodNotAllowed = errors.New("method_not_allowed")
	// errHeaderTooLarge is a request whose header section exceeds MaxHeaderBytes.
	errHeaderTooLarge = errors.New("header_too_large")
	// errRequestTimeout is a request body that did not arrive within
	// RequestBodyTimeout.
	errRequestTimeout = errors.New("request_timeout")
	// errNotImplemented marks an endpoint that exists but does not work yet.
	errNotImplemented = errors.New("not_implemented")
)

// errorCode returns the API code of err and the sentinel it wraps (nil
// for "internal").
func errorCode(err error) (string, error) {
	for _, k := range httpKinds {
		if errors.Is(err, k.Err) {
			return k.Code, k.Err
		}
	}
	return forge.ErrorCode(err), forge.ErrorSentinel(err)
}

// classify returns the status, code and client-facing message of err.
// Anything that wraps no known sentinel is a 500 with a generic message;
// a 5xx never shows the error's own text (it goes to the log).
func classify(err error) (status int, code, message string) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, "payload_too_large",
			"the request body exceeds " + strconv.FormatInt(mbe.Limit, 10) + " bytes"
	}
	code, sentinel := errorCode(err)
	st, ok := codeStatus[code]
	if !ok { // a code the table lacks (TestEveryErrorCodeHasAStatus)
		code, st = forge.CodeInternal, codeStatus[forge.CodeInternal]
	}
	msg := err.Error()
	if sentinel == nil || st.status >= 500 || msg == "" || bare(err, sentinel) {
		msg = st.message
	}
	return st.status, code, msg
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
	if status >= 500 && status != http.StatusNotImplemented && code != "unavailable" {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forge"`)
	}
	protocol.SetRetryAfter(w, err)
	if p := s.protocolFor(r); p != nil {
		p.WriteError(w, status, code, msg)
		return
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
	// Known length: a HEAD answer tells it too, and a long body is not
	// chunked (compress drops it when it gzips).
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
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
