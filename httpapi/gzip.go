package httpapi

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// minGzipSize is the smallest JSON answer compressed: below it gzip's
// framing and the work cost more than they save.
const minGzipSize = 1024

// gzipWriters are reused: a writer holds some 800 KB of compressor state.
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// compress gzips JSON answers of at least minGzipSize bytes for clients
// that accept it (Accept-Encoding), and marks every JSON answer Vary:
// Accept-Encoding. Nothing else is touched: event streams (which must
// reach the client as each event is written), answers that already have a
// Content-Encoding (the web inspector's own gzip), bodies that are not
// JSON. A compressed answer loses its Content-Length and its ETag names
// the compressed representation ("x" becomes "x-gz", as the inspector's
// do). HEAD answers carry the headers GET's would, with no body.
func (s *Server) compress(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw := &gzipWriter{ResponseWriter: w, accept: acceptsGzip(r.Header.Get("Accept-Encoding")),
			head: r.Method == http.MethodHead}
		defer func() {
			if p := recover(); p != nil {
				// Nothing buffered is sent: the request log answers 500 if
				// nothing was.
				gw.abandon()
				panic(p)
			}
			gw.finish()
		}()
		next.ServeHTTP(gw, r)
	})
}

// gzipWriter decides at the answer's start whether to compress it, then
// holds its first bytes until there are enough to.
type gzipWriter struct {
	http.ResponseWriter
	accept, head bool

	status int          // held back while buffering
	mode   gzipMode     // what is done with the body
	buf    bytes.Buffer // the body so far, while buffering
	gz     *gzip.Writer
}

type gzipMode int

const (
	undecided gzipMode = iota
	buffering          // JSON for a client that takes gzip: too short so far
	passing            // written as it comes
	zipping            // compressed
)

func (g *gzipWriter) WriteHeader(code int) {
	if g.mode != undecided {
		if g.mode == passing {
			g.ResponseWriter.WriteHeader(code) // a later call: net/http reports it
		}
		return
	}
	if code >= 100 && code < 200 {
		g.ResponseWriter.WriteHeader(code) // informational: the answer is still to come
		return
	}
	h := g.Header()
	json := isJSON(h.Get("Content-Type"))
	if json {
		addVary(h)
	}
	if !json || !g.accept || h.Get("Content-Encoding") != "" || code == http.StatusNoContent || code == http.StatusNotModified {
		g.mode = passing
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.mode, g.status = buffering, code
}

func (g *gzipWriter) Write(b []byte) (int, error) {
	if g.mode == undecided {
		g.WriteHeader(http.StatusOK)
	}
	switch g.mode {
	case buffering:
		g.buf.Write(b)
		if g.buf.Len() >= minGzipSize {
			if err := g.startZip(); err != nil {
				return 0, err
			}
		}
		return len(b), nil
	case zipping:
		if g.head {
			return len(b), nil
		}
		return g.gz.Write(b)
	}
	return g.ResponseWriter.Write(b)
}

// startZip sends the header of a compressed answer and what was held.
func (g *gzipWriter) startZip() error {
	h := g.Header()
	h.Set("Content-Encoding", "gzip")
	h.Del("Content-Length")
	if tag := h.Get("ETag"); tag != "" && strings.HasSuffix(tag, `"`) {
		h.Set("ETag", strings.TrimSuffix(tag, `"`)+`-gz"`)
	}
	g.mode = zipping
	g.ResponseWriter.WriteHeader(g.status)
	if g.head {
		g.buf.Reset()
		return nil
	}
	g.gz = gzipWriters.Get().(*gzip.Writer)
	g.gz.Reset(g.ResponseWriter)
	_, err := g.gz.Write(g.buf.Bytes())
	g.buf.Reset()
	return err
}

// sendHeld sends a held answer as it is: it stayed short.
func (g *gzipWriter) sendHeld() {
	g.mode = passing
	if g.buf.Len() > 0 && g.Header().Get("Content-Length") == "" {
		g.Header().Set("Content-Length", strconv.Itoa(g.buf.Len()))
	}
	g.ResponseWriter.WriteHeader(g.status)
	if g.buf.Len() > 0 {
		_, _ = g.ResponseWriter.Write(g.buf.Bytes())
		g.buf.Reset()
	}
}

// FlushError sends what is held (compressed when it is long enough to be)
// and flushes it to the client.
func (g *gzipWriter) FlushError() error {
	if g.mode == undecided {
		g.WriteHeader(http.StatusOK) // as net/http does: a flush sends the header
	}
	if g.mode == buffering {
		if g.buf.Len() == 0 {
			g.sendHeld()
		} else if err := g.startZip(); err != nil {
			return err
		}
	}
	if g.mode == zipping && g.gz != nil {
		if err := g.gz.Flush(); err != nil {
			return err
		}
	}
	return http.NewResponseController(g.ResponseWriter).Flush()
}

func (g *gzipWriter) Flush() { _ = g.FlushError() }

// Unwrap lets http.ResponseController reach the connection (deadlines,
// hijacking).
func (g *gzipWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// finish ends the answer once the handler has returned.
func (g *gzipWriter) finish() {
	switch g.mode {
	case buffering:
		g.sendHeld()
	case zipping:
		if g.gz != nil {
			_ = g.gz.Close()
			g.gz.Reset(nil)
			gzipWriters.Put(g.gz)
			g.gz = nil
		}
	}
}

// abandon drops what is held (a handler panicked).
func (g *gzipWriter) abandon() {
	if g.mode == buffering {
		g.mode = undecided
		g.buf.Reset()
	}
	if g.gz != nil {
		g.gz.Reset(nil)
		gzipWriters.Put(g.gz)
		g.gz = nil
	}
}

func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

func addVary(h http.Header) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, "Accept-Encoding") {
				return
			}
		}
	}
	h.Add("Vary", "Accept-Encoding")
}

// acceptsGzip reports whether an Accept-Encoding header takes gzip: named
// (or x-gzip), else through *, with a q-value above 0.
func acceptsGzip(header string) bool {
	named, star := -1.0, -1.0
	for _, item := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(item, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil || f < 0 || f > 1 {
					f = 0
				}
				q = f
			}
		}
		switch name {
		case "gzip", "x-gzip":
			named = max(named, q)
		case "*":
			star = max(star, q)
		}
	}
	if named >= 0 {
		return named > 0
	}
	return star > 0
}
