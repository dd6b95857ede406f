package openai

import (
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3/responses"
)

var benchEvent = []byte(`{"type":"response.output_text.delta","sequence_number":42,"item_id":"msg_68a1f0c6a4c08190a0f3e2d1c0b9a8f70a1b2c3d4e5f6a7b","output_index":1,"content_index":0,"delta":" token","logprobs":[],"obfuscation":"qVx3LmP0aZ"}`)

// BenchmarkResponsesEventDecode compares decoding one output_text delta
// into the SDK's ResponseStreamEventUnion (what NewStreaming does for
// every event) with the provider's one-pass read.
func BenchmarkResponsesEventDecode(b *testing.B) {
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e responses.ResponseStreamEventUnion
			if err := json.Unmarshal(benchEvent, &e); err != nil || e.Delta != " token" {
				b.Fatal(err)
			}
		}
	})
	b.Run("provider", func(b *testing.B) {
		b.ReportAllocs()
		var e rsEvent
		for b.Loop() {
			if err := e.parse(benchEvent); err != nil || e.delta != " token" {
				b.Fatal(err)
			}
		}
	})
}
