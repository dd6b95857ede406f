package anthropic_test

import (
	"testing"

	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// BenchmarkAnthropicStreamChunk measures one streamed text delta through
// the provider (see providertest.BenchmarkStream).
func BenchmarkAnthropicStreamChunk(b *testing.B) {
	providertest.BenchmarkStream(b, providertest.Anthropic())
}
