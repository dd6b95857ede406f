package forge_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHTTPAPILinksNoModelSDK: the HTTP layer lists models through root
// types (forge.ModelInfo, forge.ProviderInfo), so it does not link the
// OpenAI and Anthropic SDKs; only the packages that call the models do.
func TestHTTPAPILinksNoModelSDK(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "./httpapi").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/openai/openai-go") || strings.HasPrefix(dep, "github.com/anthropics/anthropic-sdk-go") ||
			strings.HasPrefix(dep, "github.com/forge-runtime/forge/provider") {
			t.Errorf("httpapi depends on %s", dep)
		}
	}
}
