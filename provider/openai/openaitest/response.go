package openaitest

import (
	"net/http"
	"slices"
	"time"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Call is a tool call the fake model makes. Args is the raw arguments
// string as the model would stream it (it need not be valid JSON; empty
// means "{}"). ID defaults to a unique "call_..." id.
type Call struct {
	ID   string
	Name string
	Args string
}

// Tokens is the usage reported in the final usage chunk.
type Tokens struct {
	Input     int // prompt_tokens
	Output    int // completion_tokens
	Cached    int // prompt_tokens_details.cached_tokens
	Reasoning int // completion_tokens_details.reasoning_tokens
}

type itemKind int

const (
	itemText itemKind = iota + 1
	itemReasoning
	itemCalls
)

type item struct {
	kind   itemKind
	pieces []string
	calls  []Call
}

// Response is one scripted answer of the fake server. Build it with the
// package functions (Text, Reasoning, ToolCalls, Status, Raw) and refine it
// with its methods; every method returns a modified copy, so a Response
// value can be reused and enqueued many times.
//
//	srv.Enqueue(openaitest.Reasoning("Let me", " think").Text("Hel", "lo").Usage(12, 3))
//	srv.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "read_file", Args: `{"path":"a.txt"}`}))
//	srv.Enqueue(openaitest.Status(429, "").Header("Retry-After", "2"))
//	srv.Enqueue(openaitest.Text("a", "b", "c").HangAfter(2))
type Response struct {
	items    []item
	tokens   *Tokens
	finish   *string
	status   int
	body     string
	header   http.Header
	delivery fakeapi.Delivery // delay, stall, cut, error, counted in chunks
	errMsg   string
	raw      [][]byte // pre-split SSE events replayed verbatim
	isRaw    bool
	// From a fakeapi.Reply: delivery at points (resolved against the
	// rendered stream), no end of stream, a context overflow answer.
	points     *fakeapi.Reply
	unfinished bool
	overflow   bool
}

// Text is a reply streaming one content delta per piece.
func Text(pieces ...string) Response { return Response{}.Text(pieces...) }

// Reasoning is a reply streaming one reasoning_content delta per piece (the
// field DeepSeek, vLLM and llama.cpp use).
func Reasoning(pieces ...string) Response { return Response{}.Reasoning(pieces...) }

// ToolCalls is a reply calling tools, streamed as OpenAI does: per call a
// tool_calls delta with index, id, type and name, then the arguments in
// fragments across several chunks.
func ToolCalls(calls ...Call) Response { return Response{}.ToolCalls(calls...) }

// Status is an HTTP error answer. An empty body becomes an OpenAI-style
// error object; 429 and 503 answers carry "Retry-After: 1" unless Header
// sets another value.
func Status(code int, body string) Response {
	return Response{status: code, body: body}
}

// Raw replays a captured SSE stream verbatim (for example a testdata/*.sse
// fixture). Events are separated by blank lines; DelayBetweenChunks,
// HangAfter, CutAfter and ErrorAfter count these events.
func Raw(sse []byte) Response {
	return Response{raw: fakeapi.SplitSSE(sse), isRaw: true}
}

// Text appends content deltas, one per piece.
func (r Response) Text(pieces ...string) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemText, pieces: slices.Clone(pieces)})
	return r
}

// Reasoning appends reasoning_content deltas, one per piece.
func (r Response) Reasoning(pieces ...string) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemReasoning, pieces: slices.Clone(pieces)})
	return r
}

// ToolCalls appends tool calls. Calls of one ToolCalls are parallel calls
// (consecutive indexes).
func (r Response) ToolCalls(calls ...Call) Response {
	r.items = append(slices.Clip(r.items), item{kind: itemCalls, calls: slices.Clone(calls)})
	return r
}

// Usage sets prompt_tokens and completion_tokens of the usage chunk. Without
// it the server reports an estimate (about 4 characters per token).
func (r Response) Usage(in, out int) Response {
	r.tokens = &Tokens{Input: in, Output: out}
	return r
}

// Tokens sets every usage figure of the usage chunk.
func (r Response) Tokens(t Tokens) Response {
	r.tokens = &t
	return r
}

// Finish sets the finish_reason (default "tool_calls" when the reply calls
// tools, else "stop"). An empty reason sends no finish chunk at all.
func (r Response) Finish(reason string) Response {
	r.finish = &reason
	return r
}

// Header sets a response header (on errors and streams alike).
func (r Response) Header(key, value string) Response {
	r.header = fakeapi.WithHeader(r.header, key, value)
	return r
}

// DelayBetweenChunks sleeps d before each chunk after the first.
func (r Response) DelayBetweenChunks(d time.Duration) Response {
	r.delivery.Delay = d
	return r
}

// HangAfter stalls the stream after n chunks (the [DONE] line counts) until
// the request's context ends or the server closes.
func (r Response) HangAfter(n int) Response {
	r.delivery.Hang = n + 1
	return r
}

// CutAfter closes the connection abruptly after n chunks.
func (r Response) CutAfter(n int) Response {
	r.delivery.Cut = n + 1
	return r
}

// ErrorAfter sends an error event (data: {"error": {...}}) after n chunks
// and ends the stream, as OpenAI does for a failure mid-stream.
func (r Response) ErrorAfter(n int, message string) Response {
	r.delivery.ErrAfter = n + 1
	r.errMsg = message
	return r
}

// FromReply is the Response of a reply written in no API's terms (the
// provider conformance suite's): its points are resolved against the
// stream of the endpoint that serves it.
func FromReply(r fakeapi.Reply) Response {
	var resp Response
	if r.Status != 0 {
		resp = Status(r.Status, r.ErrorBody)
		resp.errMsg, resp.overflow = r.ErrorMessage, r.Overflow
	}
	for _, it := range r.Items {
		switch it.Kind {
		case fakeapi.ItemText:
			resp = resp.Text(it.Pieces...)
		case fakeapi.ItemReasoning:
			resp = resp.Reasoning(it.Pieces...)
		case fakeapi.ItemCalls:
			calls := make([]Call, len(it.Calls))
			for i, c := range it.Calls {
				calls[i] = Call{ID: c.ID, Name: c.Name, Args: c.Args}
			}
			resp = resp.ToolCalls(calls...)
		}
	}
	if u := r.Tokens; u != nil {
		resp = resp.Tokens(Tokens{Input: u.Input, Output: u.Output, Cached: u.CacheRead, Reasoning: u.Reasoning})
	}
	if r.FinishReason != "" {
		resp = resp.Finish(r.FinishReason)
	}
	resp.header = r.Headers.Clone()
	resp.errMsg = r.ErrorMessage
	resp.unfinished = r.Unfinished
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
