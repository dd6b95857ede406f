// Package anthropictest is a loopback fake of the Anthropic Messages API
// (POST /v1/messages) for tests: unit tests of the anthropic provider,
// engine and HTTP tests, and integration tests that run a real
// `forge serve` pointed at it with ANTHROPIC_BASE_URL=srv.URL().
//
// Responses are queued with Enqueue and served in order, one per request;
// when the queue is empty the server answers with a default reply (the text
// "ok", see SetDefault), so load tests can use it unattended. Streams are
// written exactly as the API writes them: named events message_start,
// content_block_start, a ping after the first block starts,
// content_block_delta (text_delta, thinking_delta, signature_delta,
// input_json_delta), content_block_stop, message_delta with the stop_reason
// and the cumulative usage, message_stop; a failure mid-stream is an
// "event: error". A request without "stream": true gets the Message object.
//
// The server checks requests as the API does and answers with the API's
// error object otherwise: the anthropic-version header (2023-06-01 or
// 2026-10-21), the key (x-api-key, or "Authorization: Bearer" as the v2
// SDKs send it; x-api-key wins when both are present) when SetAPIKey is
// set, required fields, sampling parameters (refused by 2026-10-21),
// thinking budgets, tool schemas, and the history: roles alternate, no
// empty content or text blocks, every tool_use answered by a tool_result at
// the start of the very next user message and no tool_result without its
// tool_use, thinking blocks sent back with the signature this server gave
// them (see Sign), and, with budget thinking, a tool loop whose assistant
// message starts with its thinking block. A refused request does not
// consume a queued response. Every request that passes the key check is
// recorded (see Requests).
package anthropictest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	lb       *fakeapi.Loopback
	script   *fakeapi.Script[Response]
	requests fakeapi.Log[Request]

	mu  sync.Mutex // guards key
	key string

	seq    atomic.Int64 // message and tool_use ids
	reqSeq atomic.Int64 // request ids
}

// New starts a fake on 127.0.0.1, closed by t.Cleanup.
func New(t testing.TB) *Server {
	s := &Server{script: fakeapi.NewScript(Text("ok"))}
	s.lb = fakeapi.Start(t, http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to configure a client with (ANTHROPIC_BASE_URL): the
// root, without /v1.
func (s *Server) URL() string { return s.lb.URL() }

// Close stops the server, first releasing streams stalled by HangAfter.
func (s *Server) Close() { s.lb.Close() }

// Connections is the number of connections the server has accepted.
func (s *Server) Connections() int64 { return s.lb.Connections() }

// SetGate makes every request call gate before it is answered (nil: no
// gate): a test holds requests until as many as it wants are in flight.
func (s *Server) SetGate(gate func()) { s.lb.SetGate(gate) }

// SetAPIKey makes the server require the key (x-api-key or a bearer
// token) and answer 401 otherwise, as the API does. The empty key (the
// default) accepts any.
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	s.key = key
	s.mu.Unlock()
}

// Enqueue queues responses, served one per request in order.
func (s *Server) Enqueue(r ...Response) { s.script.Enqueue(r...) }

// SetDefault sets the answer used when the queue is empty.
func (s *Server) SetDefault(r Response) { s.script.SetDefault(r) }

// Pending is the number of queued responses not yet served.
func (s *Server) Pending() int { return s.script.Pending() }

// RecordRequests turns recording of requests on (the default) or off (for
// load tests).
func (s *Server) RecordRequests(on bool) { s.requests.SetOn(on) }

// Requests returns the Messages requests received so far, in arrival order
// (including those refused as invalid).
func (s *Server) Requests() []Request { return s.requests.All() }

// LastRequest returns the most recent request; ok is false when there was
// none.
func (s *Server) LastRequest() (r Request, ok bool) { return s.requests.Last() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("request-id", fmt.Sprintf("req_01ATEST%017d", s.reqSeq.Add(1)))
	if r.URL.Path != "/v1/messages" {
		writeError(w, http.StatusNotFound, "not_found_error", "Not found")
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", fmt.Sprintf("Method Not Allowed: %s %s", r.Method, r.URL.Path))
		return
	}
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key != "" {
		got := r.Header.Get("x-api-key")
		if got == "" {
			got, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		switch {
		case got == "":
			writeError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
			return
		case got != key:
			writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 32<<20))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
		return
	}
	var req Request
	err = json.Unmarshal(body, &req)
	if err == nil {
		err = req.decodeSystem()
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "There was an issue with your request body: "+err.Error())
		return
	}
	if s.requests.On() {
		req.Header = r.Header.Clone()
		req.Body = body
		s.requests.Add(req)
	}
	version := r.Header.Get("anthropic-version")
	switch version {
	case Version20230601, Version20261021:
	case "":
		writeError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("anthropic-version: unknown version %q", version))
		return
	}
	if msg := req.validate(version); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}

	resp := s.script.Next()

	for k, vs := range resp.header {
		w.Header()[k] = vs
	}
	if resp.status != 0 {
		writeStatus(w, resp)
		return
	}
	if !req.Stream {
		s.writeMessage(w, &req, resp, len(body))
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

// errorTypes is the error type of each status.
var errorTypes = map[int]struct{ typ, msg string }{
	400: {"invalid_request_error", "Bad request"},
	401: {"authentication_error", "invalid x-api-key"},
	402: {"billing_error", "Your credit balance is too low to access the Anthropic API."},
	403: {"permission_error", "Your API key does not have permission to use the specified resource."},
	404: {"not_found_error", "Not found"},
	413: {"request_too_large", "Request exceeds the maximum allowed number of bytes."},
	429: {"rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute. Please try again later."},
	500: {"api_error", "Internal server error"},
	504: {"timeout_error", "Request timed out"},
	529: {"overloaded_error", "Overloaded"},
}

func writeStatus(w http.ResponseWriter, resp Response) {
	if resp.status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	if resp.body != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.status)
		io.WriteString(w, resp.body)
		return
	}
	e, ok := errorTypes[resp.status]
	if !ok {
		e.typ, e.msg = "api_error", http.StatusText(resp.status)
		if resp.status < 500 {
			e.typ = "invalid_request_error"
		}
	}
	if resp.errMsg != "" {
		e.msg = resp.errMsg
	}
	writeError(w, resp.status, e.typ, e.msg)
}

func errorBody(typ, msg string) string {
	b := []byte(`{"type":"error","error":{"type":`)
	b = appendString(b, typ)
	b = append(b, `,"message":`...)
	b = appendString(b, msg)
	b = append(b, "}}"...)
	return string(b)
}

// writeError writes an Anthropic error object.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b := []byte(errorBody(typ, msg))
	b = b[:len(b)-1]
	b = append(b, `,"request_id":`...)
	b = appendString(b, w.Header().Get("request-id"))
	b = append(b, "}\n"...)
	w.Write(b)
}

// stream writes events one by one, flushing each, applying the response's
// delay, stall, cut and error settings.
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, resp Response, events [][]byte) {
	var errEvent []byte
	if resp.delivery.ErrAfter > 0 {
		errEvent = []byte("event: error\ndata: ")
		errEvent = append(errEvent, errorBody(resp.errType, resp.errMsg)...)
		errEvent = append(errEvent, "\n\n"...)
	}
	fakeapi.Stream(w, ctx, s.lb.Done(), resp.delivery, events, errEvent)
}

// eventWriter renders named SSE events.
type eventWriter struct {
	events [][]byte
	pinged bool
}

func (e *eventWriter) add(name string, data []byte) {
	b := make([]byte, 0, len(name)+len(data)+16)
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	e.events = append(e.events, b)
}

func (e *eventWriter) blockStart(index int, block []byte) {
	d := []byte(`{"type":"content_block_start","index":`)
	d = strconv.AppendInt(d, int64(index), 10)
	d = append(d, `,"content_block":`...)
	d = append(d, block...)
	d = append(d, '}')
	e.add("content_block_start", d)
	if !e.pinged {
		// The API pings once the first block has started.
		e.pinged = true
		e.add("ping", []byte(`{"type": "ping"}`))
	}
}

func (e *eventWriter) blockDelta(index int, typ, field, value string) {
	d := []byte(`{"type":"content_block_delta","index":`)
	d = strconv.AppendInt(d, int64(index), 10)
	d = append(d, `,"delta":{"type":`...)
	d = appendString(d, typ)
	d = append(d, ',', '"')
	d = append(d, field...)
	d = append(d, '"', ':')
	d = appendString(d, value)
	d = append(d, "}}"...)
	e.add("content_block_delta", d)
}

func (e *eventWriter) blockStop(index int) {
	d := []byte(`{"type":"content_block_stop","index":`)
	d = strconv.AppendInt(d, int64(index), 10)
	d = append(d, '}')
	e.add("content_block_stop", d)
}

// block is a rendered content block of a reply.
type block struct {
	typ             string
	text, sig, data string // text or thinking; signature; redacted data
	id, name, input string
	pieces          []string
}

// blocks turns a Response's items into blocks, assigning tool ids.
func (s *Server) blocks(resp Response) ([]block, int) {
	var out []block
	chars := 0
	for _, it := range resp.items {
		switch it.kind {
		case itemText, itemThinking:
			b := block{typ: "text", pieces: it.pieces}
			if it.kind == itemThinking {
				b.typ = "thinking"
			}
			b.text = strings.Join(it.pieces, "")
			if b.typ == "thinking" {
				b.sig = Sign(b.text)
			}
			chars += len(b.text)
			out = append(out, b)
		case itemRedacted:
			out = append(out, block{typ: "redacted_thinking", data: it.data})
		case itemToolUse:
			for _, c := range it.calls {
				id := c.ID
				if id == "" {
					id = fmt.Sprintf("toolu_01ATEST%016d", s.seq.Add(1))
				}
				chars += len(c.Name) + len(c.Input)
				out = append(out, block{typ: "tool_use", id: id, name: c.Name, input: c.Input})
			}
		}
	}
	return out, chars
}

func (resp Response) usage(bodyLen, outChars int) Tokens {
	if resp.tokens != nil {
		return *resp.tokens
	}
	return Tokens{Input: max(1, bodyLen/4), Output: max(1, outChars/4)}
}

func (resp Response) stopReason(blocks []block) string {
	if resp.stop != nil {
		return *resp.stop
	}
	for _, b := range blocks {
		if b.typ == "tool_use" {
			return "tool_use"
		}
	}
	return "end_turn"
}

func (s *Server) messageID() string {
	return fmt.Sprintf("msg_01ATEST%016d", s.seq.Add(1))
}

// render turns a Response into the SSE events of a streamed message, and
// where its points fall.
func (s *Server) render(req *Request, resp Response, bodyLen int) ([][]byte, fakeapi.Marks) {
	var marks fakeapi.Marks
	blocks, outChars := s.blocks(resp)
	t := resp.usage(bodyLen, outChars)
	e := &eventWriter{}

	d := []byte(`{"type":"message_start","message":{"model":`)
	d = appendString(d, req.Model)
	d = append(d, `,"id":`...)
	d = appendString(d, s.messageID())
	d = append(d, `,"type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"stop_details":null,"usage":{"input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.Input), 10)
	d = append(d, `,"cache_creation_input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.CacheWrite), 10)
	d = append(d, `,"cache_read_input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.CacheRead), 10)
	d = append(d, `,"cache_creation":{"ephemeral_5m_input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.CacheWrite), 10)
	d = append(d, `,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard","inference_geo":"global"}}}`...)
	e.add("message_start", d)

	for i, b := range blocks {
		switch b.typ {
		case "text":
			e.blockStart(i, []byte(`{"type":"text","text":""}`))
			for _, p := range b.pieces {
				e.blockDelta(i, "text_delta", "text", p)
				marks.Delta(len(e.events))
			}
		case "thinking":
			e.blockStart(i, []byte(`{"type":"thinking","thinking":"","signature":""}`))
			for _, p := range b.pieces {
				e.blockDelta(i, "thinking_delta", "thinking", p)
				marks.Delta(len(e.events))
			}
			e.blockDelta(i, "signature_delta", "signature", b.sig)
		case "redacted_thinking":
			e.blockStart(i, appendString([]byte(`{"type":"redacted_thinking","data":`), b.data, '}'))
		case "tool_use":
			h := []byte(`{"type":"tool_use","id":`)
			h = appendString(h, b.id)
			h = append(h, `,"name":`...)
			h = appendString(h, b.name)
			h = append(h, `,"input":{}}`...)
			e.blockStart(i, h)
			if b.input != "" {
				// The API opens with an empty fragment.
				e.blockDelta(i, "input_json_delta", "partial_json", "")
				for _, f := range fakeapi.Fragments(b.input, 9) {
					e.blockDelta(i, "input_json_delta", "partial_json", f)
				}
			}
		}
		e.blockStop(i)
	}
	if !e.pinged {
		e.add("ping", []byte(`{"type": "ping"}`))
	}
	stop := resp.stopReason(blocks)
	marks.Finish = len(e.events)
	if stop == "" {
		marks.Finished = marks.Finish
		return e.events, marks
	}
	d = []byte(`{"type":"message_delta","delta":{"stop_reason":`)
	d = appendString(d, stop)
	d = append(d, `,"stop_sequence":null,"stop_details":null},"usage":{"input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.Input), 10)
	d = append(d, `,"cache_creation_input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.CacheWrite), 10)
	d = append(d, `,"cache_read_input_tokens":`...)
	d = strconv.AppendInt(d, int64(t.CacheRead), 10)
	d = append(d, `,"output_tokens":`...)
	d = strconv.AppendInt(d, int64(t.Output), 10)
	d = append(d, `,"output_tokens_details":{"thinking_tokens":`...)
	d = strconv.AppendInt(d, int64(t.Thinking), 10)
	d = append(d, `}}}`...)
	e.add("message_delta", d)
	marks.Finished = len(e.events)
	e.add("message_stop", []byte(`{"type":"message_stop"}`))
	return e.events, marks
}

// writeMessage answers a request without "stream": true with a Message.
func (s *Server) writeMessage(w http.ResponseWriter, req *Request, resp Response, bodyLen int) {
	if resp.isRaw {
		writeError(w, http.StatusInternalServerError, "api_error", "anthropictest: a Raw response can only answer a streaming request")
		return
	}
	blocks, outChars := s.blocks(resp)
	content := make([]any, 0, len(blocks))
	for _, b := range blocks {
		switch b.typ {
		case "text":
			content = append(content, map[string]any{"type": "text", "text": b.text})
		case "thinking":
			content = append(content, map[string]any{"type": "thinking", "thinking": b.text, "signature": b.sig})
		case "redacted_thinking":
			content = append(content, map[string]any{"type": "redacted_thinking", "data": b.data})
		case "tool_use":
			in := json.RawMessage(b.input)
			if b.input == "" || !json.Valid(in) {
				in = json.RawMessage("{}")
			}
			content = append(content, map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": in})
		}
	}
	t := resp.usage(bodyLen, outChars)
	out := map[string]any{
		"model": req.Model, "id": s.messageID(), "type": "message", "role": "assistant",
		"content": content, "stop_reason": resp.stopReason(blocks), "stop_sequence": nil, "stop_details": nil,
		"usage": map[string]any{
			"input_tokens": t.Input, "cache_creation_input_tokens": t.CacheWrite, "cache_read_input_tokens": t.CacheRead,
			"cache_creation": map[string]any{"ephemeral_5m_input_tokens": t.CacheWrite, "ephemeral_1h_input_tokens": 0},
			"output_tokens":  t.Output, "output_tokens_details": map[string]any{"thinking_tokens": t.Thinking},
			"service_tier": "standard", "inference_geo": "global",
		},
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// appendString appends s as a JSON string (without HTML escaping, as the
// API writes it), then any trailing bytes.
func appendString(b []byte, s string, trailing ...byte) []byte {
	return fakeapi.AppendString(b, s, trailing...)
}
