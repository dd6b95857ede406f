package providertest

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
	"github.com/forge-runtime/forge/provider/scripted"
)

// Scripted is the scripted provider, its "fake" a queue of steps: each
// call plays the next as a one-step script (model_params.script). What a
// step cannot say (a cut connection, HTTP headers, a stall mid-text)
// fails the case that asks for it.
func Scripted() Provider {
	noWire := "the scripted provider has no wire"
	noStream := "there is no stream to cut or leave open"
	return Provider{
		Name: "scripted", Kind: "", ModelID: "echo",
		Start: func(t testing.TB) Fake { return &scriptFake{t: t, record: true, def: scripted.Step{Text: "ok"}} },
		Model: func(c Config) forge.Model {
			return &scriptModel{m: scripted.New(c.Model), fake: c.Fake.(*scriptFake)}
		},
		Unsupported: map[string]string{
			"Reliability":                 "the registry does not retry the scripted provider",
			"Environment":                 noWire,
			"Request":                     "nothing is sent: " + noWire,
			"Connection/ConnectionReused": noWire,
			"Connection/ConcurrentCallsReuseConnections": noWire,
			"Connection/ConnectionRefused":               noWire,
			"Connection/NotAnEventStream":                noWire,
			"Stream/TwoTextBlocks":                       "a step has one text",
			"Errors/RetryAfter":                          "a step has no headers",
			"Errors/ErrorBodies":                         noWire,
			"Errors/ContextOverflow":                     "a step cannot say its prompt was too long",
			"Errors/BadRequests":                         "it takes any history",
			"Errors/RefusedHistory":                      "it takes any history",
			"MidStream/Cut":                              noStream,
			"MidStream/CutBeforeOutput":                  noStream,
			"MidStream/CutBeforeFinish":                  noStream,
			"MidStream/CutAfterFinish":                   noStream,
			"MidStream/Unfinished":                       noStream,
			"MidStream/ErrorEvent":                       "a step fails only after its text",
			"MidStream/LeftOpen":                         noStream,
			"Cancel/BeforeHeaders":                       noWire,
			"Cancel/Silent":                              noWire,
			"Cancel/ReportsWaits":                        "an undelayed step has no waits (TestReportsItsWaits)",
		},
	}
}

// scriptFake is the queue of steps the scripted model plays.
type scriptFake struct {
	t testing.TB

	mu       sync.Mutex // guards the following
	queue    []scripted.Step
	def      scripted.Step
	record   bool
	received []fakeapi.Request
}

func (f *scriptFake) URL() string            { return "" }
func (f *scriptFake) SetAPIKey(string)       {}
func (f *scriptFake) InFlight() int          { return 0 }
func (f *scriptFake) Connections() int64     { return 0 }
func (f *scriptFake) SetGate(func())         {}
func (f *scriptFake) RecordRequests(on bool) { f.mu.Lock(); f.record = on; f.mu.Unlock() }

func (f *scriptFake) Respond(replies ...fakeapi.Reply) {
	for _, r := range replies {
		s := f.step(r)
		f.mu.Lock()
		f.queue = append(f.queue, s)
		f.mu.Unlock()
	}
}

func (f *scriptFake) SetDefaultReply(r fakeapi.Reply) {
	s := f.step(r)
	f.mu.Lock()
	f.def = s
	f.mu.Unlock()
}

func (f *scriptFake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

func (f *scriptFake) Received() []fakeapi.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeapi.Request(nil), f.received...)
}

// next takes the step for a call of req.
func (f *scriptFake) next(req *forge.ModelRequest) scripted.Step {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record {
		f.received = append(f.received, fakeapi.Request{Model: req.Model})
	}
	if len(f.queue) == 0 {
		return f.def
	}
	s := f.queue[0]
	f.queue = f.queue[1:]
	return s
}

// step is the scripted step of r; what a step cannot say fails the test.
func (f *scriptFake) step(r fakeapi.Reply) scripted.Step {
	f.t.Helper()
	var s scripted.Step
	fail := func(what string) { f.t.Fatalf("providertest: a scripted step cannot have %s", what) }
	if len(r.Headers) > 0 || r.ErrorBody != "" || r.Overflow {
		fail("headers, an error body or a context overflow")
	}
	if r.Unfinished || r.CutPoint.IsSet() {
		fail("a stream that stops short")
	}
	if r.Status != 0 {
		s.Error, s.Status = r.ErrorMessage, r.Status
	}
	deltas := 0
	rank := map[fakeapi.ItemKind]int{fakeapi.ItemReasoning: 1, fakeapi.ItemText: 2, fakeapi.ItemCalls: 3}
	order := 0 // reasoning, then text, then calls, each once
	for _, it := range r.Items {
		if rank[it.Kind] <= order {
			fail("items out of the order reasoning, text, calls, or twice")
		}
		order = rank[it.Kind]
		switch it.Kind {
		case fakeapi.ItemReasoning, fakeapi.ItemText:
			text, chunk := pieces(it.Pieces)
			if chunk < 0 {
				fail("pieces that are neither words nor of one length")
			}
			if it.Kind == fakeapi.ItemText {
				s.Text = text
			} else {
				s.Reasoning = text
			}
			if deltas > 0 && chunk != s.Chunk {
				fail("reasoning and text in pieces of different lengths")
			}
			s.Chunk = chunk
			deltas += len(it.Pieces)
		case fakeapi.ItemCalls:
			for _, c := range it.Calls {
				tc := scripted.ToolCall{ID: c.ID, Name: c.Name}
				if c.Args != "" {
					tc.Arguments, _ = json.Marshal(c.Args) // raw text, kept as it is
				}
				s.ToolCalls = append(s.ToolCalls, tc)
			}
		}
	}
	end := func(p fakeapi.Point) bool { return p == fakeapi.BeforeFinish() || p == fakeapi.AfterDeltas(deltas) }
	switch {
	case r.HangPoint.IsSet() && !end(r.HangPoint), r.FailPoint.IsSet() && !end(r.FailPoint):
		fail("a stall or a failure before the end of its text")
	case r.HangPoint.IsSet():
		s.Hang = true
	case r.FailPoint.IsSet():
		s.Error, s.Status = r.ErrorMessage, 500
	}
	if r.ChunkDelay%time.Millisecond != 0 {
		fail("a delay of a fraction of a millisecond")
	}
	s.DelayMS = int(r.ChunkDelay / time.Millisecond)
	if u := r.Tokens; u != nil {
		s.Usage = &scripted.Usage{InputTokens: int64(u.Input), OutputTokens: int64(u.Output), ReasoningTokens: int64(u.Reasoning),
			CacheReadTokens: int64(u.CacheRead), CacheWriteTokens: int64(u.CacheWrite)}
	}
	s.Finish = r.FinishReason
	return s
}

// pieces is the text of pieces and the chunk that streams it in those
// pieces: 0 when they are words (a word with the whitespace after it), a
// rune count when all but the last have it, -1 when neither.
func pieces(ps []string) (string, int) {
	text := strings.Join(ps, "")
	words := true
	for i, p := range ps {
		w := strings.TrimRightFunc(p, unicode.IsSpace)
		last := i == len(ps)-1
		if w == "" || strings.IndexFunc(strings.TrimLeftFunc(w, unicode.IsSpace), unicode.IsSpace) >= 0 ||
			(i > 0 && w != strings.TrimLeftFunc(w, unicode.IsSpace)) || (!last && w == p) {
			words = false
		}
	}
	if words {
		return text, 0
	}
	n := len([]rune(ps[0]))
	for i, p := range ps {
		if m := len([]rune(p)); m != n && !(i == len(ps)-1 && m < n && m > 0) {
			return text, -1
		}
	}
	return text, n
}

// scriptModel plays the fake's next step for each call.
type scriptModel struct {
	m    *scripted.Model
	fake *scriptFake
}

func (m *scriptModel) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	if ctx.Err() != nil {
		return m.m.Stream(ctx, req) // nothing is played, nor recorded
	}
	r := *req
	r.Params.Script = scripted.Script(m.fake.next(req))
	return m.m.Stream(ctx, &r)
}
