package openai

import (
	"encoding/json"
	"testing"

	sdk "github.com/openai/openai-go/v3"
)

var benchChunk = []byte(`{"id":"chatcmpl-Bz4kQe1wJm7uZ0aXH3vN2cT8pLsRf","object":"chat.completion.chunk","created":1754061234,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"aQ"}`)

// BenchmarkChunkDecode compares decoding one chunk into the SDK's
// ChatCompletionChunk with the provider's purpose-made struct.
func BenchmarkChunkDecode(b *testing.B) {
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c sdk.ChatCompletionChunk
			if err := json.Unmarshal(benchChunk, &c); err != nil || c.Choices[0].Delta.Content != " token" {
				b.Fatal(err)
			}
		}
	})
	b.Run("provider", func(b *testing.B) {
		b.ReportAllocs()
		var c chunk
		for b.Loop() {
			if err := c.parse(benchChunk); err != nil || c.content != " token" {
				b.Fatal(err)
			}
		}
	})
}
