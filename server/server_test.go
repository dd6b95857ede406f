package server

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/forge-runtime/forge/provider"
)

// TestScriptedQuotaAppliesWithKeys: the scripted providers' quota covers
// every provider of kind scripted, applies to a server with keys, and to
// a keyless one only when its config says so (forge serve: a flag).
func TestScriptedQuotaAppliesWithKeys(t *testing.T) {
	t.Parallel()
	models, err := provider.Build(&provider.Config{Providers: []provider.ProviderConfig{{Name: "fake", Kind: provider.KindScripted}}}, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	q := scriptedQuota(nil, true, models, log)
	if q == nil || q.Running != DefaultScriptedQuota.Running || q.PerMinute != DefaultScriptedQuota.PerMinute ||
		!slices.Equal(q.Providers, []string{"fake", "scripted"}) {
		t.Fatalf("with keys: %+v", q)
	}
	if q := scriptedQuota(nil, false, models, log); q != nil {
		t.Errorf("keyless, no flag: %+v", q)
	}
	set := &ScriptedQuota{Running: 2, PerMinute: 3, Keyless: true}
	if q := scriptedQuota(set, false, models, log); q == nil || q.Running != 2 || q.PerMinute != 3 {
		t.Errorf("keyless with a flag: %+v", q)
	}
	if q := scriptedQuota(&ScriptedQuota{Keyless: true}, true, models, log); q != nil {
		t.Errorf("both 0: %+v", q)
	}
}
