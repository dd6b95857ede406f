package httpapi_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/web"
)

// TestOpenAPIRoutesExist is the other half of TestOpenAPICoversEveryRoute
// (every registered route is documented): every operation the served
// /v1/openapi.json documents reaches a handler of the running server. Each
// is requested with placeholder path parameters; the answer may be any
// error of the handler (not_found for an id that does not exist, a 400 for
// an empty body), but never the mux's "no such endpoint", never a 405 and
// never a 5xx.
func TestOpenAPIRoutesExist(t *testing.T) {
	s := newStack(t)
	a := s.do(req{method: "GET", path: "/v1/openapi.json"})
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &doc) != nil {
		t.Fatalf("openapi.json: %s", a)
	}
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true}
	param := regexp.MustCompile(`\{[^}]+\}`)
	var ops []string
	for path, item := range doc.Paths {
		for m := range item {
			if !methods[m] {
				continue // "parameters" and other path-item fields
			}
			method := strings.ToUpper(m)
			ops = append(ops, method+" "+path)
			r := req{method: method, path: param.ReplaceAllString(path, "x_route_probe")}
			if method == "POST" || method == "PUT" {
				r.body = "{}"
			}
			got := s.do(r)
			switch {
			case got.status == http.StatusNotFound && strings.Contains(string(got.body), "no such endpoint"):
				t.Errorf("%s %s is documented but the server has no such route", method, path)
			case got.status == http.StatusMethodNotAllowed:
				t.Errorf("%s %s is documented but the server does not allow %s there: %s", method, path, method, got)
			case got.status >= 500:
				t.Errorf("%s %s: %s", method, path, got)
			}
		}
	}
	sort.Strings(ops)
	if len(ops) < 20 {
		t.Fatalf("only %d documented operations: %v", len(ops), ops)
	}
}

// TestInspectorIsMounted: the web inspector is served at /ui/ without a
// key (it asks the user for one), with its security policy; /ui and / send
// a browser there; the API keeps its JSON errors around it.
func TestInspectorIsMounted(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"k": "acme"} })
	s.key = "" // a browser opening the page has no key yet
	for _, p := range []string{"/ui/", "/ui/sessions/ses_x", "/ui/forums/ses_x", "/ui/assets/forge.js"} {
		a := s.do(req{method: "GET", path: p})
		if a.status != 200 || a.header.Get("Content-Security-Policy") != web.ContentSecurityPolicy {
			t.Errorf("GET %s: %d CSP %q", p, a.status, a.header.Get("Content-Security-Policy"))
		}
	}
	client := *s.srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, p := range []string{"/", "/ui"} {
		resp, err := client.Get(s.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != "/ui/" {
			t.Errorf("GET %s: %d Location %q", p, resp.StatusCode, loc)
		}
	}
	if a := s.do(req{method: "GET", path: "/ui/nope"}); a.status != 404 {
		t.Errorf("GET /ui/nope: %s", a)
	}
	if a := s.do(req{method: "POST", path: "/ui/", body: "{}"}); a.status != 405 {
		t.Errorf("POST /ui/: %s", a)
	}
	// The API behind the pages still wants the key.
	if a := s.do(req{method: "GET", path: "/v1/sessions"}); a.status != 401 || a.errCode() != "unauthorized" {
		t.Errorf("GET /v1/sessions without a key: %s", a)
	}
	if a := s.do(req{method: "GET", path: "/nothing"}); a.status != 404 || a.errCode() != "not_found" {
		t.Errorf("GET /nothing: %s", a)
	}
}
