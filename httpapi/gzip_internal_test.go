package httpapi

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                        false,
		"gzip":                    true,
		"GZIP":                    true,
		"x-gzip":                  true,
		"deflate, gzip":           true,
		"gzip;q=0":                false,
		"gzip; q=0.000":           false,
		"gzip;q=0.001":            true,
		"gzip;q=bogus":            false,
		"gzip;q=2":                false,
		"*":                       true,
		"*;q=0":                   false,
		"identity":                false,
		"br, deflate":             false,
		"gzip;q=0, *":             false, // named wins over *
		"*;q=0, gzip":             true,
		" gzip ; q = 0.5 ,br":     true,
		"gzipped":                 false,
		"identity;q=1, *;q=0.5":   true,
		",,,gzip;;;":              true,
		strings.Repeat("a,", 500): false,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

// serveGzip runs h behind compress (and the request log, which turns a
// panic into a 500) for a request with accept as its Accept-Encoding.
func serveGzip(t *testing.T, method, accept string, h http.HandlerFunc) *httptest.ResponseRecorder {
	t.Helper()
	s := New(Config{})
	r := httptest.NewRequest(method, "/x", nil)
	if accept != "" {
		r.Header.Set("Accept-Encoding", accept)
	}
	w := httptest.NewRecorder()
	s.logRequests(s.compress(h)).ServeHTTP(w, r)
	return w
}

func jsonBody(n int) []byte {
	return []byte(`{"data":"` + strings.Repeat("x", n) + `"}`)
}

func TestGzipHeaders(t *testing.T) {
	long := jsonBody(4000)
	t.Run("ETag names the compressed representation, Content-Length goes", func(t *testing.T) {
		for tag, want := range map[string]string{`"v1"`: `"v1-gz"`, `W/"v1"`: `W/"v1-gz"`} {
			w := serveGzip(t, "GET", "gzip", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				w.Header().Set("ETag", tag)
				w.Header().Set("Content-Length", strconv.Itoa(len(long)))
				_, _ = w.Write(long)
			})
			if w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("ETag") != want ||
				w.Header().Get("Content-Length") != "" || w.Header().Get("Vary") != "Accept-Encoding" {
				t.Fatalf("tag %s: %v", tag, w.Header())
			}
			zr, err := gzip.NewReader(w.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := io.ReadAll(zr); !bytes.Equal(got, long) {
				t.Fatalf("body differs")
			}
		}
	})
	t.Run("without gzip the ETag and length stay", func(t *testing.T) {
		w := serveGzip(t, "GET", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("ETag", `"v1"`)
			_, _ = w.Write(long)
		})
		if w.Header().Get("Content-Encoding") != "" || w.Header().Get("ETag") != `"v1"` || !bytes.Equal(w.Body.Bytes(), long) ||
			w.Header().Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%v", w.Header())
		}
	})
	t.Run("not JSON, already encoded, no content: untouched", func(t *testing.T) {
		cases := []struct {
			name string
			h    http.HandlerFunc
		}{
			{"text", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write(long)
			}},
			{"no type", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(long) }},
			{"event stream", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write(long)
			}},
			{"encoded", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", "br")
				_, _ = w.Write(long)
			}},
			{"304", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotModified)
			}},
			{"204", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNoContent)
			}},
		}
		for _, c := range cases {
			w := serveGzip(t, "GET", "gzip", c.h)
			if enc := w.Header().Get("Content-Encoding"); enc != "" && enc != "br" {
				t.Fatalf("%s: Content-Encoding %q", c.name, enc)
			}
			if c.name != "304" && c.name != "204" && !bytes.Equal(w.Body.Bytes(), long) {
				t.Fatalf("%s: body changed", c.name)
			}
		}
	})
	t.Run("a short answer stays plain with its status", func(t *testing.T) {
		w := serveGzip(t, "GET", "gzip", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusConflict, errorBody{apiError{Code: "conflict", Message: "no"}})
		})
		if w.Code != http.StatusConflict || w.Header().Get("Content-Encoding") != "" ||
			w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) || !strings.Contains(w.Body.String(), `"conflict"`) {
			t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
		}
	})
	t.Run("a long error is still JSON, compressed", func(t *testing.T) {
		w := serveGzip(t, "GET", "gzip", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusBadRequest, errorBody{apiError{Code: "invalid_request", Message: strings.Repeat("why ", 500)}})
		})
		if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
	})
	t.Run("a flush sends what is held", func(t *testing.T) {
		var afterFlush int
		w := serveGzip(t, "GET", "gzip", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"a":`))
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
			afterFlush = w.(*gzipWriter).ResponseWriter.(*recorder).ResponseWriter.(*httptest.ResponseRecorder).Body.Len()
			_, _ = w.Write([]byte(`1}`))
		})
		if afterFlush == 0 {
			t.Fatal("nothing reached the client at the flush")
		}
		zr, err := gzip.NewReader(w.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(zr); string(got) != `{"a":1}` {
			t.Fatalf("body %q", got)
		}
	})
	t.Run("a panic before the answer is a 500 in JSON", func(t *testing.T) {
		w := serveGzip(t, "GET", "gzip", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(jsonBody(10))
			panic("boom")
		})
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"internal"`) {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
	t.Run("HEAD of a long answer: GET's headers, nothing compressed", func(t *testing.T) {
		w := serveGzip(t, "HEAD", "gzip", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"data": strings.Repeat("x", 4000)})
		})
		if w.Code != 200 || w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("Content-Length") != "" {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
	})
}
