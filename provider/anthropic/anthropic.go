// Package anthropic is the model provider for the Anthropic Messages API
// (POST /v1/messages, always streamed).
//
// Requests go through github.com/anthropics/anthropic-sdk-go/v2 with explicit
// options only: the service is built with NewMessageService, which reads no
// ANTHROPIC_* variable, the SDK's OpenTelemetry spans (whose content capture
// ANTHROPIC_OPEN_TELEMETRY_* variables would otherwise switch on) are off,
// and the SDK's own retries are off: retry policy belongs to the caller.
//
// The SDK sends API version 2026-10-21. In that version temperature, top_p
// and top_k are rejected with a 400 on every model, so ModelParams.Temperature
// is not sent (and the SDK has no field for it). reasoning_effort turns on
// thinking: adaptive thinking with output_config.effort on the models that
// have it (Claude 4.6 and later; the Claude 5 family rejects the budget form),
// a budget_tokens budget on older ones (see budgets). max_tokens, which the
// API requires, is ModelParams.MaxTokens or a default for the model, plus the
// thinking budget when one applies.
//
// The stream is normalized into forge.ModelEvents: one text start/delta/end
// per text block; thinking blocks as reasoning start/delta/end, whose end
// carries the block's signature (or a redacted_thinking block's data) in
// ModelEvent.Provider, to be sent back unchanged in ModelPart.Provider; a
// tool_use block's input_json deltas are accumulated, not forwarded, and the
// call is emitted once, complete, at its content_block_stop (empty input is
// {}); then one FinishEvent with the mapped stop_reason and the usage of
// message_start and message_delta combined, where Usage.InputTokens is the
// whole prompt (the API's input_tokens plus cache_read_input_tokens plus
// cache_creation_input_tokens, as OpenAI's prompt_tokens includes cached
// tokens) and CacheReadTokens and CacheWriteTokens are a breakdown of it.
// A reply cut by max_tokens inside a tool call's input is a ModelError, not
// a call with broken arguments.
// Events are read with gjson in one pass instead of being decoded into the
// SDK's MessageStreamEventUnion (see BenchmarkEventDecode).
//
// Errors are *forge.ModelError (HTTP status, the API's message, Retryable for
// 408, 409, 429, 5xx and 529 overloaded, connection failures and streams cut
// short, unless the API's x-should-retry header says otherwise; RetryAfter
// from retry-after-ms or Retry-After; ContextOverflow when the prompt does not
// fit the model's context window), except a cancelled or expired ctx, which
// yields ctx's error.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/tidwall/gjson"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/wire"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.anthropic.com"

// Config configures a Provider. Nothing is read from the environment.
type Config struct {
	// Name is the provider name used in errors (default "anthropic").
	Name string
	// APIKey is sent both as "Authorization: Bearer" (as the v2 SDK does)
	// and as "x-api-key" (which older Anthropic-compatible proxies read);
	// empty sends neither.
	APIKey string
	// BaseURL is the API root without /v1, as ANTHROPIC_BASE_URL is
	// (default DefaultBaseURL); a trailing /v1 is removed.
	BaseURL string
	// HTTPClient defaults to a shared client without an overall timeout
	// (streams are long) and with a 10 minute response-header timeout.
	HTTPClient *http.Client
	// DisablePromptCache stops sending the top-level cache_control marker
	// that makes the API cache the prompt prefix (on by default: an agent
	// loop resends a growing history, and reading it from the cache costs
	// a tenth of the input price).
	DisablePromptCache bool
}

// Provider makes Messages API calls for any model id.
type Provider struct {
	name    string
	baseURL string // for error messages, without a password
	cache   bool
	msgs    sdk.MessageService
}

// New returns a provider for cfg.
func New(cfg Config) *Provider {
	if cfg.Name == "" {
		cfg.Name = "anthropic"
	}
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	base = strings.TrimSuffix(base, "/v1")
	if base == "" {
		base = DefaultBaseURL
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = wire.DefaultClient()
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey), option.WithHeader("x-api-key", cfg.APIKey))
	}
	// NewMessageService, unlike NewClient, reads no environment.
	return &Provider{name: cfg.Name, baseURL: wire.DisplayURL(base), cache: !cfg.DisablePromptCache, msgs: sdk.NewMessageService(opts...)}
}

// Name is the provider's name.
func (p *Provider) Name() string { return p.name }

// Model returns the model id (sent verbatim; ModelRequest.Model, when set,
// takes precedence).
func (p *Provider) Model(id string) forge.Model { return &model{p: p, id: id} }

type model struct {
	p  *Provider
	id string
}

// Stream implements forge.Model.
func (m *model) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		p := m.p
		id := req.Model
		if id == "" {
			id = m.id
		}
		params, err := buildParams(id, req, p.cache)
		if err != nil {
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name, Message: err.Error()})
			return
		}
		wait := forge.ReportWaits(ctx)
		wait() // for the answer
		var res *http.Response
		// The SDK's Stream decodes every event into its union type; only
		// the request, its error and the response are used here.
		st := p.msgs.NewStreaming(ctx, params, option.WithResponseInto(&res))
		if err := st.Err(); err != nil {
			if res != nil && res.Body != nil {
				defer res.Body.Close()
			}
			yield(forge.ModelEvent{}, p.requestError(ctx, res, err))
			return
		}
		if res == nil || res.Body == nil {
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name, Message: "no response", Retryable: true})
			return
		}
		defer res.Body.Close()
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "application/json" {
			// A proxy answering an error with 200 and JSON.
			yield(forge.ModelEvent{}, p.jsonBodyError(ctx, res))
			return
		}
		body := wire.NewWaitingBody(res.Body, wait)
		res.Body = body
		dec := ssestream.NewDecoder(res)
		defer dec.Close()
		s := streamState{p: p, yield: yield, maxTokens: params.MaxTokens}
		for dec.Next() {
			ev := dec.Event()
			typ := ev.Type
			if typ == "" {
				typ = gjson.GetBytes(ev.Data, "type").Str
			}
			switch typ {
			case "ping", "":
				continue
			case "error":
				yield(forge.ModelEvent{}, p.eventError(ev.Data))
				return
			}
			if !s.event(typ, ev.Data) {
				return
			}
			if s.stopped {
				// Read the rest so the connection is reused, but do not
				// wait on a server that keeps the stream open.
				body.Stop()
				t := time.AfterFunc(100*time.Millisecond, func() { res.Body.Close() })
				io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
				t.Stop()
				break
			}
		}
		if ctx.Err() != nil {
			yield(forge.ModelEvent{}, ctx.Err())
			return
		}
		if s.stopReason == "" {
			// (A failure after message_delta only loses message_stop: the
			// reply itself is complete.)
			msg := wire.StreamCut(p.baseURL, id, dec.Err(), []string{"message_delta with a stop_reason"})
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name, Message: msg, Retryable: true})
			return
		}
		if !s.finish() {
			return
		}
		yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{
			Reason: s.finishReason(), Usage: s.usage.forge()}}, nil)
	}
}

// requestError converts a failed request into a ModelError (or ctx's error).
func (p *Provider) requestError(ctx context.Context, res *http.Response, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" {
			msg = errorMessage([]byte(apiErr.RawJSON()))
		}
		if msg == "" {
			msg = string(apiErr.Type())
		}
		if msg == "" {
			msg = http.StatusText(apiErr.StatusCode)
		}
		h := http.Header(nil)
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		return p.statusError(apiErr.StatusCode, string(apiErr.Type()), msg, h)
	}
	if res != nil && res.StatusCode >= 400 {
		var msg string
		if res.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
			msg = errorMessage(b)
		}
		if msg == "" {
			msg = http.StatusText(res.StatusCode)
		}
		return p.statusError(res.StatusCode, "", msg, res.Header)
	}
	return &forge.ModelError{Provider: p.name, Message: err.Error(), Retryable: true}
}

func (p *Provider) statusError(status int, typ, msg string, h http.Header) *forge.ModelError {
	e := &forge.ModelError{Provider: p.name, StatusCode: status, Message: msg,
		Retryable:       retryableStatus(status),
		RetryAfter:      wire.RetryAfter(h, time.Now()),
		ContextOverflow: contextOverflow(status, typ, msg)}
	// The API says itself whether a retry may succeed.
	switch strings.ToLower(h.Get("x-should-retry")) {
	case "true":
		e.Retryable = true
	case "false":
		e.Retryable = false
	}
	return e
}

func (p *Provider) jsonBodyError(ctx context.Context, res *http.Response) error {
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	typ := gjson.GetBytes(b, "error.type").Str
	msg := errorMessage(b)
	if msg == "" {
		msg = "expected an event stream, got a JSON body"
	}
	status := res.StatusCode
	if s := errorTypeStatus[typ]; s != 0 {
		status = s
	}
	return p.statusError(status, typ, msg, res.Header)
}

// errorTypeStatus is the HTTP status the API uses for each error type.
var errorTypeStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

// eventError converts an error event received mid-stream. Its StatusCode is
// the status the API gives that error type on a response (529 for
// overloaded_error), as the HTTP status itself was 200.
func (p *Provider) eventError(data []byte) error {
	typ := gjson.GetBytes(data, "error.type").Str
	msg := gjson.GetBytes(data, "error.message").Str
	if msg == "" {
		msg = strings.TrimSpace(string(data))
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
	}
	status := errorTypeStatus[typ]
	return &forge.ModelError{Provider: p.name, StatusCode: status, Message: msg,
		Retryable:       retryableStatus(status) || typ == "",
		ContextOverflow: contextOverflow(status, typ, msg)}
}

// errorMessage extracts error.message (or a message string) from an error
// body, else returns the body text, shortened.
func errorMessage(b []byte) string {
	if gjson.ValidBytes(b) {
		r := gjson.ParseBytes(b)
		if m := r.Get("error.message"); m.Type == gjson.String && m.Str != "" {
			return m.Str
		}
		if m := r.Get("error"); m.Type == gjson.String && m.Str != "" {
			return m.Str
		}
		if m := r.Get("message"); m.Type == gjson.String && m.Str != "" {
			return m.Str
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusConflict ||
		code == http.StatusTooManyRequests || code >= 500
}

// contextOverflow tells whether an error means the prompt does not fit the
// model's context window ("prompt is too long: 208310 tokens > 200000
// maximum", "input length and `max_tokens` exceed context limit: ...") or
// the request body its size limit (413 request_too_large).
func contextOverflow(status int, typ, msg string) bool {
	if status == http.StatusRequestEntityTooLarge || typ == "request_too_large" {
		return true
	}
	if status != http.StatusBadRequest && typ != "invalid_request_error" {
		return false
	}
	m := strings.ToLower(msg)
	for _, s := range []string{"prompt is too long", "exceed context limit", "exceeds the context window", "context window exceeded", "too many tokens"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// cutMessage is the message of a reply cut inside a tool call's input.
func cutMessage(name string, maxTokens int64) string {
	return fmt.Sprintf("the reply reached max_tokens (%d) while writing the input of a call to %q, so the call is incomplete; raise model_params.max_tokens",
		maxTokens, name)
}
