package fakeapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Reply is a scripted answer in no API's terms, for the provider
// conformance suite (providertest): what the model says, the usage it
// reports, how it finishes or fails, and how its stream is delivered. Each
// fake renders it in its own wire format (openaitest.FromReply,
// anthropictest.FromReply). The places of delivery effects are Points,
// counted in what the model says rather than in events, so one Reply means
// the same on every wire. Build it with the package functions (Text,
// Reasoning, Calls, Failure, RawFailure, ContextOverflow) and refine it with
// its methods, which return a modified copy.
type Reply struct {
	Items []Item
	// Tokens is the usage as forge.Usage reports it (Input counts the whole
	// prompt, cache reads and writes included); nil: the fake's estimate.
	Tokens *Usage
	// FinishReason is a forge finish reason (stop, tool_calls, length,
	// content_filter); "": tool_calls when the reply calls tools, else
	// stop.
	FinishReason string
	// Unfinished ends the stream after the output: no finish, usage or end
	// marker, as a server that stops without completing the response.
	Unfinished bool

	// Status makes the reply an HTTP error answer (no stream) with an error
	// object of the API carrying ErrorMessage, or with ErrorBody verbatim;
	// Overflow makes it the API's answer to a prompt over the context
	// window.
	Status       int
	ErrorMessage string
	ErrorBody    string
	Overflow     bool
	Headers      http.Header

	// ChunkDelay is a pause before each event after the first.
	ChunkDelay time.Duration
	// CutPoint drops the connection; HangPoint stalls the stream until the
	// request or the server ends; FailPoint sends the API's error event
	// (carrying ErrorMessage) and ends the stream.
	CutPoint, HangPoint, FailPoint Point
}

// ItemKind is what an Item holds.
type ItemKind int

// Item kinds.
const (
	ItemText ItemKind = iota + 1
	ItemReasoning
	ItemCalls
)

// Item is one part of what the model says: a text or a reasoning block
// streamed one delta per piece, or tool calls made in parallel.
type Item struct {
	Kind   ItemKind
	Pieces []string
	Calls  []Call
}

// Call is a tool call the model makes. Args is the raw arguments text as
// streamed (it need not be valid JSON; "" is no arguments); ID "" lets the
// fake make one up.
type Call struct {
	ID, Name, Args string
}

// Usage is a reply's token usage as forge.Usage reports it.
type Usage struct {
	Input, Output, CacheRead, CacheWrite, Reasoning int
}

// Text is a reply streaming a text block, one delta per piece.
func Text(pieces ...string) Reply { return Reply{}.Text(pieces...) }

// Reasoning is a reply streaming a reasoning block, one delta per piece.
func Reasoning(pieces ...string) Reply { return Reply{}.Reasoning(pieces...) }

// Calls is a reply calling tools in parallel.
func Calls(calls ...Call) Reply { return Reply{}.Calls(calls...) }

// Failure is an HTTP error answer with the API's error object for status
// carrying message.
func Failure(status int, message string) Reply {
	return Reply{Status: status, ErrorMessage: message}
}

// RawFailure is an HTTP error answer with body verbatim (plain text, a
// proxy's JSON).
func RawFailure(status int, body string) Reply {
	return Reply{Status: status, ErrorBody: body}
}

// ContextOverflow is the API's answer to a prompt longer than the model's
// context window.
func ContextOverflow() Reply {
	return Reply{Status: http.StatusBadRequest, Overflow: true}
}

func (r Reply) add(it Item) Reply {
	r.Items = append(slices.Clip(r.Items), it)
	return r
}

// Text appends a text block.
func (r Reply) Text(pieces ...string) Reply {
	return r.add(Item{Kind: ItemText, Pieces: slices.Clone(pieces)})
}

// Reasoning appends a reasoning block.
func (r Reply) Reasoning(pieces ...string) Reply {
	return r.add(Item{Kind: ItemReasoning, Pieces: slices.Clone(pieces)})
}

// Calls appends parallel tool calls.
func (r Reply) Calls(calls ...Call) Reply {
	return r.add(Item{Kind: ItemCalls, Calls: slices.Clone(calls)})
}

// Usage sets the usage reported.
func (r Reply) Usage(u Usage) Reply {
	r.Tokens = &u
	return r
}

// Finish sets the finish reason.
func (r Reply) Finish(reason string) Reply {
	r.FinishReason = reason
	return r
}

// Unfinish ends the stream after the output, without completing it.
func (r Reply) Unfinish() Reply {
	r.Unfinished = true
	return r
}

// Header sets a response header.
func (r Reply) Header(key, value string) Reply {
	r.Headers = WithHeader(r.Headers, key, value)
	return r
}

// Delay pauses d before each event after the first.
func (r Reply) Delay(d time.Duration) Reply {
	r.ChunkDelay = d
	return r
}

// CutAt drops the connection at p.
func (r Reply) CutAt(p Point) Reply {
	r.CutPoint = p
	return r
}

// HangAt stalls the stream at p until the request or the server ends.
func (r Reply) HangAt(p Point) Reply {
	r.HangPoint = p
	return r
}

// FailAt ends the stream at p with the API's error event carrying message.
func (r Reply) FailAt(p Point, message string) Reply {
	r.FailPoint = p
	r.ErrorMessage = message
	return r
}

// Point is a place in a reply's stream, counted in what the model says.
type Point struct {
	at pointAt
	n  int
}

type pointAt int

const (
	pointNone pointAt = iota
	pointHeaders
	pointDeltas
	pointFinish
	pointFinished
	pointEnd
)

// BeforeHeaders is before the server answers anything at all (only for
// HangAt: a server that accepts the request and stays silent).
func BeforeHeaders() Point { return Point{at: pointHeaders} }

// AfterDeltas is after the n-th text or reasoning delta; 0 is right after
// the headers, before any event; past the last delta it is BeforeFinish.
func AfterDeltas(n int) Point { return Point{at: pointDeltas, n: n} }

// BeforeFinish is after all the output, before the finish marker
// (finish_reason, message_delta, response.completed).
func BeforeFinish() Point { return Point{at: pointFinish} }

// AfterFinish is right after the finish marker: what the API sends after
// it (a usage chunk, [DONE], message_stop) is not sent.
func AfterFinish() Point { return Point{at: pointFinished} }

// AtEnd is after every event of the stream.
func AtEnd() Point { return Point{at: pointEnd} }

// IsSet tells whether p is a point at all (the zero Point is none).
func (p Point) IsSet() bool { return p.at != pointNone }

// Marks locate Points in a rendered stream, in events before each place.
// A renderer records them as it writes the events.
type Marks struct {
	Deltas   []int // after each text or reasoning delta, in order
	Finish   int   // before the finish marker
	Finished int   // after it
}

// Delta records that the events so far end with a delta.
func (m *Marks) Delta(events int) { m.Deltas = append(m.Deltas, events) }

// events is the number of events before p in a stream of total events.
func (m *Marks) events(p Point, total int) int {
	switch p.at {
	case pointDeltas:
		switch {
		case p.n <= 0:
			return 0
		case p.n <= len(m.Deltas):
			return m.Deltas[p.n-1]
		}
		return m.Finish
	case pointFinish:
		return m.Finish
	case pointFinished:
		return m.Finished
	}
	return total
}

// Delivery resolves r's points against the marks of a stream of total
// events.
func (r Reply) Delivery(m Marks, total int) Delivery {
	d := Delivery{Delay: r.ChunkDelay, Silent: r.HangPoint.at == pointHeaders}
	count := func(p Point) int {
		if !p.IsSet() || p.at == pointHeaders {
			return 0
		}
		return m.events(p, total) + 1
	}
	d.Hang, d.Cut, d.ErrAfter = count(r.HangPoint), count(r.CutPoint), count(r.FailPoint)
	return d
}

// Request is a model request as a fake received it, in no API's terms,
// so the suite checks what every provider sends alike. Parts is the
// conversation in order, with the consecutive texts of one role joined
// (the APIs differ in how they split them into messages and blocks).
type Request struct {
	Header      http.Header
	Model       string
	System      string
	Parts       []Part
	Tools       []Tool
	MaxTokens   *int64
	Temperature *float64
	Stream      bool
}

// Part is one part of the conversation.
type Part struct {
	Role string // user, assistant or tool
	Type string // text, reasoning, tool_call or tool_result
	// Text is a text's, or a reasoning block's, text.
	Text string `json:",omitempty"`
	// State is a reasoning block's opaque state as sent back (a
	// signature, encrypted content).
	State string `json:",omitempty"`
	// CallID names the call of a tool_call or tool_result.
	CallID string `json:",omitempty"`
	// Name and Arguments (compact JSON) are a tool_call's.
	Name      string `json:",omitempty"`
	Arguments string `json:",omitempty"`
	// Output and IsError are a tool_result's (IsError where the API
	// carries it).
	Output  string `json:",omitempty"`
	IsError bool   `json:",omitempty"`
	// Files are the files of a tool_result (its images and documents),
	// or the one of a user message's "file" part, as sent.
	Files []File `json:",omitempty"`
}

// File is a file sent to a model: its media type, its name where the API
// carries one, and its bytes (decoded from the base64 on the wire).
type File struct {
	MimeType string
	Name     string `json:",omitempty"`
	Data     []byte
}

// DataURLFile decodes "data:<type>;base64,<data>"; false for anything
// else.
func DataURLFile(u string) (File, bool) {
	meta, data, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	mt, isB64 := strings.CutSuffix(meta, ";base64")
	if !strings.HasPrefix(u, "data:") || !ok || !isB64 {
		return File{}, false
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return File{}, false
	}
	return File{MimeType: mt, Data: b}, true
}

// Tool is a tool declared in a request.
type Tool struct {
	Name, Description string
	Schema            json.RawMessage
}

// Add appends p, joining it to the part before when both are texts of
// the same role.
func (r *Request) Add(p Part) {
	if n := len(r.Parts); n > 0 && p.Type == "text" && r.Parts[n-1].Type == "text" && r.Parts[n-1].Role == p.Role {
		r.Parts[n-1].Text += p.Text
		return
	}
	r.Parts = append(r.Parts, p)
}

// Compact returns raw JSON compacted, or raw unchanged when it is not
// JSON.
func Compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
