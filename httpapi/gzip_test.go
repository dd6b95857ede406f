package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/client"
)

// raw makes a request without the transport's transparent gzip, so the
// answer arrives as the server encoded it.
func (s *stack) raw(method, path string, header map[string]string) answer {
	s.t.Helper()
	hr := s.newRequest(req{method: method, path: path, header: header})
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(hr)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v (%q)", err, b[:min(len(b), 40)])
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func varies(h http.Header) bool {
	for _, v := range h.Values("Vary") {
		if strings.Contains(strings.ToLower(v), "accept-encoding") {
			return true
		}
	}
	return false
}

// longSession runs turns until the session's message list is well over
// the compression threshold.
func (s *stack) longSession() string {
	s.t.Helper()
	s.createAgent("gz")
	ses := s.createSession("gz")
	for i := range 6 {
		var turn struct{ Status string }
		s.call("POST", "/v1/sessions/"+ses.ID+"/turns", msgTurn(strings.Repeat("a longer question ", 10)+string(rune('a'+i))), 200, &turn)
	}
	return ses.ID
}

// TestGzipJSONAnswers: a JSON answer over 1 KiB is gzipped for a client
// that accepts it and sent as is to one that does not, with the same
// JSON inside; both say Vary: Accept-Encoding. A compressed answer has no
// Content-Length; a plain one has the right one.
func TestGzipJSONAnswers(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	sid := s.longSession()
	path := "/v1/sessions/" + sid + "/messages"

	plain := s.raw("GET", path, nil)
	if plain.status != 200 || plain.header.Get("Content-Encoding") != "" || !varies(plain.header) {
		t.Fatalf("without Accept-Encoding: %d %v", plain.status, plain.header)
	}
	if len(plain.body) < 1024 || !json.Valid(plain.body) {
		t.Fatalf("the listing is %d bytes, want JSON over 1 KiB", len(plain.body))
	}
	for _, accept := range []string{"gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.5", "*", "identity, *;q=0.1"} {
		zipped := s.raw("GET", path, map[string]string{"Accept-Encoding": accept})
		if zipped.status != 200 || zipped.header.Get("Content-Encoding") != "gzip" || !varies(zipped.header) {
			t.Fatalf("Accept-Encoding %q: %d %v", accept, zipped.status, zipped.header)
		}
		if cl := zipped.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(zipped.body)) {
			t.Fatalf("Accept-Encoding %q: Content-Length %s on %d compressed bytes", accept, cl, len(zipped.body))
		}
		if got := gunzip(t, zipped.body); !bytes.Equal(got, plain.body) {
			t.Fatalf("Accept-Encoding %q: decompressed answer differs:\n%s\nwant\n%s", accept, got, plain.body)
		}
		if len(zipped.body) >= len(plain.body) {
			t.Fatalf("Accept-Encoding %q: %d compressed bytes for %d", accept, len(zipped.body), len(plain.body))
		}
	}
	for _, accept := range []string{"gzip;q=0", "identity", "br", "*;q=0", "gzip;q=0, *"} {
		a := s.raw("GET", path, map[string]string{"Accept-Encoding": accept})
		if a.header.Get("Content-Encoding") != "" || !varies(a.header) {
			t.Fatalf("Accept-Encoding %q: %v", accept, a.header)
		}
		if !bytes.Equal(a.body, plain.body) {
			t.Fatalf("Accept-Encoding %q: answer differs", accept)
		}
	}
}

// TestGzipLeavesSmallAnswersErrorsAndStreams: a short answer and an error
// stay plain JSON (an error is readable by any client), an event stream
// is never compressed and arrives as it is written, and HEAD answers
// carry GET's headers.
func TestGzipLeavesSmallAnswersErrorsAndStreams(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	sid := s.longSession()
	gz := map[string]string{"Accept-Encoding": "gzip"}

	small := s.raw("GET", "/v1/sessions/"+sid, gz)
	if small.status != 200 || small.header.Get("Content-Encoding") != "" || !varies(small.header) || !json.Valid(small.body) {
		t.Fatalf("a short answer: %d %v %s", small.status, small.header, small.body)
	}
	if cl := small.header.Get("Content-Length"); cl != strconv.Itoa(len(small.body)) {
		t.Fatalf("Content-Length %q of a %d-byte answer", cl, len(small.body))
	}
	for _, path := range []string{"/v1/sessions/ses_ghost", "/v1/sessions/" + sid + "/messages?view=nope", "/v1/nowhere"} {
		e := s.raw("GET", path, gz)
		if e.status < 400 || e.header.Get("Content-Encoding") != "" || e.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET %s: %d %v", path, e.status, e.header)
		}
		if (answer{body: e.body}).errCode() == "" {
			t.Fatalf("GET %s: error body %s", path, e.body)
		}
	}

	// HEAD: GET's headers, no body.
	get := s.raw("GET", "/v1/sessions/"+sid+"/messages", gz)
	head := s.raw("HEAD", "/v1/sessions/"+sid+"/messages", gz)
	if head.status != 200 || head.header.Get("Content-Encoding") != "gzip" || !varies(head.header) || len(head.body) != 0 {
		t.Fatalf("HEAD with gzip: %d %v %d bytes", head.status, head.header, len(head.body))
	}
	if get.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("GET with gzip: %v", get.header)
	}
	plainGet := s.raw("GET", "/v1/sessions/"+sid+"/messages", nil)
	plainHead := s.raw("HEAD", "/v1/sessions/"+sid+"/messages", nil)
	if plainHead.status != 200 || plainHead.header.Get("Content-Encoding") != "" || len(plainHead.body) != 0 ||
		plainHead.header.Get("Content-Length") != strconv.Itoa(len(plainGet.body)) {
		t.Fatalf("HEAD without gzip: %d %v (GET has %d bytes)", plainHead.status, plainHead.header, len(plainGet.body))
	}

	// An event stream: never compressed, each event as it comes.
	hr := s.newRequest(req{method: "GET", path: "/v1/sessions/" + sid + "/events?after=0",
		header: map[string]string{"Accept": "text/event-stream", "Accept-Encoding": "gzip"}})
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("event stream headers: %v", resp.Header)
	}
	got := make(chan string, 1)
	go func() {
		f, _ := newSSEReader(resp.Body).next()
		got <- f.event
	}()
	select {
	case ev := <-got:
		if ev != "turn.created" {
			t.Fatalf("first frame %q", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event frame arrived")
	}

	// The web inspector compresses its own assets: not twice.
	page := s.raw("GET", "/ui/", gz)
	if page.status != 200 || page.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("inspector page: %d %v", page.status, page.header)
	}
	if b := gunzip(t, page.body); !bytes.Contains(bytes.ToLower(b), []byte("<html")) {
		t.Fatalf("inspector page after one gunzip: %q", b[:min(len(b), 80)])
	}
}

// sawGzip is a transport that records whether answers came compressed
// (net/http's transparent gzip sets Uncompressed).
type sawGzip struct {
	next       http.RoundTripper
	compressed int
}

func (g *sawGzip) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(r)
	if err == nil && resp.Uncompressed {
		g.compressed++
	}
	return resp, err
}

// TestGzipGoClient: the official Go client, whose transport asks for gzip
// by itself, gets compressed listings and reads them as before.
func TestGzipGoClient(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	sid := s.longSession()
	spy := &sawGzip{next: &http.Transport{}}
	c, err := client.New(s.srv.URL, client.WithHTTPClient(&http.Client{Transport: spy}))
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.ListMessages(t.Context(), sid, client.ListMessagesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 12 {
		t.Fatalf("%d messages, want 12", len(page.Data))
	}
	if spy.compressed == 0 {
		t.Fatal("the listing did not come compressed")
	}
	if _, err := c.GetSession(t.Context(), "ses_ghost"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("an error answer through the client: %v", err)
	}
}
