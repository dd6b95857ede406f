package openai_test

import (
	"testing"

	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// TestConformance runs the provider conformance suite against both APIs.
func TestConformance(t *testing.T) {
	t.Run("chat", func(t *testing.T) { providertest.Run(t, providertest.OpenAIChat()) })
	t.Run("responses", func(t *testing.T) { providertest.Run(t, providertest.OpenAIResponses()) })
}
