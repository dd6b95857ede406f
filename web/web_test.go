package web

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, header ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPagesAndAssets(t *testing.T) {
	t.Parallel()
	h := New()
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/ui/", "text/html", `src="/ui/assets/index.js"`},
		{"/ui/sessions/ses_01ABC", "text/html", `src="/ui/assets/session.js"`},
		{"/ui/forums/ses_01ABC", "text/html", `src="/ui/assets/forum.js"`},
		{"/ui/webhooks", "text/html", `src="/ui/assets/webhooks.js"`},
		{"/ui/webhooks/wh_01ABC", "text/html", `src="/ui/assets/webhooks.js"`},
		{"/ui/schedules", "text/html", `src="/ui/assets/schedules.js"`},
		{"/ui/schedules/sch_01ABC", "text/html", `src="/ui/assets/schedules.js"`},
		{"/ui/assets/forge.js", "text/javascript", "export class EventStream"},
		{"/ui/assets/session.js", "text/javascript", "import"},
		{"/ui/assets/history.js", "text/javascript", "export class History"},
		{"/ui/assets/style.css", "text/css", ":root"},
	} {
		resp := get(t, h, "GET", tc.path)
		b := body(t, resp)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(b, tc.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.contains, strings.Contains(b, tc.contains))
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("GET %s: CSP %q", tc.path, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", tc.path, resp.Header)
		}
	}
}

func TestUnknownPathsAndMethods(t *testing.T) {
	t.Parallel()
	h := New()
	for _, p := range []string{
		"/ui/nope", "/ui/sessions/", "/ui/sessions", "/ui/sessions/a/b", "/ui/forums/", "/ui/assets/",
		"/ui/webhooks/", "/ui/webhooks/a/b", "/ui/schedules/", "/ui/schedules/a/deliveries",
		"/ui/assets/missing.js", "/ui/assets/index.html", "/ui/assets/../web.go", "/ui/index.html", "/other",
	} {
		resp := get(t, h, "GET", p)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
		if resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: a 404 without the policy", p)
		}
		if !jsonError(t, resp, "not_found") {
			t.Errorf("GET %s: the 404 is not the API's JSON error", p)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		resp := get(t, h, m, "/ui/")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !jsonError(t, resp, "method_not_allowed") {
			t.Errorf("%s /ui/: %d allow %q", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	resp := get(t, h, "HEAD", "/ui/assets/forge.js")
	if resp.StatusCode != 200 || body(t, resp) != "" || resp.Header.Get("Content-Length") == "" {
		t.Errorf("HEAD: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestGzipAndRevalidation(t *testing.T) {
	t.Parallel()
	h := New()
	plain := get(t, h, "GET", "/ui/assets/session.js")
	raw := body(t, plain)
	if plain.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip without Accept-Encoding")
	}
	zipped := get(t, h, "GET", "/ui/assets/session.js", "Accept-Encoding", "br, gzip")
	if zipped.Header.Get("Content-Encoding") != "gzip" || zipped.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("gzip answer headers %v", zipped.Header)
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unz, err := io.ReadAll(zr)
	if err != nil || string(unz) != raw {
		t.Fatalf("gzip body does not decompress to the asset (%v)", err)
	}
	if refused := get(t, h, "GET", "/ui/assets/session.js", "Accept-Encoding", "gzip;q=0"); refused.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 got gzip")
	}
	etag := plain.Header.Get("ETag")
	if etag == "" || plain.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("caching headers %v", plain.Header)
	}
	if again := get(t, h, "GET", "/ui/assets/session.js", "If-None-Match", etag); again.StatusCode != http.StatusNotModified || body(t, again) != "" {
		t.Errorf("If-None-Match: %d", again.StatusCode)
	}
	if other := get(t, h, "GET", "/ui/assets/forge.js", "If-None-Match", etag); other.StatusCode != 200 {
		t.Errorf("another asset's etag matched: %d", other.StatusCode)
	}
	gzTag := zipped.Header.Get("ETag")
	if gzTag == etag || gzTag == "" {
		t.Fatalf("the gzip representation has the tag %q of the plain one", gzTag)
	}
	if again := get(t, h, "GET", "/ui/assets/session.js", "If-None-Match", gzTag, "Accept-Encoding", "gzip"); again.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match with the gzip tag: %d", again.StatusCode)
	}
	if plainAgain := get(t, h, "GET", "/ui/assets/session.js", "If-None-Match", gzTag); plainAgain.StatusCode != 200 {
		t.Errorf("the gzip tag matched the plain representation: %d", plainAgain.StatusCode)
	}
}

// TestAssetsBuildNoMarkupFromStrings keeps the rule the pages rely on to
// render untrusted text safely: no API that parses a string as HTML or
// runs it as code, no inline script or style, nothing from another origin.
// (The browser tests check the behaviour; this catches the pattern before
// a payload that happens to slip through is ever written.)
func TestAssetsBuildNoMarkupFromStrings(t *testing.T) {
	t.Parallel()
	banned := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|createContextualFragment|DOMParser|srcdoc|\.html\(`)
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := assets.ReadFile(p)
		if strings.HasSuffix(p, ".js") {
			for i, line := range bytes.Split(b, []byte("\n")) {
				if m := banned.Find(line); m != nil {
					t.Errorf("%s:%d uses %s", p, i+1, m)
				}
			}
		}
		if strings.HasSuffix(p, ".html") {
			s := string(b)
			if regexp.MustCompile(`<script[^>]*>\s*[^<\s]`).MatchString(s) || strings.Contains(s, " style=") || regexp.MustCompile(`\son[a-z]+=`).MatchString(s) {
				t.Errorf("%s has inline script, style or handler", p)
			}
			if strings.Contains(s, "http://") || strings.Contains(s, "https://") {
				t.Errorf("%s loads something from another origin", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// jsonError reports whether resp is the API's JSON error with code.
func jsonError(t *testing.T, resp *http.Response, code string) bool {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") &&
		json.Unmarshal([]byte(body(t, resp)), &e) == nil && e.Error.Code == code && e.Error.Message != ""
}
