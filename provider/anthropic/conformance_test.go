package anthropic_test

import (
	"testing"

	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// TestConformance runs the provider conformance suite.
func TestConformance(t *testing.T) { providertest.Run(t, providertest.Anthropic()) }
