package openaichat

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

// apiError is an error answered with OpenAI's fields: a param and a code
// more specific than the Forge code its status comes from.
type apiError struct {
	status int
	param  string
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func newError(status int, param, code, format string, args ...any) error {
	return &apiError{status: status, param: param, code: code, msg: fmt.Sprintf(format, args...)}
}

func invalid(param, format string, args ...any) error {
	return newError(http.StatusBadRequest, param, "invalid_request", format, args...)
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
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

func errorJSON(status int, param, code, message string) errorBody {
	b := errorBody{Error: errorFields{Message: message, Type: errorType(status)}}
	if param != "" {
		b.Error.Param = &param
	}
	if code != "" {
		b.Error.Code = &code
	}
	return b
}

// writeErrorBody answers an error in OpenAI's shape.
func writeErrorBody(w http.ResponseWriter, status int, param, code, message string) {
	writeJSON(w, status, errorJSON(status, param, code, message))
}

// fail answers err: an apiError as it says, anything else through the
// server's classification (Forge's code becomes OpenAI's code).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeErrorBody(w, ae.status, ae.param, ae.code, ae.msg)
		return
	}
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		w.WriteHeader(499) // the client left; nobody reads an answer
		return
	}
	status, code, msg := h.env.Classify(err)
	protocol.SetRetryAfter(w, err)
	if status >= 500 {
		h.env.Log.Error("openai chat completions request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forge"`)
		code = "invalid_api_key"
	}
	writeErrorBody(w, status, "", code, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
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

// notFound turns a store's ErrNotFound into a 404 naming what was not found.
func notFound(err error, param, code, format string, args ...any) error {
	if errors.Is(err, forge.ErrNotFound) {
		return newError(http.StatusNotFound, param, code, format, args...)
	}
	return err
}
