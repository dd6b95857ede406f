package anthropictest

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Call is a tool_use block the fake model writes. Input is the raw input
// JSON as the model streams it (it need not be valid: a reply cut by
// max_tokens is not; empty streams no input_json_delta at all, which the API
// does for a tool without parameters). ID defaults to a unique "toolu_..."
// id.
type Call struct {
	ID    string
	Name  string
	Input string
}

// Tokens is the usage the fake reports.
type Tokens struct {
	Input      int // input_tokens
	Output     int // output_tokens
	CacheRead  int // cache_read_input_tokens
	CacheWrite int // cache_creation_input_tokens
	Thinking   int // output_tokens_details.thinking_tokens
}

type itemKind int

const (
	itemText itemKind = iota + 1
	itemThinking
	itemRedacted
	itemToolUse
)

type item struct {
	kind   itemKind
	pieces []string // text and thinking deltas
	data   string   // redacted_thinking data
	calls  []Call
}

// Response is one scripted answer of the fake server. Build it with the
// package functions (Text, Thinking, RedactedThinking, ToolUse, Status,
// PromptTooLong, Raw) and refine it with its methods; every method returns
// a modified copy, so a Response value can be reused and enqueued many times.
// Items become content blocks in the order they are added.
//
//	srv.Enqueue(anthropictest.Thinking("Let me", " think").Text("Hel", "lo").Usage(12, 3))
//	srv.Enqueue(anthropictest.ToolUse(anthropictest.Call{Name: "read_file", Input: `{"path":"a.txt"}`}))
//	srv.Enqueue(anthropictest.Status(429, "").Header("Retry-After", "2"))
//	srv.Enqueue(anthropictest.Text("a", "b", "c").HangAfter(4))
type Response struct {
	items    []item
	tokens   *Tokens
	stop     *string
	status   int
	body     string
	header   http.Header
	delivery fakeapi.Delivery // delay, stall, cut, error, counted in events
	errType  string
	errMsg   string
	raw      [][]byte // pre-split SSE events replayed verbatim
	isRaw    bool
	// From a fakeapi.Reply: delivery at points, resolved against the
	// rendered stream.
	points *fakeapi.Reply
}

// Text is a reply with one text block streaming one text_delta per piece.
func Text(pieces ...string) Response { return Response{}.Text(pieces...) }

// Thinking is a reply with one thinking block streaming one thinking_delta
// per piece, then a signature_delta with Sign(the whole thinking text).
func Thinking(pieces ...string) Response { return Response{}.Thinking(pieces...) }

// RedactedThinking is a reply with one redacted_thinking block carrying
// data (which the API encrypts; any opaque string here).
func RedactedThinking(data string) Response { return Response{}.RedactedThinking(data) }

// ToolUse is a reply calling tools: per call a tool_use block with id and
// name and "input":{}, then the input in input_json_delta fragments.
// Calls of one ToolUse are parallel calls (consecutive blocks).
func ToolUse(calls ...Call) Response { return Response{}.ToolUse(calls...) }

// Status is an HTTP error answer. An empty body becomes the Anthropic error
// object for that status (rate_limit_error for 429, overloaded_error for
// 529, ...); a 429 answer carries "Retry-After: 1" unless Header sets
// another value.
func Status(code int, body string) Response {
	return Response{status: code, body: body}
}

// PromptTooLong is the 400 the API answers when the prompt exceeds the
// model's context window.
func PromptTooLong(tokens, maximum int) Response {
	return Status(http.StatusBadRequest, errorBody("invalid_request_error",
		fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, maximum)))
}

// Raw replays a captured SSE stream verbatim (for example a testdata/*.sse
// fixture). Events are separated by blank lines; DelayBetweenChunks,
// HangAfter, CutAfter and ErrorAfter count these events.
func Raw(sse []byte) Response {
	return Response{raw: fakeapi.SplitSSE(sse), isRaw: true}
}

// Text appends a text block, one text_delta per piece.
func (r Response) Text(pieces ...string) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemText, pieces: slices.Clone(pieces)})
	return r
}

// Thinking appends a thinking block, one thinking_delta per piece, signed.
func (r Response) Thinking(pieces ...string) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemThinking, pieces: slices.Clone(pieces)})
	return r
}

// RedactedThinking appends a redacted_thinking block.
func (r Response) RedactedThinking(data string) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemRedacted, data: data})
	return r
}

// ToolUse appends tool_use blocks, one per call.
func (r Response) ToolUse(calls ...Call) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemToolUse, calls: slices.Clone(calls)})
	return r
}

// Usage sets input_tokens and output_tokens. Without it the server reports
// an estimate (about 4 characters per token).
func (r Response) Usage(in, out int) Response {
	r.tokens = &Tokens{Input: in, Output: out}
	return r
}

// Tokens sets every usage figure.
func (r Response) Tokens(t Tokens) Response {
	r.tokens = &t
	return r
}

// StopReason sets the stop_reason of message_delta (default "tool_use" when
// the reply calls tools, else "end_turn"): "max_tokens", "stop_sequence",
// "refusal", "pause_turn", "model_context_window_exceeded". An empty reason
// sends neither message_delta nor message_stop.
func (r Response) StopReason(reason string) Response {
	r.stop = &reason
	return r
}

// Header sets a response header (on errors and streams alike).
func (r Response) Header(key, value string) Response {
	r.header = fakeapi.WithHeader(r.header, key, value)
	return r
}

// DelayBetweenChunks sleeps d before each event after the first.
func (r Response) DelayBetweenChunks(d time.Duration) Response {
	r.delivery.Delay = d
	return r
}

// HangAfter stalls the stream after n events (pings count) until the
// request's context ends or the server closes.
func (r Response) HangAfter(n int) Response {
	r.delivery.Hang = n + 1
	return r
}

// CutAfter closes the connection abruptly after n events.
func (r Response) CutAfter(n int) Response {
	r.delivery.Cut = n + 1
	return r
}

// ErrorAfter sends an error event ("event: error" with an error object of
// type errType, for example "overloaded_error") after n events and ends the
// stream, as the API does for a failure mid-stream.
func (r Response) ErrorAfter(n int, errType, message string) Response {
	r.delivery.ErrAfter = n + 1
	r.errType = errType
	r.errMsg = message
	return r
}

// signatureMagic starts every signature the fake issues.
const signatureMagic = "anthropictest-signature\x00"

// Sign returns the signature the fake gives a thinking block with this
// text. The server checks the signatures it issued: a thinking block sent
// back with a changed text or signature is refused, as the API refuses it.
// Signatures it did not issue (from fixtures) are accepted.
func Sign(thinking string) string {
	sum := sha256.Sum256([]byte(thinking))
	return base64.StdEncoding.EncodeToString(append([]byte(signatureMagic), sum[:]...))
}

// checkSignature reports whether sig is acceptable for thinking.
func checkSignature(thinking, sig string) bool {
	b, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !strings.HasPrefix(string(b), signatureMagic) {
		return true // not ours: cannot be checked
	}
	return sig == Sign(thinking)
}

// stopReasons are the stop_reason of each forge finish reason.
var stopReasons = map[string]string{"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}

// FromReply is the Response of a reply written in no API's terms (the
// provider conformance suite's). A failure mid-stream is an api_error.
func FromReply(r fakeapi.Reply) Response {
	var resp Response
	switch {
	case r.Overflow:
		resp = PromptTooLong(208310, 200000)
	case r.Status != 0:
		resp = Status(r.Status, r.ErrorBody)
	}
	for _, it := range r.Items {
		switch it.Kind {
		case fakeapi.ItemText:
			resp = resp.Text(it.Pieces...)
		case fakeapi.ItemReasoning:
			resp = resp.Thinking(it.Pieces...)
		case fakeapi.ItemCalls:
			calls := make([]Call, len(it.Calls))
			for i, c := range it.Calls {
				calls[i] = Call{ID: c.ID, Name: c.Name, Input: c.Args}
			}
			resp = resp.ToolUse(calls...)
		}
	}
	if u := r.Tokens; u != nil {
		resp = resp.Tokens(Tokens{Input: u.Input - u.CacheRead - u.CacheWrite, Output: u.Output,
			CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Thinking: u.Reasoning})
	}
	if stop, ok := stopReasons[r.FinishReason]; ok {
		resp = resp.StopReason(stop)
	}
	if r.Unfinished {
		resp = resp.StopReason("")
	}
	resp.header = r.Headers.Clone()
	resp.errType, resp.errMsg = "api_error", r.ErrorMessage
	resp.points = &r
	return resp
}

// deliver is how resp is delivered as a stream of events with marks m.
func (r Response) deliver(m fakeapi.Marks, events int) fakeapi.Delivery {
	if r.points == nil {
		return r.delivery
	}
	return r.points.Delivery(m, events)
}
