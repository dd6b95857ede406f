package provider_test

import (
	"testing"

	"github.com/forge-runtime/forge/provider/internal/providertest"
)

// TestReliabilityConformance runs the suite's cases of the wrapper
// (retries, timeouts, cost) around every provider the registry builds.
func TestReliabilityConformance(t *testing.T) {
	for _, p := range providertest.All() {
		t.Run(p.Name, func(t *testing.T) { providertest.RunWrapped(t, p) })
	}
}
