package cli

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider"
)

// TestOperatorKeyIsChecked: forge serve refuses a short operator key and
// one that is also a tenant's key, before it opens anything.
func TestOperatorKeyIsChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		o    serveOptions
		want string
	}{
		{serveOptions{operatorKey: "short"}, "at least 16 characters"},
		{serveOptions{operatorKey: "has a space in it, long"}, "without spaces"},
		{serveOptions{operatorKey: "the-same-key-0123456", apiKeys: "the-same-key-0123456=acme"}, "also a tenant's API key"},
	} {
		c.o.addr, c.o.db, c.o.logLevel, c.o.logOut = "127.0.0.1:0", filepath.Join(dir, "forge.db"), "error", io.Discard
		if err := serve(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o.operatorKey, err, c.want)
		}
	}
}

// TestScriptedQuotaAppliesWithKeys: the scripted providers' quota covers
// every provider of kind scripted, applies to a server with keys, and to
// a keyless one only when a flag sets it.
func TestScriptedQuotaAppliesWithKeys(t *testing.T) {
	t.Parallel()
	models, err := provider.Build(&provider.Config{Providers: []provider.ProviderConfig{{Name: "fake", Kind: provider.KindScripted}}}, provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	o := serveOptions{scriptedRunning: defaultScriptedRunning, scriptedPerMinute: defaultScriptedPerMinute}
	q := scriptedQuota(o, true, models, log)
	if q == nil || q.Running != defaultScriptedRunning || q.PerMinute != defaultScriptedPerMinute ||
		!slices.Equal(q.Providers, []string{"fake", "scripted"}) {
		t.Fatalf("with keys: %+v", q)
	}
	if q := scriptedQuota(o, false, models, log); q != nil {
		t.Errorf("keyless, no flag: %+v", q)
	}
	o.scriptedQuotaSet = true
	if q := scriptedQuota(o, false, models, log); q == nil {
		t.Error("keyless with a flag: no quota")
	}
	o.scriptedRunning, o.scriptedPerMinute = 0, 0
	if q := scriptedQuota(o, true, models, log); q != nil {
		t.Errorf("both 0: %+v", q)
	}
}
