package anthropic

import (
	"encoding/json"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/forge-runtime/forge"
)

var benchEvent = []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}`)

// BenchmarkEventDecode compares decoding one content_block_delta into the
// SDK's MessageStreamEventUnion (what its Stream does for every event) with
// the provider's one-pass read, normalization included.
func BenchmarkEventDecode(b *testing.B) {
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var ev sdk.MessageStreamEventUnion
			if err := json.Unmarshal(benchEvent, &ev); err != nil || ev.Delta.Text != " token" {
				b.Fatal(err)
			}
		}
	})
	b.Run("provider", func(b *testing.B) {
		b.ReportAllocs()
		var got string
		s := streamState{p: &Provider{name: "anthropic"}, yield: func(ev forge.ModelEvent, err error) bool {
			got = ev.Delta
			return err == nil
		}}
		s.blocks = []*block{{kind: kindText, started: true}}
		for b.Loop() {
			if !s.event("content_block_delta", benchEvent) || got != " token" {
				b.Fatal("decode failed")
			}
		}
	})
}
