package engine

import (
	"fmt"
	"sync/atomic"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/modelview"
)

// Defaults of the per-turn output limits (Config.MaxTurnOutputBytes and
// Config.MaxTurnOutputTokens).
const (
	// DefaultMaxTurnOutputBytes bounds what one turn streams: its text,
	// reasoning and tool calls, in every thread.
	DefaultMaxTurnOutputBytes = 8 << 20
	// DefaultMaxTurnOutputTokens bounds the output tokens of one turn's
	// model calls, as the providers report them (Forge's estimate, 4 bytes
	// a token, while a call streams). It is above what the byte limit's
	// text makes (about 2.1M tokens), so streamed output stops at the byte
	// limit, and output a provider counts without streaming it (hidden
	// reasoning) at this one.
	DefaultMaxTurnOutputTokens = 2_500_000
)

// Kinds of outputLimitError.
const (
	limitBytes  = "bytes"
	limitTokens = "tokens"
)

// outputLimitError ends a turn whose output reached one of the server's
// limits: it ends errored with code output_limit, what was streamed kept.
type outputLimitError struct {
	kind  string // limitBytes or limitTokens
	limit int64
}

func (e *outputLimitError) Error() string {
	if e.kind == limitTokens {
		return fmt.Sprintf("the turn reached the server's limit of %d output tokens per turn (max-turn-output-tokens); what was streamed is kept: send a new message to continue", e.limit)
	}
	return fmt.Sprintf("the turn reached the server's limit of %d bytes of output per turn (max-turn-output-bytes: text, reasoning and tool calls); what was streamed is kept: send a new message to continue", e.limit)
}

// outputBudget counts a turn's output against the limits. Its threads
// share it: child threads stream on their delegations' goroutines.
type outputBudget struct {
	maxBytes, maxTokens int64 // not positive: no limit
	// bytes are the streamed text, reasoning, tool names and arguments.
	bytes atomic.Int64
	// tokens are the output tokens of the model calls that ended.
	tokens atomic.Int64
	// hit is the first limit reached.
	hit atomic.Pointer[outputLimitError]
}

func newOutputBudget(maxBytes, maxTokens int64) *outputBudget {
	return &outputBudget{maxBytes: maxBytes, maxTokens: maxTokens}
}

// take counts n more bytes of a model call that has streamed inCall bytes
// before them. It returns how many of them fit (all: n, and no error);
// when not all fit, the limit reached, which the turn ends with.
func (b *outputBudget) take(n, inCall int) (fit int, err *outputLimitError) {
	fit = n
	if b.maxTokens > 0 {
		// While a call streams, its tokens are estimated from its bytes.
		room := (b.maxTokens-b.tokens.Load())*modelview.CharsPerToken - int64(inCall)
		if int64(fit) > room {
			fit, err = int(max(room, 0)), &outputLimitError{kind: limitTokens, limit: b.maxTokens}
		}
	}
	if b.maxBytes > 0 {
		for {
			cur := b.bytes.Load()
			want := int64(fit)
			if cur+want > b.maxBytes {
				want = max(b.maxBytes-cur, 0)
				err = &outputLimitError{kind: limitBytes, limit: b.maxBytes}
			}
			if b.bytes.CompareAndSwap(cur, cur+want) {
				fit = int(want)
				break
			}
		}
	} else {
		b.bytes.Add(int64(fit))
	}
	if err != nil {
		b.hit.CompareAndSwap(nil, err)
	}
	return fit, err
}

// ended adds a model call's output tokens; past the token limit, the turn
// makes no further model call.
func (b *outputBudget) ended(u forge.Usage) {
	total := b.tokens.Add(max(u.OutputTokens, 0))
	if b.maxTokens > 0 && total >= b.maxTokens {
		b.hit.CompareAndSwap(nil, &outputLimitError{kind: limitTokens, limit: b.maxTokens})
	}
}

// reached returns the limit the turn reached, nil while none is.
func (b *outputBudget) reached() error {
	if e := b.hit.Load(); e != nil {
		return e
	}
	return nil
}

// cutUTF8 returns at most n bytes of s, cut at a character boundary.
func cutUTF8(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// limit is a configured limit: def when v is 0, none (0) when negative.
func limit(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}
