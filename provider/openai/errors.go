package openai

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/wire"
)

// Error handling shared by the Chat Completions and Responses providers.

// requestError converts a failed request into a ModelError (or ctx's
// error): the HTTP status, the provider's message, Retryable for 408, 429
// and 5xx (not for a quota or billing error, nor for a context overflow),
// RetryAfter from the headers (or, on a 429, the message), and
// ContextOverflow when the prompt does not fit the model's context.
func requestError(ctx context.Context, name string, res *http.Response, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var (
		status         int
		header         http.Header
		body           io.ReadCloser
		msg, code, typ string
	)
	var apiErr *sdk.Error
	switch {
	case errors.As(err, &apiErr):
		status, msg, code, typ = apiErr.StatusCode, apiErr.Message, apiErr.Code, apiErr.Type
		if apiErr.Response != nil {
			// The SDK keeps the body it decoded (or failed to).
			header, body = apiErr.Response.Header, apiErr.Response.Body
		}
	case res != nil && res.StatusCode >= 400:
		// An error body the SDK could not decode (plain text, HTML, a
		// numeric code).
		status, header, body = res.StatusCode, res.Header, res.Body
	default:
		return &forge.ModelError{Provider: name, Message: err.Error(), Retryable: true}
	}
	if body != nil {
		b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
		body.Close()
		m, c, t := errorFields(b)
		if msg == "" {
			msg = m
		}
		if code == "" {
			code = c
		}
		if typ == "" {
			typ = t
		}
	}
	return statusError(name, status, header, msg, code, typ)
}

// statusError is the ModelError of an HTTP error answer.
func statusError(name string, status int, header http.Header, msg, code, typ string) *forge.ModelError {
	if msg == "" {
		msg = http.StatusText(status)
	}
	e := &forge.ModelError{Provider: name, StatusCode: status, Message: msg,
		Retryable: retryableStatus(status), RetryAfter: wire.RetryAfter(header, time.Now())}
	switch {
	case isQuotaError(code, typ):
		// Billing, not load: a 429 all the same, but retrying cannot help.
		e.Retryable = false
		e.Message = quotaMessage(msg, code, typ)
	case status != http.StatusTooManyRequests && isContextOverflow(code, typ, msg):
		// Some servers answer it with a 5xx; retrying the same prompt
		// cannot help either.
		e.ContextOverflow = true
		e.Retryable = false
	}
	if e.Retryable && e.RetryAfter == 0 && status == http.StatusTooManyRequests {
		e.RetryAfter = retryAfterMessage(msg)
	}
	return e
}

// jsonBodyError converts a JSON body received instead of an event stream
// (some compatible servers answer an error with 200 and JSON).
func jsonBodyError(ctx context.Context, name string, res *http.Response) error {
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	msg, code, typ := errorFields(b)
	if msg == "" {
		msg = "expected an event stream, got a JSON body"
	}
	e := &forge.ModelError{Provider: name, StatusCode: res.StatusCode, Message: msg}
	switch {
	case isQuotaError(code, typ):
		e.Message = quotaMessage(msg, code, typ)
	case isContextOverflow(code, typ, msg):
		e.ContextOverflow = true
	}
	return e
}

// errorFields reads an error body: OpenAI's {"error": {"message", "type",
// "code"}}, a bare {"error": "..."} (Ollama), or top-level message, type
// and code (older vLLM). A code may be a number. Without a message, msg is
// the body text, shortened.
func errorFields(b []byte) (msg, code, typ string) {
	if gjson.ValidBytes(b) {
		r := gjson.ParseBytes(b)
		if e := r.Get("error"); e.IsObject() {
			msg, code, typ = scalar(e.Get("message")), scalar(e.Get("code")), scalar(e.Get("type"))
		} else if e.Type == gjson.String {
			msg = e.Str
		}
		if r.IsObject() {
			if msg == "" {
				msg = scalar(r.Get("message"))
			}
			if code == "" {
				code = scalar(r.Get("code"))
			}
			if typ == "" {
				typ = scalar(r.Get("type"))
			}
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(string(b))
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
	}
	return msg, code, typ
}

// scalar is a string or number's text, else "".
func scalar(r gjson.Result) string {
	switch r.Type {
	case gjson.String:
		return r.Str
	case gjson.Number:
		return r.Raw
	}
	return ""
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

// isQuotaError tells a quota or billing error (OpenAI answers it with a 429
// too): the account is out of credit or over its spending limit, and no
// retry can succeed until that changes.
func isQuotaError(code, typ string) bool {
	switch code {
	case "insufficient_quota", "billing_hard_limit_reached", "billing_not_active":
		return true
	}
	return typ == "insufficient_quota"
}

// quotaMessage says, after the provider's message, why a quota error is
// not retried.
func quotaMessage(msg, code, typ string) string {
	label := code
	if label == "" {
		label = typ
	}
	return msg + " (" + label + ": the account is out of quota or credit, or over its billing limit;" +
		" not retried, as retrying cannot help until its plan or billing is fixed)"
}

// contextOverflowPhrases are what OpenAI and compatible servers say of a
// prompt too long for the model: OpenAI ("exceeds the context window",
// "maximum context length"), vLLM, DeepSeek, OpenRouter and Mistral
// ("maximum context length"), llama.cpp ("exceeds the available context
// size"), Ollama ("input exceeds maximum context length"), LM Studio
// ("context length"), xAI ("maximum prompt length").
var contextOverflowPhrases = []string{
	"context window", "context length", "maximum context", "context size",
	"maximum prompt length", "prompt is too long",
}

// isContextOverflow tells an error about a request too long for the model.
func isContextOverflow(code, typ, msg string) bool {
	if code == "context_length_exceeded" || typ == "exceed_context_size_error" {
		return true
	}
	m := strings.ToLower(msg)
	for _, p := range contextOverflowPhrases {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// retryAfterMessageRE finds the delay in "Please try again in 1.5s" / "in
// 20ms" (OpenAI) or "Please retry in 33.5s" (Gemini's compatible API).
var retryAfterMessageRE = regexp.MustCompile(`(?i)(?:try again|retry) in\s*(\d+(?:\.\d+)?)\s*(ms|s|seconds?)\b`)

func retryAfterMessage(msg string) time.Duration {
	m := retryAfterMessageRE.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0
	}
	if strings.EqualFold(m[2], "ms") {
		return time.Duration(v * float64(time.Millisecond))
	}
	return time.Duration(v * float64(time.Second))
}

// chatMissing lists what a Chat Completions stream ended without: always
// the finish_reason (a stream with one is complete), the usage chunk when
// none came, and the [DONE] line unless it came.
func chatMissing(gotUsage, gotDone bool) []string {
	missing := []string{"finish_reason"}
	if !gotUsage {
		missing = append(missing, "usage")
	}
	if !gotDone {
		missing = append(missing, "[DONE]")
	}
	return missing
}
