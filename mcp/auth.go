package mcp

import (
	"net/http"
	"net/url"
	"strings"
	"sync"

	forge "github.com/forge-runtime/forge"
)

// httpRoundTripper adds the declared headers and the session's bearer token
// to every request to the server's own origin (not to another one a
// redirect leads to: they are meant for the declared server), and
// remembers the last 401 answer.
type httpRoundTripper struct {
	base    http.RoundTripper
	guard   *addrGuard
	origin  *url.URL // the declared URL
	headers map[string]string
	token   func() string

	mu      sync.Mutex
	authURL string
	got401  bool
}

func (h *httpRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if h.origin != nil && sameServer(h.origin, req.URL) {
		for k, v := range h.headers {
			req.Header.Set(k, v)
		}
		if tok := h.token(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := h.base.RoundTrip(req)
	if err != nil {
		if req.Response != nil && h.guard != nil { // a redirect led here
			err = h.guard.redirected(err, req.URL)
		}
		return nil, err
	}
	h.mu.Lock()
	if resp.StatusCode == http.StatusUnauthorized {
		h.got401 = true
		h.authURL = authURL(resp.Header.Values("WWW-Authenticate"))
	} else if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		h.got401 = false
	}
	h.mu.Unlock()
	return resp, nil
}

// authError is the error of the last answer, if it was a 401.
func (h *httpRoundTripper) authError(server string) *forge.AuthRequiredError {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.got401 {
		return nil
	}
	return &forge.AuthRequiredError{Server: server, AuthURL: h.authURL}
}

// authURL picks the URL to authorize at from WWW-Authenticate challenges:
// resource_metadata (RFC 9728) first, then an authorization URL.
func authURL(challenges []string) string {
	params := map[string]string{}
	for _, c := range challenges {
		for k, v := range authParams(c) {
			if _, ok := params[k]; !ok {
				params[k] = v
			}
		}
	}
	for _, k := range []string{"resource_metadata", "authorization_uri", "authorization_url", "as_uri"} {
		if v := params[k]; strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "http://") {
			return v
		}
	}
	return ""
}

// authParams parses the auth-params of a challenge such as
// `Bearer realm="x", resource_metadata="https://..."` (keys lowercased).
func authParams(s string) map[string]string {
	out := map[string]string{}
	s = strings.TrimSpace(s)
	// Skip the scheme.
	if i := strings.IndexAny(s, " \t"); i >= 0 && !strings.Contains(s[:i], "=") {
		s = s[i+1:]
	}
	for {
		s = strings.TrimLeft(s, " \t,")
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return out
		}
		key := strings.ToLower(strings.TrimSpace(s[:eq]))
		if i := strings.LastIndexAny(key, " \t"); i >= 0 { // a new scheme started
			key = key[i+1:]
		}
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(s); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					b.WriteByte(s[i])
					continue
				}
				if s[i] == '"' {
					break
				}
				b.WriteByte(s[i])
			}
			val = b.String()
			if i < len(s) {
				i++
			}
			s = s[i:]
		} else {
			end := strings.IndexAny(s, ", \t")
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		out[key] = val
	}
}
