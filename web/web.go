// Package web is the Forge inspector: a few static pages and scripts,
// embedded in the binary, that read the HTTP API from the browser. Nothing
// here touches the store or the engine: every byte of data the pages show
// comes from /v1 requests made by the page itself (same origin, with the
// API key the user typed, kept in the tab's sessionStorage).
//
// Pages (Prefix is /ui/):
//
//	/ui/                  sessions and forums, newest first
//	/ui/sessions/{sid}    one session's turn timeline, live
//	/ui/forums/{fid}      one forum room, live
//	/ui/webhooks[/{id}]   webhooks; one webhook's recent deliveries
//	/ui/schedules[/{id}]  schedules (pause, resume); one schedule's runs
//	/ui/assets/{file}     the scripts and the style sheet
//
// The scripts are plain ES modules: there is no build step. Every answer
// carries a strict Content-Security-Policy (no inline script or style, no
// third-party origin, no framing).
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Prefix is the path the handler serves under.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is sent with every answer of the handler. The
// pages load only their own scripts and styles and talk only to their own
// origin; model output is inserted as text, never as markup, and this
// policy is the second line of defence if that ever fails. Attachments
// are fetched with the API key and shown from blob: URLs (an <img> cannot
// send the key), hence img-src blob:.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one embedded asset, ready to serve.
type file struct {
	body, gz    []byte
	contentType string
	etag        string
}

// Handler serves the inspector. Build it with New.
type Handler struct {
	files map[string]*file // by name under assets/
}

// New returns the inspector's handler, to be mounted at Prefix. It reads
// and compresses the embedded assets once.
func New() *Handler {
	h := &Handler{files: map[string]*file{}}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &file{
			body:        body,
			contentType: mime.TypeByExtension(path.Ext(p)),
			etag:        `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`,
		}
		if f.contentType == "" {
			f.contentType = "application/octet-stream"
		}
		if path.Ext(p) == ".js" {
			// mime's table varies by system; modules need a JavaScript type.
			f.contentType = "text/javascript; charset=utf-8"
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		if buf.Len() < len(body) {
			f.gz = buf.Bytes()
		}
		h.files[strings.TrimPrefix(p, "assets/")] = f
		return nil
	})
	if err != nil {
		// The assets are compiled in: failing to read them is a build bug.
		panic("web: reading embedded assets: " + err.Error())
	}
	return h
}

// page returns the asset that answers the path below Prefix, or "".
func page(rest string) string {
	switch {
	case rest == "":
		return "index.html"
	case rest == "webhooks":
		return "webhooks.html"
	case rest == "schedules":
		return "schedules.html"
	case strings.HasPrefix(rest, "assets/"):
		name := strings.TrimPrefix(rest, "assets/")
		if name == "" || strings.Contains(name, "/") || strings.HasSuffix(name, ".html") {
			return ""
		}
		return name
	}
	kind, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return ""
	}
	switch kind {
	case "sessions":
		return "session.html"
	case "forums":
		return "forum.html"
	case "webhooks":
		return "webhooks.html"
	case "schedules":
		return "schedules.html"
	}
	return ""
}

// writeError answers an error in the API's shape ({"error": {"code",
// "message"}}), as every route of the server does.
func writeError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// ServeHTTP answers GET and HEAD for the pages and assets.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method "+r.Method+" is not allowed on "+r.URL.Path+" (allowed: GET, HEAD)")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	var f *file
	if ok {
		f = h.files[page(rest)]
	}
	if f == nil {
		writeError(w, http.StatusNotFound, "not_found", "no such page of the inspector: "+r.URL.Path)
		return
	}
	hd.Set("Content-Type", f.contentType)
	// Revalidate every time: a new binary serves new assets at the same
	// paths, and a 304 costs one round trip on loopback or a LAN.
	hd.Set("Cache-Control", "no-cache")
	hd.Add("Vary", "Accept-Encoding")
	body, etag := f.body, f.etag
	gz := f.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding"))
	if gz {
		// Each representation has its own tag.
		body, etag = f.gz, strings.TrimSuffix(f.etag, `"`)+`-gz"`
	}
	hd.Set("ETag", etag)
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if gz {
		hd.Set("Content-Encoding", "gzip")
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == etag || t == "W/"+etag || t == "*" {
			return true
		}
	}
	return false
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip (a
// q=0 refuses it).
func acceptsGzip(header string) bool {
	for _, item := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		params = strings.ReplaceAll(params, " ", "")
		return params != "q=0" && params != "q=0.0" && params != "q=0.00" && params != "q=0.000"
	}
	return false
}
