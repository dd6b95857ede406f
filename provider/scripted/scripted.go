// Package scripted is a deterministic model provider, for tests and for
// running Forge without any model key. Any model id works: "scripted/echo"
// is the conventional name.
//
// # Echo (no script)
//
// Without a script the model answers the last user message with the text
// "echo: " followed by that message's text, streamed a word per delta. When
// the request ends with tool results it summarises them instead:
//
//	tool results: read_file: <output>; bash (error): <output>
//
// (each output shortened to 200 characters). It never calls tools.
//
// # Scripts
//
// An agent's model_params.script is a JSON array of steps. The step played
// is chosen by the number of assistant messages already in the request's
// history: the first model call of a conversation plays step 0, the call
// after one assistant reply plays step 1, and so on; once the script is
// exhausted the last step repeats. The choice depends on the request alone,
// so a script works across restarts, retries and replicas. An agent with a
// script (the body of POST /v1/agents):
//
//	{"name": "demo", "model": "scripted/demo", "tools": ["read_file"], "model_params": {"script": [
//	  {"reasoning": "The user wants a file.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
//	  {"text": "The file says hello.", "usage": {"input_tokens": 120, "output_tokens": 6}}
//	]}}
//
// A step is an object with these fields, all optional:
//
//	text        string   assistant text, streamed in deltas
//	reasoning   string   reasoning text, streamed before the text
//	tool_calls  array    calls made after the text, each
//	                     {"name": "...", "arguments": {...}, "id": "..."}:
//	                     arguments is a JSON object (default {}; sent
//	                     compacted) or a string holding raw arguments text,
//	                     which may be invalid JSON (to exercise how invalid
//	                     arguments are reported); id overrides the generated
//	                     call id
//	usage       object   {"input_tokens": N, "output_tokens": N, "reasoning_tokens": N,
//	                     "cache_read_tokens": N, "cache_write_tokens": N};
//	                     default: an estimate of about 4 characters per token
//	finish      string   stop, tool_calls, length or content_filter; default
//	                     tool_calls when the step calls tools, else stop
//	error       string   the call fails with this message (a *forge.ModelError)
//	                     after streaming the step's reasoning and text, if any
//	status      int      with error: the HTTP status the failure reports
//	                     (400-599); 408, 429 and 5xx are retryable
//	chunk       int      runes per delta; default: one word (with the
//	                     whitespace after it) per delta
//	delay_ms    int      pause before each delta and tool call after the
//	                     first; honours cancellation
//	hang        bool     after streaming the reasoning and text, wait until
//	                     the call is cancelled (to test cancellation)
//
// Unknown fields and invalid values make every call fail with a
// non-retryable *forge.ModelError naming the step; Parse reports the same
// error up front.
//
// Tool call ids are "call_" followed by a hash of the request history, the
// step and the call's position: identical requests get identical ids.
//
// Go tests can build a script with Script:
//
//	params := forge.ModelParams{Script: scripted.Script(
//		scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "ls"}}},
//		scripted.Step{Text: "done"},
//	)}
package scripted

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"iter"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// ProviderName is the name the scripted provider registers under and
// reports in errors.
const ProviderName = "scripted"

// Step is one scripted model reply (see the package documentation).
type Step struct {
	Text      string     `json:"text,omitempty"`
	Reasoning string     `json:"reasoning,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Usage     *Usage     `json:"usage,omitempty"`
	Finish    string     `json:"finish,omitempty"`
	Error     string     `json:"error,omitempty"`
	Status    int        `json:"status,omitempty"`
	Chunk     int        `json:"chunk,omitempty"`
	DelayMS   int        `json:"delay_ms,omitempty"`
	Hang      bool       `json:"hang,omitempty"`
}

// ToolCall is a scripted tool call. Arguments is a JSON object, or a JSON
// string holding raw arguments text.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Usage is a step's reported token usage.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Script encodes steps as a ModelParams.Script value. It panics if a tool
// call's Arguments is not valid JSON.
func Script(steps ...Step) json.RawMessage {
	b, err := json.Marshal(steps)
	if err != nil {
		panic("scripted.Script: " + err.Error())
	}
	return b
}

// Parse decodes and validates a script. An absent script (empty or null)
// is nil steps and no error. Errors wrap forge.ErrInvalid.
func Parse(script json.RawMessage) ([]Step, error) {
	script = bytes.TrimSpace(script)
	if len(script) == 0 || bytes.Equal(script, []byte("null")) {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(script, &raws); err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "invalid script: must be a JSON array of steps")
	}
	if len(raws) == 0 {
		return nil, forge.Errorf(forge.ErrInvalid, "invalid script: it has no steps")
	}
	steps := make([]Step, len(raws))
	for i, raw := range raws {
		if err := steps[i].decode(raw); err != nil {
			return nil, forge.Errorf(forge.ErrInvalid, "invalid script: step %d: %s", i, err)
		}
	}
	return steps, nil
}

func (s *Step) decode(raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s); err != nil {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	switch s.Finish {
	case "", forge.FinishStop, forge.FinishToolCalls, forge.FinishLength, forge.FinishFilter:
	default:
		return fmt.Errorf("finish must be stop, tool_calls, length or content_filter, got %q", s.Finish)
	}
	if s.Status != 0 && (s.Status < 400 || s.Status > 599) {
		return fmt.Errorf("status must be between 400 and 599, got %d", s.Status)
	}
	if s.Status != 0 && s.Error == "" {
		return fmt.Errorf("status needs error")
	}
	if s.Chunk < 0 {
		return fmt.Errorf("chunk must not be negative")
	}
	if s.DelayMS < 0 || s.DelayMS > 600_000 {
		return fmt.Errorf("delay_ms must be between 0 and 600000")
	}
	for j, c := range s.ToolCalls {
		if c.Name == "" {
			return fmt.Errorf("tool_calls[%d]: name is required", j)
		}
		a := bytes.TrimSpace(c.Arguments)
		if len(a) > 0 && a[0] != '{' && a[0] != '"' && !bytes.Equal(a, []byte("null")) {
			return fmt.Errorf("tool_calls[%d] (%s): arguments must be an object or a string", j, c.Name)
		}
	}
	if u := s.Usage; u != nil && (u.InputTokens < 0 || u.OutputTokens < 0 || u.ReasoningTokens < 0 ||
		u.CacheReadTokens < 0 || u.CacheWriteTokens < 0) {
		return fmt.Errorf("usage figures must not be negative")
	}
	return nil
}

// Model is a scripted model. Every id behaves the same way.
type Model struct {
	id string
}

// New returns the scripted model id.
func New(id string) *Model { return &Model{id: id} }

// CheckParams validates the script in p as every call would (Parse), so
// that an agent with an invalid script is refused when it is defined.
// Errors wrap forge.ErrInvalid and name the field
// (model_params.script: step 0: chunk must not be negative).
func (m *Model) CheckParams(p forge.ModelParams) error {
	if _, err := Parse(p.Script); err != nil {
		return forge.Errorf(forge.ErrInvalid, "model_params.script: %s", strings.TrimPrefix(err.Error(), "invalid script: "))
	}
	return nil
}

// Stream implements forge.Model.
func (m *Model) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(forge.ModelEvent{}, err)
			return
		}
		steps, err := Parse(req.Params.Script)
		if err != nil {
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: ProviderName, Message: err.Error()})
			return
		}
		var step Step
		index := 0
		if steps == nil {
			step = echo(req)
		} else {
			for _, msg := range req.Messages {
				if msg.Role == forge.RoleAssistant {
					index++
				}
			}
			step = steps[min(index, len(steps)-1)]
		}
		p := player{ctx: ctx, yield: yield, delay: time.Duration(step.DelayMS) * time.Millisecond,
			wait: forge.ReportWaits(ctx)}
		p.play(req, &step, index)
	}
}

type player struct {
	ctx   context.Context
	yield func(forge.ModelEvent, error) bool
	delay time.Duration
	timer *time.Timer
	sent  int // deltas and calls sent
	// wait is called before each pause (forge.ReportWaits): every other
	// event follows the one before it at once.
	wait func()
}

// pause waits the step's delay before every delta or call but the first;
// false means stop (the consumer stopped, or ctx ended and was reported).
func (p *player) pause() bool {
	p.sent++
	if err := p.ctx.Err(); err != nil {
		p.yield(forge.ModelEvent{}, err)
		return false
	}
	if p.sent == 1 || p.delay <= 0 {
		return true
	}
	p.wait()
	if p.timer == nil {
		p.timer = time.NewTimer(p.delay)
	} else {
		p.timer.Reset(p.delay)
	}
	select {
	case <-p.timer.C:
		return true
	case <-p.ctx.Done():
		p.yield(forge.ModelEvent{}, p.ctx.Err())
		return false
	}
}

func (p *player) emit(t forge.ModelEventType, delta string) bool {
	return p.yield(forge.ModelEvent{Type: t, Delta: delta}, nil)
}

func (p *player) block(text string, chunk int, start, delta, end forge.ModelEventType) bool {
	if text == "" {
		return true
	}
	if !p.emit(start, "") {
		return false
	}
	for rest := text; rest != ""; {
		var piece string
		piece, rest = nextPiece(rest, chunk)
		if !p.pause() || !p.emit(delta, piece) {
			return false
		}
	}
	return p.emit(end, "")
}

func (p *player) play(req *forge.ModelRequest, step *Step, index int) {
	if p.timer != nil {
		defer p.timer.Stop()
	}
	if !p.block(step.Reasoning, step.Chunk, forge.ReasoningStart, forge.ReasoningDelta, forge.ReasoningEnd) ||
		!p.block(step.Text, step.Chunk, forge.TextStart, forge.TextDelta, forge.TextEnd) {
		return
	}
	if step.Error != "" {
		p.yield(forge.ModelEvent{}, &forge.ModelError{Provider: ProviderName, StatusCode: step.Status,
			Message: step.Error, Retryable: step.Status == 408 || step.Status == 429 || step.Status >= 500})
		return
	}
	if step.Hang {
		p.wait()
		<-p.ctx.Done()
		p.yield(forge.ModelEvent{}, p.ctx.Err())
		return
	}
	outChars := len(step.Text) + len(step.Reasoning)
	var hist uint64
	for i, c := range step.ToolCalls {
		if !p.pause() {
			return
		}
		id := c.ID
		if id == "" {
			if hist == 0 {
				hist = historyHash(req)
			}
			id = callID(hist, index, i)
		}
		args := arguments(c.Arguments)
		outChars += len(c.Name) + len(args)
		ev := forge.ModelEvent{Type: forge.ToolCallEvent, ToolCall: &forge.ToolCall{ID: id, Name: c.Name, Arguments: args}}
		if !p.yield(ev, nil) {
			return
		}
	}
	finish := step.Finish
	if finish == "" {
		finish = forge.FinishStop
		if len(step.ToolCalls) > 0 {
			finish = forge.FinishToolCalls
		}
	}
	var usage forge.Usage
	if u := step.Usage; u != nil {
		usage = forge.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			ReasoningTokens: u.ReasoningTokens, CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens}
	} else {
		usage = forge.Usage{InputTokens: max(1, int64(inputChars(req)/4)), OutputTokens: max(1, int64(outChars/4))}
	}
	p.yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{Reason: finish, Usage: usage}}, nil)
}

// arguments turns a scripted arguments value into the raw arguments.
func arguments(a json.RawMessage) json.RawMessage {
	a = bytes.TrimSpace(a)
	switch {
	case len(a) == 0 || bytes.Equal(a, []byte("null")):
		return json.RawMessage("{}")
	case a[0] == '"':
		var s string
		if json.Unmarshal(a, &s) == nil {
			return json.RawMessage(s)
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, a) == nil {
		return b.Bytes()
	}
	return append(json.RawMessage(nil), a...)
}

// nextPiece cuts the next delta off s: chunk runes, or by default one word
// with the whitespace around it (leading whitespace stays with the word).
func nextPiece(s string, chunk int) (piece, rest string) {
	if chunk > 0 {
		i, n := 0, 0
		for i < len(s) && n < chunk {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			n++
		}
		return s[:i], s[i:]
	}
	i := 0
	inWord := false
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		space := unicode.IsSpace(r)
		if !space {
			inWord = true
		} else if inWord {
			// Take the run of whitespace after the word, then stop.
			for i < len(s) {
				r, size = utf8.DecodeRuneInString(s[i:])
				if !unicode.IsSpace(r) {
					break
				}
				i += size
			}
			return s[:i], s[i:]
		}
		i += size
	}
	return s, ""
}

// historyHash hashes everything the model was sent but the tools and
// params: the same conversation yields the same call ids.
func historyHash(req *forge.ModelRequest) uint64 {
	h := fnv.New64a()
	var n [8]byte
	put := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(req.System)
	for _, m := range req.Messages {
		put(m.Role)
		for _, p := range m.Parts {
			put(p.Type)
			put(p.Text)
			put(p.CallID)
			put(p.Name)
			put(string(p.Arguments))
			put(p.Output)
		}
	}
	return h.Sum64() | 1 // never 0, the "not computed" mark
}

func callID(hist uint64, step, i int) string {
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], hist)
	binary.LittleEndian.PutUint64(b[8:], uint64(step))
	binary.LittleEndian.PutUint64(b[16:], uint64(i))
	h.Write(b[:])
	return fmt.Sprintf("call_%016x", h.Sum64())
}

func inputChars(req *forge.ModelRequest) int {
	n := len(req.System)
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			n += len(p.Text) + len(p.Output) + len(p.Arguments) + len(p.Name)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return n
}

const maxSummary = 200

// echo builds the reply of a model without a script.
func echo(req *forge.ModelRequest) Step {
	if n := len(req.Messages); n > 0 {
		last := req.Messages[n-1]
		var results []string
		for _, p := range last.Parts {
			if p.Type != forge.ModelPartToolResult {
				continue
			}
			name := p.Name
			if name == "" {
				name = toolName(req, p.CallID)
			}
			if p.IsError {
				name += " (error)"
			}
			results = append(results, name+": "+shorten(p.Output))
		}
		if len(results) > 0 {
			return Step{Text: "tool results: " + strings.Join(results, "; ")}
		}
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != forge.RoleUser {
			continue
		}
		var b strings.Builder
		b.WriteString("echo: ")
		for _, p := range m.Parts {
			if p.Type == forge.ModelPartText {
				b.WriteString(p.Text)
			}
		}
		return Step{Text: b.String()}
	}
	return Step{Text: "echo: "}
}

// toolName finds the name of the call id among the assistant's calls.
func toolName(req *forge.ModelRequest, callID string) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		for _, p := range req.Messages[i].Parts {
			if p.Type == forge.ModelPartToolCall && p.CallID == callID {
				return p.Name
			}
		}
	}
	return callID
}

func shorten(s string) string {
	if utf8.RuneCountInString(s) <= maxSummary {
		return s
	}
	r := []rune(s)
	return string(r[:maxSummary]) + "…"
}
