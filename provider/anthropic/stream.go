package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/forge-runtime/forge"
)

// Block kinds.
const (
	kindOther = iota // a block type this provider does not handle (ignored)
	kindText
	kindThinking
	kindRedacted
	kindTool
)

// block is a content block being streamed.
type block struct {
	index   int64
	kind    int
	started bool // text/reasoning start emitted
	// thinking
	signature []byte
	data      string // redacted_thinking
	// tool_use
	id, name   string
	startInput string // the input of content_block_start, when not {}
	input      []byte // input_json_delta fragments
}

// usage is the usage of a reply: message_start's, updated by message_delta's
// cumulative figures. input is the API's input_tokens, which counts only
// the prompt tokens after the last cache breakpoint.
type usage struct {
	input, output, cacheRead, cacheWrite, thinking int64
}

// forge reports InputTokens as the whole prompt (input_tokens plus cache
// reads plus cache writes), as OpenAI's prompt_tokens does, with the cache
// figures as a breakdown of it.
func (u usage) forge() forge.Usage {
	return forge.Usage{InputTokens: u.input + u.cacheRead + u.cacheWrite, OutputTokens: u.output,
		CacheReadTokens: u.cacheRead, CacheWriteTokens: u.cacheWrite, ReasoningTokens: u.thinking}
}

// merge takes each figure of r that is larger: message_delta's figures are
// cumulative, and some compatible servers send 0 for those they do not
// repeat. The output_tokens of message_delta (final) is the count of the
// whole reply and replaces message_start's.
func (u *usage) merge(r gjson.Result, final bool) {
	if !r.IsObject() {
		return
	}
	r.ForEach(func(k, v gjson.Result) bool {
		var dst *int64
		switch k.Str {
		case "input_tokens":
			dst = &u.input
		case "output_tokens":
			dst = &u.output
		case "cache_read_input_tokens":
			dst = &u.cacheRead
		case "cache_creation_input_tokens":
			dst = &u.cacheWrite
		case "output_tokens_details":
			if n := v.Get("thinking_tokens").Int(); n > u.thinking {
				u.thinking = n
			}
			return true
		default:
			return true
		}
		if n := v.Int(); n > *dst || final && dst == &u.output {
			*dst = n
		}
		return true
	})
}

// streamState turns stream events into forge events.
type streamState struct {
	p         *Provider
	yield     func(forge.ModelEvent, error) bool
	maxTokens int64

	blocks     []*block // open blocks (the API streams one at a time)
	free       []*block
	calls      int      // tool calls emitted
	broken     []*block // tool calls whose input is not valid JSON, held until stop_reason
	stopReason string
	stopped    bool // message_stop seen
	usage      usage
}

func (s *streamState) emit(t forge.ModelEventType, delta string) bool {
	return s.yield(forge.ModelEvent{Type: t, Delta: delta}, nil)
}

func (s *streamState) fail(msg string) bool {
	s.yield(forge.ModelEvent{}, &forge.ModelError{Provider: s.p.name, Message: msg})
	return false
}

// view returns data as a string without copying: substrings of it must be
// cloned before they outlive the event.
func view(data []byte) string {
	return unsafe.String(unsafe.SliceData(data), len(data))
}

// event handles one stream event; false means the consumer stopped or an
// error was yielded.
func (s *streamState) event(typ string, data []byte) bool {
	data = bytes.TrimSpace(data)
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return s.fail("malformed stream event " + typ + ": " + shorten(string(data)))
	}
	raw := view(data)
	switch typ {
	case "content_block_delta":
		return s.delta(raw)
	case "content_block_start":
		return s.start(raw)
	case "content_block_stop":
		return s.stop(gjson.Get(raw, "index").Int())
	case "message_start":
		s.usage.merge(gjson.Get(raw, "message.usage"), false)
	case "message_delta":
		return s.messageDelta(raw)
	case "message_stop":
		s.stopped = true
	}
	// Unknown event types are ignored, as the API versioning policy asks.
	return true
}

func (s *streamState) find(index int64) *block {
	for _, b := range s.blocks {
		if b.index == index {
			return b
		}
	}
	return nil
}

func (s *streamState) start(raw string) bool {
	var index int64
	var cb gjson.Result
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "content_block":
			cb = v
		}
		return true
	})
	if s.find(index) != nil {
		return s.fail("content_block_start for a block already open at index " + itoa(index))
	}
	var b *block
	if n := len(s.free); n > 0 {
		b = s.free[n-1]
		s.free = s.free[:n-1]
		*b = block{signature: b.signature[:0], input: b.input[:0]}
	} else {
		b = &block{}
	}
	b.index = index
	s.blocks = append(s.blocks, b)
	var text string
	cb.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			switch v.Str {
			case "text":
				b.kind = kindText
			case "thinking":
				b.kind = kindThinking
			case "redacted_thinking":
				b.kind = kindRedacted
			case "tool_use":
				b.kind = kindTool
			}
		case "text", "thinking":
			text = v.Str
		case "signature":
			b.signature = append(b.signature, v.Str...)
		case "data":
			b.data = strings.Clone(v.Str)
		case "id":
			b.id = strings.Clone(v.Str)
		case "name":
			b.name = strings.Clone(v.Str)
		case "input":
			if in := strings.TrimSpace(v.Raw); in != "" && in != "{}" {
				b.startInput = strings.Clone(in)
			}
		}
		return true
	})
	if text != "" {
		switch b.kind {
		case kindText:
			return s.open(b, forge.TextStart) && s.emit(forge.TextDelta, strings.Clone(text))
		case kindThinking:
			return s.open(b, forge.ReasoningStart) && s.emit(forge.ReasoningDelta, strings.Clone(text))
		}
	}
	return true
}

func (s *streamState) open(b *block, t forge.ModelEventType) bool {
	if b.started {
		return true
	}
	b.started = true
	return s.emit(t, "")
}

func (s *streamState) delta(raw string) bool {
	var index int64
	var d gjson.Result
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "delta":
			d = v
		}
		return true
	})
	var dtype, value string
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			dtype = v.Str
		case "text", "thinking", "partial_json", "signature":
			value = v.Str
		}
		return true
	})
	b := s.find(index)
	if b == nil {
		return s.fail("content_block_delta for no open block at index " + itoa(index))
	}
	switch dtype {
	case "text_delta":
		if b.kind != kindText {
			return s.fail("text_delta in a block that is not text")
		}
		if value == "" {
			return true
		}
		return s.open(b, forge.TextStart) && s.emit(forge.TextDelta, strings.Clone(value))
	case "thinking_delta":
		if b.kind != kindThinking {
			return s.fail("thinking_delta in a block that is not thinking")
		}
		if value == "" {
			return true
		}
		return s.open(b, forge.ReasoningStart) && s.emit(forge.ReasoningDelta, strings.Clone(value))
	case "signature_delta":
		b.signature = append(b.signature, value...)
	case "input_json_delta":
		b.input = append(b.input, value...)
	}
	// citations_delta and unknown delta types carry nothing forwarded.
	return true
}

// stop ends the block at index.
func (s *streamState) stop(index int64) bool {
	var b *block
	for i, o := range s.blocks {
		if o.index == index {
			b = o
			s.blocks = append(s.blocks[:i], s.blocks[i+1:]...)
			break
		}
	}
	if b == nil {
		return s.fail("content_block_stop for no open block at index " + itoa(index))
	}
	ok := s.end(b)
	if b.kind != kindTool || !s.isBroken(b) {
		s.free = append(s.free, b)
	}
	return ok
}

func (s *streamState) isBroken(b *block) bool {
	for _, o := range s.broken {
		if o == b {
			return true
		}
	}
	return false
}

func (s *streamState) end(b *block) bool {
	switch b.kind {
	case kindText:
		if b.started {
			return s.emit(forge.TextEnd, "")
		}
	case kindThinking, kindRedacted:
		var st thinkingState
		if b.kind == kindThinking && len(b.signature) > 0 {
			st = thinkingState{Type: "thinking", Signature: string(b.signature)}
		} else if b.kind == kindRedacted && b.data != "" {
			st = thinkingState{Type: "redacted_thinking", Data: b.data}
		} else if !b.started {
			return true // nothing to keep
		}
		var state json.RawMessage
		if st.Type != "" {
			state, _ = json.Marshal(st)
		}
		if !s.open(b, forge.ReasoningStart) {
			return false
		}
		return s.yield(forge.ModelEvent{Type: forge.ReasoningEnd, Provider: state}, nil)
	case kindTool:
		args := b.input
		if len(bytes.TrimSpace(args)) == 0 {
			args = append(args[:0], b.startInput...)
		}
		if len(bytes.TrimSpace(args)) == 0 {
			args = append(args[:0], "{}"...)
		}
		b.input = args
		if !json.Valid(args) {
			// Cut by max_tokens (known at message_delta) or malformed.
			s.broken = append(s.broken, b)
			return true
		}
		return s.call(b)
	}
	return true
}

func (s *streamState) call(b *block) bool {
	s.calls++
	args := make(json.RawMessage, len(b.input))
	copy(args, b.input)
	return s.yield(forge.ModelEvent{Type: forge.ToolCallEvent,
		ToolCall: &forge.ToolCall{ID: b.id, Name: b.name, Arguments: args}}, nil)
}

func (s *streamState) messageDelta(raw string) bool {
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "delta":
			if r := v.Get("stop_reason"); r.Type == gjson.String {
				s.stopReason = strings.Clone(r.Str)
			}
		case "usage":
			s.usage.merge(v, true)
		}
		return true
	})
	if s.stopReason == "max_tokens" {
		for _, b := range s.blocks {
			if b.kind == kindTool {
				return s.fail(cutMessage(b.name, s.maxTokens))
			}
		}
		if len(s.broken) > 0 {
			return s.fail(cutMessage(s.broken[0].name, s.maxTokens))
		}
	}
	return true
}

// finish closes what is still open once the reply has a stop_reason and
// emits the calls held back.
func (s *streamState) finish() bool {
	if s.stopReason == "max_tokens" {
		for _, b := range s.blocks {
			if b.kind == kindTool {
				return s.fail(cutMessage(b.name, s.maxTokens))
			}
		}
	}
	for len(s.blocks) > 0 {
		if !s.stop(s.blocks[0].index) {
			return false
		}
	}
	if s.stopReason == "max_tokens" && len(s.broken) > 0 {
		return s.fail(cutMessage(s.broken[0].name, s.maxTokens))
	}
	// Not cut: a model's invalid JSON is passed on raw; the engine answers
	// the call with an error the model can correct.
	for _, b := range s.broken {
		if !s.call(b) {
			return false
		}
	}
	s.broken = nil
	return true
}

func (s *streamState) finishReason() string {
	switch s.stopReason {
	case "end_turn", "stop_sequence", "pause_turn":
		if s.calls > 0 {
			return forge.FinishToolCalls
		}
		return forge.FinishStop
	case "tool_use":
		return forge.FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return forge.FinishLength
	case "refusal":
		return forge.FinishFilter
	}
	if s.calls > 0 {
		return forge.FinishToolCalls
	}
	return forge.FinishStop
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
