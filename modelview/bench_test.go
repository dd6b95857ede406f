package modelview

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

// benchHistory is a settled history of n messages as a long session of
// trivial turns and tool round trips leaves it: user, assistant with a
// call, tool result folded in, assistant reply.
func benchHistory(n int) []*forge.Message {
	out := make([]*forge.Message, 0, n)
	for i := 0; len(out) < n; i++ {
		out = append(out, benchUser(len(out)))
		if len(out) < n && i%4 == 3 {
			id := fmt.Sprintf("call_%d", i)
			o := strings.Repeat("output ", 20)
			out = append(out, &forge.Message{ID: fmt.Sprintf("msg_%08d", len(out)), Role: forge.RoleAssistant,
				Finish: forge.FinishToolCalls, Usage: &forge.Usage{InputTokens: int64(100 + i), OutputTokens: 10},
				Parts: []*forge.Part{{Type: forge.PartTool, CallID: id, Tool: "read_file", State: forge.StateCompleted,
					Arguments: []byte(`{"path":"a.txt"}`), Output: &o}}})
		}
		if len(out) < n {
			out = append(out, benchReply(len(out)))
		}
	}
	return out
}

func benchUser(i int) *forge.Message {
	return &forge.Message{ID: fmt.Sprintf("msg_%08d", i), Role: forge.RoleUser,
		Parts: []*forge.Part{{Type: forge.PartText, State: forge.StateCompleted, Text: "a question of the kind a user asks"}}}
}

func benchReply(i int) *forge.Message {
	return &forge.Message{ID: fmt.Sprintf("msg_%08d", i), Role: forge.RoleAssistant, Finish: forge.FinishStop,
		Usage: &forge.Usage{InputTokens: int64(100 + i), OutputTokens: 20},
		Parts: []*forge.Part{{Type: forge.PartText, State: forge.StateCompleted, Text: "an answer of the kind a model gives"}}}
}

// BenchmarkTurnView is what the model view costs one trivial turn of a
// session of 10 and of 10,000 messages, as the engine computes it: the
// user message appended, the context estimate before the step (the
// compaction threshold), the request's model messages, the reply
// appended, the context size at the end. The session grows by two
// messages a turn and starts over every 50 turns (outside the timing), so
// its length stays about the one named. Flat: the memo converts and scans
// each message once.
//
//	go test -run '^$' -bench TurnView -benchmem ./modelview/
func BenchmarkTurnView(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("msgs=%d", n), func(b *testing.B) {
			base := benchHistory(n)
			var (
				h    []*forge.Message
				memo Memo
				sink int64
			)
			reset := func() {
				h = slices.Grow(slices.Clone(base), 100)
				_, memo = Memo{}.Convert(h)
			}
			reset()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%50 == 49 {
					b.StopTimer()
					reset()
					b.StartTimer()
				}
				i++
				h = append(h, benchUser(len(h)))
				used, at := memo.ReportedContext(h)
				sink += used + memo.TokensAfter(h, at)
				var msgs []forge.ModelMessage
				msgs, memo = memo.Convert(h)
				sink += int64(len(msgs))
				h = append(h, benchReply(len(h)))
				used, _ = memo.ReportedContext(h)
				sink += used
			}
			if sink == 0 {
				b.Fatal("nothing computed")
			}
		})
	}
}
