// Package openaierr is the OpenAI error shape the OpenAI-speaking
// facades answer in (Responses, Chat Completions, Files): one error type,
// one body, one way of failing a request.
package openaierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

// Error is an error answered with OpenAI's fields: a param and a code
// more specific than the Forge code its status comes from.
type Error struct {
	Status int
	Param  string
	Code   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// New is an Error with a formatted message.
func New(status int, param, code, format string, args ...any) error {
	return &Error{Status: status, Param: param, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Invalid is a 400 invalid_request about param.
func Invalid(param, format string, args ...any) error {
	return New(http.StatusBadRequest, param, "invalid_request", format, args...)
}

// NotFound turns a store's ErrNotFound into a 404 naming what was not
// found; other errors are returned as they are.
func NotFound(err error, param, code, format string, args ...any) error {
	if errors.Is(err, forge.ErrNotFound) {
		return New(http.StatusNotFound, param, code, format, args...)
	}
	return err
}

// Body is OpenAI's error answer.
type Body struct {
	Error Fields `json:"error"`
}

// Fields are the fields of an error answer.
type Fields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// errorType is OpenAI's error type for an HTTP status.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// NewBody is the answer of an error with these fields ("" leaves param
// and code null).
func NewBody(status int, param, code, message string) Body {
	b := Body{Error: Fields{Message: message, Type: errorType(status)}}
	if param != "" {
		b.Error.Param = &param
	}
	if code != "" {
		b.Error.Code = &code
	}
	return b
}

// Write answers an error in OpenAI's shape.
func Write(w http.ResponseWriter, status int, param, code, message string) {
	WriteJSON(w, status, NewBody(status, param, code, message))
}

// Fail answers err: an Error as it says, anything else through the
// server's classification (Forge's code becomes OpenAI's code). what
// names the request in the log of a 5xx.
func Fail(env protocol.Env, w http.ResponseWriter, r *http.Request, err error, what string) {
	var ae *Error
	if errors.As(err, &ae) {
		Write(w, ae.Status, ae.Param, ae.Code, ae.Msg)
		return
	}
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		w.WriteHeader(499) // the client left; nobody reads an answer
		return
	}
	status, code, msg := env.Classify(err)
	protocol.SetRetryAfter(w, err)
	if status >= 500 {
		env.Log.Error(what, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forge"`)
		code = "invalid_api_key"
	}
	Write(w, status, "", code, msg)
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}
