package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sandbox"
	"github.com/forge-runtime/forge/server"
)

// newServer runs the real server in-process (SQLite in a temp dir, the
// engine, the HTTP API on a loopback httptest server) and returns its URL.
func newServer(t *testing.T) string {
	t.Helper()
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	return newServerWith(t, models)
}

// newServerWith is newServer with the given models.
func newServerWith(t *testing.T, models *provider.Registry) string {
	t.Helper()
	srv, err := server.New(context.Background(), server.Config{DB: t.TempDir() + "/forge.db", Models: models,
		Logger: slog.New(slog.DiscardHandler), NoMetrics: true, Sandbox: sandbox.Options{UseBwrap: sandbox.BwrapOff}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	return hs.URL
}

func runMode(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("forge-load %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	t.Logf("forge-load %s:\n%s", args[0], out.String())
	return out.String()
}

func wantLines(t *testing.T, out string, prefixes ...string) {
	t.Helper()
	for _, p := range prefixes {
		found := false
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, p) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no line starting %q in:\n%s", p, out)
		}
	}
}

func TestModes(t *testing.T) {
	t.Parallel()
	url := newServer(t)
	t.Run("turns", func(t *testing.T) {
		out := runMode(t, "turns", "--server", url, "--sessions", "4", "--duration", "300ms", "--rotate", "5")
		wantLines(t, out, "turns ", "turns/s ", "latency ")
		if strings.Contains(out, "turns      0 ") {
			t.Errorf("no turn ran:\n%s", out)
		}
	})
	t.Run("turns max", func(t *testing.T) {
		out := runMode(t, "turns", "--server", url, "--sessions", "3", "--duration", "1m", "--max-turns", "7", "--warmup", "0")
		wantLines(t, out, "turns      7 in ")
	})
	t.Run("deltas", func(t *testing.T) {
		out := runMode(t, "deltas", "--server", url, "--deltas", "500", "--turns", "2")
		wantLines(t, out, "turn 1     500 deltas", "turn 2     500 deltas", "deltas/s ", "received   1000 of 1000 deltas sent (0 lost)")
	})
	t.Run("idle-sse", func(t *testing.T) {
		// The server runs in this process, so its RSS is ours.
		out := runMode(t, "idle-sse", "--server", url, "--subscribers", "20", "--duration", "300ms", "--pid", strconv.Itoa(os.Getpid()))
		wantLines(t, out, "server RSS before:", "server RSS while open:", "subscribers open             20 ", "subscribers still open       20 of 20")
	})
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, args := range [][]string{
		{"turns", "--server", "http://example.com:8080", "--duration", "1s"},
		{"deltas", "--server", "http://10.0.0.1:8080"},
		{"idle-sse", "--server", "ftp://127.0.0.1:21"},
		{"turns", "--sessions", "0"},
		{"deltas", "--deltas", "0"},
		{"idle-sse", "--subscribers", "20000"},
		{"trivial", "--server", "http://10.0.0.1:8080", "--provider", "scripted"},
		{"trivial", "--provider", "openai"}, // no --model-url
		{"trivial", "--provider", "openai", "--model-url", "http://example.com/v1"},
		{"trivial", "--provider", "anthropic", "--spawn"},
		{"trivial", "--turns", "0", "--spawn"},
		{"trivial", "--model", "a/b", "--spawn"},
	} {
		var out, errOut bytes.Buffer
		if err := run(ctx, args, &out, &errOut); err == nil {
			t.Errorf("forge-load %q: no error", args)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"nope"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("unknown mode: %v, want a usage error", err)
	}
	if err := run(ctx, nil, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("no mode: %v, want a usage error", err)
	}
	if err := run(ctx, []string{"turns", "--bogus"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("unknown flag: %v, want a usage error", err)
	}
}
