package httpapi

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// timeoutServer serves h behind bodyDeadline(d) on a TCP listener, as Serve
// does, and returns its address.
func timeoutServer(t *testing.T, d time.Duration, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: bodyDeadline(h, d), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// decodeHandler decodes a JSON body like every API handler, answers its
// error as the API does, then waits hold (a long answer, such as a
// stream) and answers 200 if its request is still alive.
func decodeHandler(hold time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var v struct {
			Text string `json:"text"`
		}
		if err := decodeBody(w, r, &v, true); err != nil {
			status, code, _ := classify(err)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, code)
			return
		}
		select {
		case <-time.After(hold):
			_, _ = io.WriteString(w, "alive")
		case <-r.Context().Done():
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "request context ended")
		}
	}
}

// TestSlowBodyGets408: a body that trickles in past the deadline is
// answered 408 request_timeout, and the connection does not stay pinned.
func TestSlowBodyGets408(t *testing.T) {
	t.Parallel()
	addr := timeoutServer(t, 200*time.Millisecond, decodeHandler(0))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	// Headers announce 100 bytes; only 10 come.
	if _, err := io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":\"a"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || string(body) != "request_timeout" {
		t.Fatalf("stalled body: %d %s, want 408 request_timeout", resp.StatusCode, body)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("answered after %v", waited)
	}
}

// TestBodyDeadlineLiftedAfterBody: once the body is read, the deadline no
// longer applies: an answer that takes longer than it (a stream) runs to
// its end with its request alive.
func TestBodyDeadlineLiftedAfterBody(t *testing.T) {
	t.Parallel()
	addr := timeoutServer(t, 100*time.Millisecond, decodeHandler(600*time.Millisecond))
	resp, err := http.Post("http://"+addr+"/x", "application/json", strings.NewReader(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "alive" {
		t.Fatalf("long answer after the body: %d %s", resp.StatusCode, body)
	}
}

// TestServeSetsIdleTimeout: Serve bounds idle keep-alive connections
// unless the caller chose a limit.
func TestServeSetsIdleTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ set, want time.Duration }{{0, ServerIdleTimeout}, {time.Second, time.Second}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close() // Serve returns at once, after setting its defaults
		srv := &http.Server{IdleTimeout: c.set}
		if err := Serve(srv, ln); err == nil || errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve on a closed listener: %v", err)
		}
		if srv.IdleTimeout != c.want {
			t.Fatalf("IdleTimeout %v (set %v), want %v", srv.IdleTimeout, c.set, c.want)
		}
	}
}
