package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// apiCaller is a JSON call to a started server: it fails the test on a
// transport error or an answer of 300 and up, and decodes into out.
type apiCaller func(method, path, body string, out any)

// startForTest starts a server built from cfg on a loopback port; the
// caller stops it.
func startForTest(t *testing.T, cfg Config) (*Server, apiCaller) {
	t.Helper()
	ctx := context.Background()
	srv, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	return srv, func(method, path, body string, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
	}
}
