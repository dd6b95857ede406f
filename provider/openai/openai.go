// Package openai is the model provider for the OpenAI Chat Completions API,
// which also serves OpenAI-compatible servers (vLLM, llama.cpp, Ollama, LM
// Studio, OpenRouter, DeepSeek, ...).
//
// Requests go through github.com/openai/openai-go/v3 with explicit options
// only (the SDK's NewClient would silently read OPENAI_* variables; the
// Config given to New always wins) and with the SDK's own retries off: retry
// policy belongs to the caller.
//
// The stream is normalized into forge.ModelEvents: text and reasoning
// (reasoning_content, or reasoning, as compatible servers send it) as
// start/delta/end, tool calls accumulated per index and emitted once each,
// complete, after the text has ended, then one FinishEvent with the mapped
// finish reason and the usage of the final usage chunk. The request, auth,
// HTTP errors and SSE framing go through the SDK, but the request body is
// written here (body.go) and handed to the SDK raw: its reflective encoding
// of the params cost some twenty times as much (see BenchmarkChatBody), and
// TestChatBodyMatchesSDK holds the two to the same output. Chunks are read
// in one pass with gjson (a dependency of the SDK) instead of being decoded
// into the SDK's ChatCompletionChunk, which costs over ten times as much
// time and some 60 allocations per chunk (see BenchmarkChunkDecode).
//
// Both APIs report their waits (forge.ReportWaits): before the request and
// before each read of the response body, so that the consumer may write the
// deltas of a burst of chunks together.
//
// Errors are *forge.ModelError (HTTP status, the provider's message,
// Retryable for 408, 429, 5xx, connection failures and streams cut short,
// but not for a quota or billing error such as a 429 insufficient_quota,
// which no retry can fix; RetryAfter from retry-after-ms or Retry-After,
// seconds or an HTTP date, else from a 429's "try again in" message;
// ContextOverflow when the prompt does not fit the model's context, from
// OpenAI's context_length_exceeded code or the messages of compatible
// servers such as vLLM, llama.cpp and Ollama), except a cancelled or
// expired ctx, which yields ctx's error. Both providers of this package
// classify errors alike (see errors.go).
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/wire"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures a Provider. Nothing is read from the environment.
type Config struct {
	// Name is the provider name used in errors (default "openai").
	Name string
	// APIKey is sent as a bearer token; empty sends no Authorization
	// header (keyless local servers).
	APIKey string
	// BaseURL is the API root, ending in /v1 (default DefaultBaseURL).
	BaseURL string
	// HTTPClient defaults to a shared client without an overall timeout
	// (streams are long) and with a 10 minute response-header timeout.
	HTTPClient *http.Client
	// MaxTokensField is the request field ModelParams.MaxTokens is sent
	// in (Chat Completions only): MaxCompletionTokens, which OpenAI reads
	// (and requires for its reasoning models), or MaxTokens, the older
	// field, which compatible servers read (Ollama, and others, ignore
	// max_completion_tokens). Empty: MaxCompletionTokens when BaseURL is
	// OpenAI's own API (or empty), else MaxTokens.
	MaxTokensField string
}

// Values of Config.MaxTokensField.
const (
	MaxCompletionTokens = "max_completion_tokens"
	MaxTokens           = "max_tokens"
)

// IsOpenAIBaseURL tells whether baseURL is OpenAI's own API (empty means
// DefaultBaseURL).
func IsOpenAIBaseURL(baseURL string) bool {
	norm := func(u string) string {
		return strings.TrimSuffix(strings.TrimRight(strings.TrimSpace(u), "/"), "/v1")
	}
	return strings.TrimSpace(baseURL) == "" || norm(baseURL) == norm(DefaultBaseURL)
}

// Provider makes Chat Completions calls for any model id.
type Provider struct {
	name    string
	baseURL string
	chat    sdk.ChatCompletionService
	// maxTokens: send the limit as max_tokens, not max_completion_tokens.
	maxTokens bool
}

// New returns a provider for cfg.
func New(cfg Config) *Provider {
	official := IsOpenAIBaseURL(cfg.BaseURL)
	cfg, opts := cfg.requestOptions()
	field := cfg.MaxTokensField
	if field == "" {
		field = MaxTokens
		if official {
			field = MaxCompletionTokens
		}
	}
	// NewChatCompletionService, unlike NewClient, reads no environment.
	return &Provider{name: cfg.Name, baseURL: wire.DisplayURL(cfg.BaseURL), chat: sdk.NewChatCompletionService(opts...),
		maxTokens: field == MaxTokens}
}

// requestOptions fills cfg's defaults and returns the SDK options both
// APIs are called with: explicit base URL, client and key, no SDK retries
// (the registry's wrapper retries).
func (cfg Config) requestOptions() (Config, []option.RequestOption) {
	if cfg.Name == "" {
		cfg.Name = "openai"
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = wire.DefaultClient()
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return cfg, opts
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

var doneData = []byte("[DONE]")

// Stream implements forge.Model.
func (m *model) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		p := m.p
		id := req.Model
		if id == "" {
			id = m.id
		}
		body, err := appendChatBody(make([]byte, 0, bodySize(req)), id, req, p.maxTokens)
		if err != nil {
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name, Message: err.Error()})
			return
		}
		wait := forge.ReportWaits(ctx)
		wait() // for the answer
		var res *http.Response
		// The empty params are replaced by the body (see body.go).
		_, err = p.chat.New(ctx, sdk.ChatCompletionNewParams{},
			option.WithRequestBody("application/json", body),
			option.WithResponseBodyInto(&res))
		if err != nil {
			yield(forge.ModelEvent{}, requestError(ctx, p.name, res, err))
			return
		}
		defer res.Body.Close()
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "application/json" {
			// Some compatible servers answer an error with 200 and JSON.
			yield(forge.ModelEvent{}, jsonBodyError(ctx, p.name, res))
			return
		}
		waiting := wire.NewWaitingBody(res.Body, wait)
		res.Body = waiting
		dec := ssestream.NewDecoder(res)
		defer dec.Close()
		s := streamState{p: p, yield: yield}
		var ch chunk
		done := false
		for dec.Next() {
			ev := dec.Event()
			if bytes.HasPrefix(ev.Data, doneData) {
				done = true
				waiting.Stop()
				// Read the body to its end so the connection is reused,
				// but do not wait on a server that keeps it open.
				t := time.AfterFunc(time.Second, func() { res.Body.Close() })
				io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
				t.Stop()
				break
			}
			if ev.Type == "error" {
				yield(forge.ModelEvent{}, p.eventError(ev.Data))
				return
			}
			if err := ch.parse(ev.Data); err != nil {
				yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name,
					Message: fmt.Sprintf("%v: %.200q", err, ev.Data)})
				return
			}
			if ch.isError {
				yield(forge.ModelEvent{}, p.eventError(ev.Data))
				return
			}
			if !s.chunk(&ch) {
				return
			}
		}
		if ctx.Err() != nil {
			yield(forge.ModelEvent{}, ctx.Err())
			return
		}
		if err := dec.Err(); err != nil && s.finish == "" {
			// (A failure after the finish_reason only loses the usage
			// chunk: the reply itself is complete.)
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name,
				Message: wire.StreamCut(p.baseURL, id, err, chatMissing(s.gotUsage, false)), Retryable: true})
			return
		}
		if !done && s.finish == "" {
			// A clean EOF before [DONE] and before any finish_reason: the
			// server closed the stream (Ollama does when it stops a
			// repetition), or a proxy did.
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name,
				Message: wire.StreamCut(p.baseURL, id, nil, chatMissing(s.gotUsage, false)), Retryable: true})
			return
		}
		if !s.flush() {
			return
		}
		yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{
			Reason: s.finishReason(), Usage: s.usage}}, nil)
	}
}

// chunk is what the provider reads of a chat.completion.chunk.
type chunk struct {
	hasChoice bool // a choice with index 0 was present
	content   string
	refusal   string
	reasoning string
	calls     []wireToolCall
	finish    string
	usage     *forge.Usage
	usageBuf  forge.Usage
	isError   bool
}

type wireToolCall struct {
	index           int
	id, name        string
	argumentsSource string // not retained: copied into the accumulator
}

var errMalformed = errors.New("malformed stream chunk")

// parse reads data into c in one pass, without validating all of it (a
// cut chunk fails the brace check). Strings kept beyond this call are
// cloned: data is viewed without a copy.
func (c *chunk) parse(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return errMalformed
	}
	*c = chunk{calls: c.calls[:0]}
	raw := unsafe.String(unsafe.SliceData(data), len(data))
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			v.ForEach(func(_, ch gjson.Result) bool {
				c.choice(ch)
				return true
			})
		case "usage":
			if v.IsObject() {
				c.usageBuf = forge.Usage{
					InputTokens:     v.Get("prompt_tokens").Int(),
					OutputTokens:    v.Get("completion_tokens").Int(),
					CacheReadTokens: v.Get("prompt_tokens_details.cached_tokens").Int(),
					ReasoningTokens: v.Get("completion_tokens_details.reasoning_tokens").Int(),
				}
				c.usage = &c.usageBuf
			}
		case "error":
			c.isError = v.Type != gjson.Null
		}
		return true
	})
	return nil
}

func (c *chunk) choice(ch gjson.Result) {
	var index int64
	var delta gjson.Result
	var finish string
	ch.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "delta":
			delta = v
		case "finish_reason":
			if v.Type == gjson.String {
				finish = v.Str
			}
		}
		return true
	})
	if index != 0 {
		return // n is always 1
	}
	c.hasChoice = true
	c.finish = strings.Clone(finish)
	var reasoningContent, reasoning string
	delta.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.String && k.Str != "tool_calls" {
			return true
		}
		switch k.Str {
		case "content":
			c.content = strings.Clone(v.Str)
		case "refusal":
			c.refusal = strings.Clone(v.Str)
		case "reasoning_content":
			reasoningContent = v.Str
		case "reasoning":
			reasoning = v.Str
		case "tool_calls":
			v.ForEach(func(_, tc gjson.Result) bool {
				var w wireToolCall
				tc.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "index":
						w.index = int(v.Int())
					case "id":
						w.id = strings.Clone(v.Str)
					case "function":
						w.name = strings.Clone(v.Get("name").Str)
						w.argumentsSource = v.Get("arguments").Str
					}
					return true
				})
				c.calls = append(c.calls, w)
				return true
			})
		}
		return true
	})
	// Some servers send both fields with the same text: prefer
	// reasoning_content.
	if reasoningContent != "" {
		c.reasoning = strings.Clone(reasoningContent)
	} else {
		c.reasoning = strings.Clone(reasoning)
	}
}

const (
	blockNone = iota
	blockText
	blockReasoning
)

type callAcc struct {
	index    int
	id, name string
	args     []byte
}

// streamState turns chunks into events.
type streamState struct {
	p       *Provider
	yield   func(forge.ModelEvent, error) bool
	open    int // the block being streamed
	calls   []*callAcc
	flushed int // calls already emitted
	finish  string
	usage   forge.Usage
	// gotUsage: a usage chunk was received.
	gotUsage bool
}

func (s *streamState) emit(t forge.ModelEventType, delta string) bool {
	return s.yield(forge.ModelEvent{Type: t, Delta: delta}, nil)
}

// enter closes the open block if it differs from b and opens b.
func (s *streamState) enter(b int) bool {
	if s.open == b {
		return true
	}
	if !s.close() {
		return false
	}
	s.open = b
	if b == blockText {
		return s.emit(forge.TextStart, "")
	}
	return s.emit(forge.ReasoningStart, "")
}

func (s *streamState) close() bool {
	open := s.open
	s.open = blockNone
	switch open {
	case blockText:
		return s.emit(forge.TextEnd, "")
	case blockReasoning:
		return s.emit(forge.ReasoningEnd, "")
	}
	return true
}

// chunk handles one decoded chunk; false means the consumer stopped.
func (s *streamState) chunk(ch *chunk) bool {
	if ch.usage != nil {
		s.usage = *ch.usage
		s.gotUsage = true
	}
	if !ch.hasChoice {
		return true
	}
	if ch.reasoning != "" {
		if !s.enter(blockReasoning) || !s.emit(forge.ReasoningDelta, ch.reasoning) {
			return false
		}
	}
	for _, text := range [2]string{ch.content, ch.refusal} {
		if text != "" {
			if !s.enter(blockText) || !s.emit(forge.TextDelta, text) {
				return false
			}
		}
	}
	for j := range ch.calls {
		s.toolDelta(&ch.calls[j])
	}
	if ch.finish != "" {
		s.finish = ch.finish
		if !s.flush() {
			return false
		}
	}
	return true
}

func (s *streamState) toolDelta(tc *wireToolCall) {
	var c *callAcc
	for i := len(s.calls) - 1; i >= s.flushed; i-- {
		if s.calls[i].index == tc.index {
			c = s.calls[i]
			break
		}
	}
	// A new id at a known index is a new call (some compatible servers
	// send every call complete at index 0).
	if c == nil || (tc.id != "" && c.id != "" && tc.id != c.id) {
		c = &callAcc{index: tc.index}
		s.calls = append(s.calls, c)
	}
	if tc.id != "" {
		c.id = tc.id
	}
	if c.name == "" {
		c.name = tc.name
	}
	c.args = append(c.args, tc.argumentsSource...)
}

var callSeq atomic.Uint64

// flush closes the open block and emits the calls not yet emitted.
func (s *streamState) flush() bool {
	if !s.close() {
		return false
	}
	for ; s.flushed < len(s.calls); s.flushed++ {
		c := s.calls[s.flushed]
		id := c.id
		if id == "" {
			id = "call_" + strconv.FormatUint(uint64(time.Now().UnixNano()), 36) + strconv.FormatUint(callSeq.Add(1), 36)
		}
		args := json.RawMessage(c.args)
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		ev := forge.ModelEvent{Type: forge.ToolCallEvent, ToolCall: &forge.ToolCall{ID: id, Name: c.name, Arguments: args}}
		if !s.yield(ev, nil) {
			return false
		}
	}
	return true
}

func (s *streamState) finishReason() string {
	switch s.finish {
	case "length":
		return forge.FinishLength
	case "content_filter":
		return forge.FinishFilter
	case "tool_calls", "function_call":
		return forge.FinishToolCalls
	}
	// "stop", an absent reason or one we do not know: tool calls decide.
	if len(s.calls) > 0 {
		return forge.FinishToolCalls
	}
	return forge.FinishStop
}

// eventError converts an error event received mid-stream.
func (p *Provider) eventError(data []byte) error {
	msg, code, typ := errorFields(data)
	e := &forge.ModelError{Provider: p.name, Message: msg}
	switch {
	case isQuotaError(code, typ):
		e.Message = quotaMessage(msg, code, typ)
	case isContextOverflow(code, typ, msg):
		e.ContextOverflow = true
	default:
		e.Retryable = typ == "server_error" || code == "rate_limit_exceeded" || code == "server_error"
	}
	return e
}

// toolParameters turns an input schema into function parameters: absent or
// empty becomes {"type":"object","properties":{}}, a schema without a type
// gets "type":"object". Values are kept as raw JSON.
func toolParameters(schema json.RawMessage) (shared.FunctionParameters, error) {
	var fields map[string]json.RawMessage
	if s := bytes.TrimSpace(schema); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		if err := json.Unmarshal(s, &fields); err != nil {
			return nil, errors.New("input schema is not a JSON object")
		}
	}
	out := make(shared.FunctionParameters, len(fields)+2)
	for k, v := range fields {
		out[k] = v
	}
	if _, ok := out["type"]; !ok {
		out["type"] = "object"
	}
	if t, ok := fields["type"]; !ok || bytes.Equal(bytes.TrimSpace(t), []byte(`"object"`)) {
		if _, ok := out["properties"]; !ok {
			out["properties"] = map[string]any{}
		}
	}
	return out, nil
}
