// Package openaitest is a loopback fake of the OpenAI Chat Completions API
// for tests: unit tests of the openai provider, engine and HTTP tests, and
// integration tests that run a real `forge serve` pointed at it with
// OPENAI_BASE_URL=srv.URL().
//
// Responses are queued with Enqueue and served in order, one per request;
// when the queue is empty the server answers with a default reply (the text
// "ok", see SetDefault), so load tests can use it unattended. Streams are
// written exactly as OpenAI writes them: a first chunk with the assistant
// role, content (or tool_calls) deltas, a chunk with the finish_reason and
// an empty delta, the usage chunk with "choices":[] when the request asked
// for stream_options.include_usage, then "data: [DONE]".
//
// The server validates requests the way the real API does (a tool message
// must answer an open tool_call_id of the preceding assistant message, every
// tool call must be answered, function parameters must be an object schema)
// and answers 400 with an OpenAI error object otherwise; a refused request
// (400 or 401) does not consume a queued response. Every request that
// passes the key check is recorded (see Requests).
package openaitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	lb     *fakeapi.Loopback
	script *fakeapi.Script[Response] // both endpoints answer from it
	chat   fakeapi.Log[Request]
	// responses are the Responses API requests (see responses.go).
	responses fakeapi.Log[ResponsesRequest]

	mu        sync.Mutex // guards key and responder
	key       string
	responder func(*Request) (Response, bool)

	seq     atomic.Int64 // completion and call ids
	created int64
}

// New starts a fake on 127.0.0.1, closed by t.Cleanup.
func New(t testing.TB) *Server {
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake on 127.0.0.1 outside a test (a load command's model
// server, say); the caller must Close it.
func Start() *Server {
	s := &Server{script: fakeapi.NewScript(Text("ok")), created: time.Now().Unix()}
	s.lb = fakeapi.Listen(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to configure a client with (OPENAI_BASE_URL): it ends
// in /v1.
func (s *Server) URL() string { return s.lb.URL() + "/v1" }

// Close stops the server, first releasing streams stalled by HangAfter.
func (s *Server) Close() { s.lb.Close() }

// Connections is the number of connections the server has accepted.
func (s *Server) Connections() int64 { return s.lb.Connections() }

// SetGate makes every request call gate before it is answered (nil: no
// gate): a test holds requests until as many as it wants are in flight.
func (s *Server) SetGate(gate func()) { s.lb.SetGate(gate) }

// SetAPIKey makes the server require "Authorization: Bearer key" and answer
// 401 otherwise, as OpenAI does. The empty key (the default) accepts any.
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	s.key = key
	s.mu.Unlock()
}

// Enqueue queues responses, served one per request in order.
func (s *Server) Enqueue(r ...Response) { s.script.Enqueue(r...) }

// SetResponder makes the server answer a request with what f returns when
// f says ok, before looking at the queue: tests where several agents call
// the model at once answer each by what it was sent.
func (s *Server) SetResponder(f func(*Request) (Response, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responder = f
}

// SetDefault sets the answer used when the queue is empty.
func (s *Server) SetDefault(r Response) { s.script.SetDefault(r) }

// Pending is the number of queued responses not yet served.
func (s *Server) Pending() int { return s.script.Pending() }

// RecordRequests turns recording of request bodies on (the default) or off
// (for load tests).
func (s *Server) RecordRequests(on bool) {
	s.chat.SetOn(on)
	s.responses.SetOn(on)
}

// Requests returns the chat requests received so far, in arrival order
// (including those refused as invalid).
func (s *Server) Requests() []Request { return s.chat.All() }

// LastRequest returns the most recent chat request; ok is false when there
// was none.
func (s *Server) LastRequest() (r Request, ok bool) { return s.chat.Last() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/responses" {
		s.serveResponses(w, r)
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "unknown_url", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", fmt.Sprintf("Invalid method %s for /v1/chat/completions, expected POST", r.Method))
		return
	}
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key", "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "could not read the request body: "+err.Error())
		return
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "We could not parse the JSON body of your request. ("+err.Error()+")")
		return
	}
	if s.chat.On() {
		req.Header = r.Header.Clone()
		req.Body = body
		s.chat.Add(req)
	}
	if param, msg := req.validate(); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", param, "", msg)
		return
	}

	s.mu.Lock()
	responder := s.responder
	s.mu.Unlock()
	resp, ok := Response{}, false
	if responder != nil {
		resp, ok = responder(&req)
	}
	if !ok {
		resp = s.script.Next()
	}

	for k, vs := range resp.header {
		w.Header()[k] = vs
	}
	if resp.status != 0 {
		s.writeStatus(w, resp, chatOverflow)
		return
	}
	if !req.Stream {
		s.writeCompletion(w, &req, resp, len(body))
		return
	}
	var events [][]byte
	var marks fakeapi.Marks
	if resp.isRaw {
		events = resp.raw
	} else {
		events, marks = s.render(&req, resp, len(body))
	}
	resp.delivery = resp.deliver(marks, len(events))
	s.stream(w, r.Context(), resp, events)
}

// The error objects of a prompt over the context window.
const (
	chatOverflow      = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	responsesOverflow = `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`
)

func (s *Server) writeStatus(w http.ResponseWriter, resp Response, overflow string) {
	if (resp.status == http.StatusTooManyRequests || resp.status == http.StatusServiceUnavailable) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	if resp.overflow {
		resp.body = overflow
	}
	if resp.body != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.status)
		io.WriteString(w, resp.body)
		return
	}
	typ, code, msg := "api_error", "", http.StatusText(resp.status)
	switch {
	case resp.status == http.StatusTooManyRequests:
		typ, code, msg = "requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again in 1s."
	case resp.status == http.StatusUnauthorized:
		typ, code, msg = "invalid_request_error", "invalid_api_key", "Incorrect API key provided."
	case resp.status >= 500:
		typ, msg = "server_error", "The server had an error while processing your request. Sorry about that!"
	case resp.status >= 400:
		typ = "invalid_request_error"
	}
	if resp.errMsg != "" {
		msg = resp.errMsg
	}
	writeError(w, resp.status, typ, "", code, msg)
}

// writeError writes an OpenAI error object.
func writeError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	b := []byte(`{"error":{"message":`)
	b = appendString(b, msg)
	b = append(b, `,"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"param":`...)
	b = appendNullable(b, param)
	b = append(b, `,"code":`...)
	b = appendNullable(b, code)
	b = append(b, "}}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// stream writes events one by one, flushing each, applying the response's
// delay, stall, cut and error settings (an error counted past the last
// event is not sent).
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, resp Response, events [][]byte) {
	w.Header().Set("X-Request-Id", "req_"+strconv.FormatInt(s.seq.Add(1), 10))
	d := resp.delivery
	var errEvent []byte
	if d.ErrAfter > len(events) {
		d.ErrAfter = 0
	} else if d.ErrAfter > 0 {
		errEvent = []byte(`data: {"error":{"message":`)
		errEvent = appendString(errEvent, resp.errMsg)
		errEvent = append(errEvent, `,"type":"server_error","param":null,"code":null}}`+"\n\n"...)
	}
	fakeapi.Stream(w, ctx, s.lb.Done(), d, events, errEvent)
}

// chunkWriter renders chat.completion.chunk events.
type chunkWriter struct {
	head      []byte // `data: {"id":...,"choices":[`
	usageNull bool
	events    [][]byte
}

func (s *Server) newChunkWriter(req *Request) *chunkWriter {
	id := s.seq.Add(1)
	b := []byte(`data: {"id":"chatcmpl-`)
	b = fmt.Appendf(b, "OTEST%019d", id)
	b = append(b, `","object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, s.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, req.Model)
	b = append(b, `,"system_fingerprint":"fp_openaitest","choices":[`...)
	return &chunkWriter{head: b, usageNull: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
}

// choice adds a chunk with one choice; delta is a JSON object.
func (c *chunkWriter) choice(delta []byte, finish string) {
	b := make([]byte, 0, len(c.head)+len(delta)+80)
	b = append(b, c.head...)
	b = append(b, `{"index":0,"delta":`...)
	b = append(b, delta...)
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = appendNullable(b, finish)
	b = append(b, "}]"...)
	if c.usageNull {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, "}\n\n"...)
	c.events = append(c.events, b)
}

func (c *chunkWriter) usage(t Tokens) {
	b := append([]byte(nil), c.head...)
	b = append(b, `],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(t.Input), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(t.Output), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(t.Input+t.Output), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(t.Cached), 10)
	b = append(b, `,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, int64(t.Reasoning), 10)
	b = append(b, `,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`+"\n\n"...)
	c.events = append(c.events, b)
}

var doneEvent = []byte("data: [DONE]\n\n")

// render turns a Response into the SSE events of a streamed completion,
// and where its points fall.
func (s *Server) render(req *Request, resp Response, bodyLen int) ([][]byte, fakeapi.Marks) {
	var marks fakeapi.Marks
	c := s.newChunkWriter(req)
	outChars := 0
	hasCalls := false
	first := true
	index := 0 // tool call index, across ToolCalls items
	for _, it := range resp.items {
		switch it.kind {
		case itemText, itemReasoning:
			field := `{"content":`
			if it.kind == itemReasoning {
				field = `{"reasoning_content":`
			}
			for _, p := range it.pieces {
				if first {
					c.choice([]byte(`{"role":"assistant","content":""}`), "")
					first = false
				}
				c.choice(appendString([]byte(field), p, '}'), "")
				marks.Delta(len(c.events))
				outChars += len(p)
			}
		case itemCalls:
			for _, call := range it.calls {
				i := index
				index++
				if call.ID == "" {
					call.ID = fmt.Sprintf("call_otest%014d", s.seq.Add(1))
				}
				args := call.Args
				if args == "" {
					args = "{}"
				}
				hasCalls = true
				outChars += len(call.Name) + len(args)
				h := []byte(`{"tool_calls":[{"index":`)
				if first {
					// As OpenAI does when a reply starts with a tool call.
					h = []byte(`{"role":"assistant","content":null,"tool_calls":[{"index":`)
				}
				h = strconv.AppendInt(h, int64(i), 10)
				h = append(h, `,"id":`...)
				h = appendString(h, call.ID)
				h = append(h, `,"type":"function","function":{"name":`...)
				h = appendString(h, call.Name)
				h = append(h, `,"arguments":""}}]`...)
				if first {
					h = append(h, `,"refusal":null`...)
					first = false
				}
				h = append(h, '}')
				c.choice(h, "")
				for _, frag := range fakeapi.Fragments(args, 7) {
					d := []byte(`{"tool_calls":[{"index":`)
					d = strconv.AppendInt(d, int64(i), 10)
					d = append(d, `,"function":{"arguments":`...)
					d = appendString(d, frag)
					d = append(d, "}}]}"...)
					c.choice(d, "")
				}
			}
		}
	}
	if first {
		c.choice([]byte(`{"role":"assistant","content":""}`), "")
	}
	finish := "stop"
	if hasCalls {
		finish = "tool_calls"
	}
	if resp.finish != nil {
		finish = *resp.finish
	}
	marks.Finish = len(c.events)
	if resp.unfinished {
		marks.Finished = marks.Finish
		return c.events, marks
	}
	if finish != "" {
		c.choice([]byte(`{}`), finish)
	}
	marks.Finished = len(c.events)
	if c.usageNull {
		t := Tokens{Input: max(1, bodyLen/4), Output: max(1, outChars/4)}
		if resp.tokens != nil {
			t = *resp.tokens
		}
		c.usage(t)
	}
	return append(c.events, doneEvent), marks
}

// writeCompletion answers a non-streaming request with a chat.completion.
func (s *Server) writeCompletion(w http.ResponseWriter, req *Request, resp Response, bodyLen int) {
	if resp.isRaw {
		writeError(w, http.StatusInternalServerError, "server_error", "", "", "openaitest: a Raw response can only answer a streaming request")
		return
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	var text, reasoning string
	var calls []call
	for _, it := range resp.items {
		switch it.kind {
		case itemText:
			for _, p := range it.pieces {
				text += p
			}
		case itemReasoning:
			for _, p := range it.pieces {
				reasoning += p
			}
		case itemCalls:
			for _, c := range it.calls {
				var wc call
				wc.ID, wc.Type, wc.Function.Name, wc.Function.Arguments = c.ID, "function", c.Name, c.Args
				if wc.ID == "" {
					wc.ID = fmt.Sprintf("call_otest%014d", s.seq.Add(1))
				}
				if wc.Function.Arguments == "" {
					wc.Function.Arguments = "{}"
				}
				calls = append(calls, wc)
			}
		}
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if resp.finish != nil && *resp.finish != "" {
		finish = *resp.finish
	}
	t := Tokens{Input: max(1, bodyLen/4), Output: max(1, (len(text)+len(reasoning))/4)}
	if resp.tokens != nil {
		t = *resp.tokens
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
	if text != "" || len(calls) == 0 {
		msg["content"] = text
	}
	if reasoning != "" {
		msg["reasoning_content"] = reasoning
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	out := map[string]any{
		"id":      fmt.Sprintf("chatcmpl-OTEST%019d", s.seq.Add(1)),
		"object":  "chat.completion",
		"created": s.created,
		"model":   req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage": map[string]any{
			"prompt_tokens": t.Input, "completion_tokens": t.Output, "total_tokens": t.Input + t.Output,
			"prompt_tokens_details":     map[string]any{"cached_tokens": t.Cached, "audio_tokens": 0},
			"completion_tokens_details": map[string]any{"reasoning_tokens": t.Reasoning, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
		},
		"service_tier":       "default",
		"system_fingerprint": "fp_openaitest",
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// appendString appends s as a JSON string (without HTML escaping, as
// OpenAI writes it), then any trailing bytes.
func appendString(b []byte, s string, trailing ...byte) []byte {
	return fakeapi.AppendString(b, s, trailing...)
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}
