package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/httpapi"
)

// serveReal serves the stack's handler the way forge serve does
// (httpapi.Serve on a TCP listener) and returns its address.
func serveReal(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- httpapi.Serve(srv, ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawExchange writes request on a new connection while reading the answer
// (the server may answer before the request is all sent) and returns the
// answer's status, Content-Type and body.
func rawExchange(t *testing.T, addr, request string) (int, string, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.WriteString(conn, request) // fails once the server hangs up: fine
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	conn.Close()
	<-wrote
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// TestServeAnswersNetHTTPRefusalsInJSON: what net/http refuses before any
// handler runs (headers beyond even the server's MaxHeaderBytes, a
// malformed request) is answered in JSON too.
func TestServeAnswersNetHTTPRefusalsInJSON(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	addr := serveReal(t, s.handler)
	for _, c := range []struct {
		name, request string
		status        int
		code, msg     string
	}{
		{"header above the API limit", "GET /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\nX-Big: " + strings.Repeat("b", 100<<10) + "\r\n\r\n",
			431, "header_too_large", "64 KiB"},
		{"header above the server limit", "GET /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n",
			431, "header_too_large", "header fields"},
		{"many headers above the server limit", "GET /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\n" + strings.Repeat("X-Many: "+strings.Repeat("m", 1000)+"\r\n", 1200) + "\r\n",
			431, "header_too_large", "header fields"},
		{"malformed header", "GET /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\nNo colon here\r\n\r\n",
			400, "invalid_request", "malformed"},
		{"no Host", "GET /v1/agents HTTP/1.1\r\n\r\n", 400, "invalid_request", "Host"},
		{"unknown transfer coding", "POST /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\nTransfer-Encoding: gzip\r\n\r\n",
			501, "not_implemented", "transfer"},
		// Found by TestRouteFuzz: answered by net/http or its ServeMux in
		// plain text, with no body, or as a 5xx.
		{"another HTTP version", "GET /v1/agents HTTP/2.5\r\nHost: " + addr + "\r\n\r\n", 400, "invalid_request", "HTTP/1.1"},
		{"HTTP/0.9", "GET /v1/agents HTTP/0.9\r\nHost: " + addr + "\r\n\r\n", 400, "invalid_request", "HTTP/1.1"},
		{"an Expect other than 100-continue", "POST /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}",
			417, "invalid_request", "Expect"},
		{"the asterisk target", "GET * HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", 400, "invalid_request", "OPTIONS"},
		{"CONNECT", "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", 405, "method_not_allowed", "CONNECT"},
		{"an inspector page that does not exist", "GET /ui/nope HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", 404, "not_found", "/ui/nope"},
		{"a write to the inspector", "POST /ui/ HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 0\r\n\r\n", 405, "method_not_allowed", "GET, HEAD"},
	} {
		status, ct, body := rawExchange(t, addr, c.request)
		var e struct {
			Error struct{ Code, Message string }
		}
		if status != c.status || ct != "application/json" || json.Unmarshal(body, &e) != nil ||
			e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%s: %d %q %.300s", c.name, status, ct, body)
		}
	}
	// The connection still serves ordinary requests.
	status, _, body := rawExchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
	if status != 200 {
		t.Fatalf("healthz: %d %s", status, body)
	}
}
