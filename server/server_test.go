package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/sandbox"
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

// TestServeAndStop: a server on a fresh SQLite file serves the API on a
// loopback address, runs a turn, refuses a public address without keys,
// and Stop closes everything (the file can be owned again).
func TestServeAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "forge.db")
	cfg := Config{DB: db, Logger: slog.New(slog.DiscardHandler), Sandbox: sandbox.Options{UseBwrap: sandbox.BwrapOff}}
	srv, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx, "0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "without API keys") {
		t.Fatalf("a public address without keys: %v", err)
	}
	if err := srv.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	post := func(path, body string) string {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	post("/v1/agents", `{"name":"a","model":"scripted/echo"}`)
	var ses struct{ ID string }
	_ = json.Unmarshal([]byte(post("/v1/sessions", `{"agent":"a"}`)), &ses)
	if out := post("/v1/sessions/"+ses.ID+"/turns", `{"input":[{"type":"message","text":"hi"}]}`); !strings.Contains(out, `"status":"done"`) {
		t.Fatalf("turn %s", out)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("still serving after Stop")
	}
	again, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("the file is still owned after Stop: %v", err)
	}
	_ = again.Stop(ctx)
}
