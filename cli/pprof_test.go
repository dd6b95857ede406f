package cli

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesPublicPprof: the profiling listener has no
// authentication, so forge serve refuses any address that is not loopback
// (before opening the database).
func TestServeRefusesPublicPprof(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "10.1.2.3:6060", "example.com:6060"} {
		db := filepath.Join(t.TempDir(), "forge.db")
		err := serve(context.Background(), serveOptions{addr: "127.0.0.1:0", db: db, logLevel: "error",
			pprofAddr: addr, logOut: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "--pprof-addr") {
			t.Errorf("--pprof-addr %s: err = %v, want a refusal", addr, err)
		}
	}
}

// TestServeProfiles: the handlers answer on their own listener, and stop
// closes it.
func TestServeProfiles(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	stop := serveProfiles(ln, slog.New(slog.DiscardHandler), logText)
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/block", "/debug/pprof/mutex", "/debug/pprof/cmdline"} {
		res, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || len(b) == 0 {
			t.Errorf("GET %s: %d, %d bytes", path, res.StatusCode, len(b))
		}
	}
	stop()
	if res, err := hc.Get(base + "/debug/pprof/"); err == nil {
		res.Body.Close()
		t.Error("the profiling listener still answers after stop")
	}
}
