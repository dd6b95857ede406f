package openairesp

import (
	"net/http"

	"github.com/forge-runtime/forge/protocol/internal/openaierr"
)

// The facade's errors are OpenAI's (openaierr), shared with the other
// OpenAI facade.

type apiError = openaierr.Error

func newError(status int, param, code, format string, args ...any) error {
	return openaierr.New(status, param, code, format, args...)
}

func invalid(param, format string, args ...any) error {
	return openaierr.Invalid(param, format, args...)
}

func notFound(err error, param, code, format string, args ...any) error {
	return openaierr.NotFound(err, param, code, format, args...)
}

func writeErrorBody(w http.ResponseWriter, status int, param, code, message string) {
	openaierr.Write(w, status, param, code, message)
}

func writeJSON(w http.ResponseWriter, status int, v any) { openaierr.WriteJSON(w, status, v) }

// fail answers err in OpenAI's shape (openaierr.Fail).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	openaierr.Fail(h.env, w, r, err, "openai responses request failed")
}
