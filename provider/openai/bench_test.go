package openai_test

import (
	"net/http"
	"testing"

	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// BenchmarkOpenAIStreamChunk measures one streamed chunk through the Chat
// Completions provider (see providertest.BenchmarkStream).
func BenchmarkOpenAIStreamChunk(b *testing.B) {
	providertest.BenchmarkStream(b, providertest.OpenAIChat())
}

// BenchmarkResponsesStreamChunk measures one streamed output_text delta
// through the Responses provider.
func BenchmarkResponsesStreamChunk(b *testing.B) {
	providertest.BenchmarkStream(b, providertest.OpenAIResponses())
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
