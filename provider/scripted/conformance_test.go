package scripted_test

import (
	"testing"

	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// TestConformance runs the provider conformance suite, as far as a
// scripted step can say what it asks.
func TestConformance(t *testing.T) { providertest.Run(t, providertest.Scripted()) }
