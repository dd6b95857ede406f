package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// MaxHeaderBytes is the documented limit of a request's header section
// (its request line and header fields): above it the answer is 431
// header_too_large.
const MaxHeaderBytes = 64 << 10

// ServerMaxHeaderBytes is the http.Server.MaxHeaderBytes Serve sets: well
// above MaxHeaderBytes, so that net/http passes such requests to the
// handler, which refuses them in JSON. What exceeds even this, net/http
// refuses itself; Serve's listener turns that answer into JSON too.
const ServerMaxHeaderBytes = 1 << 20

// Connection time limits Serve applies (slow and idle peers must not pin
// connections, and with them file descriptors, forever):
const (
	// ServerIdleTimeout closes a keep-alive connection that has sent no
	// new request for this long (when srv.IdleTimeout is unset).
	ServerIdleTimeout = 2 * time.Minute
	// RequestBodyTimeout bounds how long a request body may take to
	// arrive, from the end of its headers; past it the answer is 408
	// request_timeout. The deadline is lifted once the body is read, so a
	// streamed answer (SSE) runs as long as it needs.
	RequestBodyTimeout = 30 * time.Second
)

// guard enforces, before routing, what every request must satisfy
// (API.md, Conventions): the header size limit; without API keys, a
// loopback Host and no cross-origin browser request; no CORS preflight;
// a JSON body on writes.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.admit(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		if r.Method == http.MethodHead {
			// A HEAD of an event stream gets the stream's headers, then
			// its handler ends: it would otherwise stream, unread, for
			// ever, and the client, whose answer is complete, would wait
			// on the connection behind it.
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			w, r = &headWriter{ResponseWriter: w, cancel: cancel}, r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// headWriter is the writer of a HEAD request: once its answer starts as
// an event stream, it cancels the request's context, ending the stream.
type headWriter struct {
	http.ResponseWriter
	cancel context.CancelFunc
}

func (h *headWriter) WriteHeader(code int) {
	h.ResponseWriter.WriteHeader(code)
	if strings.HasPrefix(h.Header().Get("Content-Type"), "text/event-stream") {
		h.cancel()
	}
}

func (h *headWriter) Write(b []byte) (int, error) { return h.ResponseWriter.Write(b) }

func (h *headWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (s *Server) admit(r *http.Request) error {
	// What http.ServeMux answers by itself, in plain text or with no body
	// (the asterisk form of a request target, CONNECT), is refused here.
	if r.RequestURI == "*" {
		return invalid("the request target * is for OPTIONS only (net/http answers OPTIONS * itself)")
	}
	if r.Method == http.MethodConnect {
		return forge.Errorf(errMethodNotAllowed, "CONNECT is not supported: this server is no proxy")
	}
	if n := headerSize(r); n > MaxHeaderBytes {
		return forge.Errorf(errHeaderTooLarge, "the request line and header fields take %d bytes; at most %d (64 KiB) are accepted", n, MaxHeaderBytes)
	}
	keyed, err := s.keysConfigured(r.Context())
	if err != nil {
		return err
	}
	if !keyed {
		// Without keys, whoever reaches the port may act: only programs on
		// this machine can, unless a browser is made to relay (DNS
		// rebinding sends a foreign Host; a page of another origin sends
		// its Origin).
		if !loopbackHost(r.Host) {
			return forge.Errorf(forge.ErrForbidden, "Host %q is not a loopback name: without API keys the server answers only requests addressed to localhost, 127.0.0.0/8 or [::1]", r.Host)
		}
		if err := sameOrigin(r, s.origins); err != nil {
			return err
		}
	}
	if r.Method == http.MethodOptions && (r.Header.Get("Origin") != "" || r.Header.Get("Access-Control-Request-Method") != "") {
		// A CORS preflight: Forge grants no cross-origin access, with or
		// without keys, so it answers no Access-Control-Allow-* header.
		return forge.Errorf(forge.ErrForbidden, "cross-origin requests are not allowed")
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		if isUpload(r) {
			return nil // the body is the file (internal/files checks it)
		}
		return jsonContent(r)
	}
	return nil
}

// headerSize is the size of r's request line and header fields as sent
// (give or take the whitespace net/http trims).
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	n += len("Host: ") + len(r.Host) + 2
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + len(v) + 4
		}
	}
	return n
}

// loopbackHost reports whether a Host header names this machine's
// loopback interface: localhost, an address of 127.0.0.0/8 or ::1, with or
// without a port. Nothing else: not a name that resolves there (which is
// what DNS rebinding uses), nor localhost. with its trailing dot.
func loopbackHost(host string) bool {
	h := host
	if name, _, err := net.SplitHostPort(host); err == nil {
		h = name
	} else if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		h = host[1 : len(host)-1]
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin refuses a request a browser sent on behalf of another origin:
// an Origin header other than the server's own (scheme and Host, as the
// web inspector served from it sends) or one of allowed, or Sec-Fetch-Site
// saying the initiator is another site (unless its Origin is allowed).
func sameOrigin(r *http.Request, allowed map[string]bool) error {
	origins := r.Header.Values("Origin")
	if len(origins) == 1 && allowed[strings.ToLower(origins[0])] {
		return nil
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return forge.Errorf(forge.ErrForbidden, "cross-origin requests are not allowed (a proxy that forwards the page's Origin: start the server with --allowed-origins ORIGIN)")
	}
	if len(origins) == 0 {
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if len(origins) > 1 || !strings.EqualFold(origins[0], scheme+"://"+r.Host) {
		return forge.Errorf(forge.ErrForbidden, "cross-origin requests are not allowed (Origin %q is not this server's; a proxy that forwards the page's Origin: start the server with --allowed-origins ORIGIN)", strings.Join(origins, ", "))
	}
	return nil
}

// jsonContent refuses a write whose body is not declared JSON. A request
// without a body needs no Content-Type.
func jsonContent(r *http.Request) error {
	types := r.Header.Values("Content-Type")
	if len(types) == 0 && r.ContentLength == 0 {
		return nil
	}
	if len(types) != 1 {
		return forge.Errorf(forge.ErrUnsupportedMediaType, "send the request body with Content-Type: application/json")
	}
	mt, params, err := mime.ParseMediaType(types[0])
	if err != nil || mt != "application/json" {
		return forge.Errorf(forge.ErrUnsupportedMediaType, "Content-Type %q is not accepted: send the request body as application/json", types[0])
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return forge.Errorf(forge.ErrUnsupportedMediaType, "charset %q is not accepted: JSON bodies are UTF-8", cs)
	}
	return nil
}

// Serve serves srv on ln as Forge expects: it sets srv.MaxHeaderBytes to
// ServerMaxHeaderBytes when unset, and answers in JSON the errors net/http
// writes by itself before any handler runs (a header section above
// srv.MaxHeaderBytes: 431; a malformed request: 400; an unknown transfer
// coding: 501), which it would otherwise write as plain text.
//
// It also bounds slow and idle peers: srv.IdleTimeout defaults to
// ServerIdleTimeout, and a request body must arrive within
// RequestBodyTimeout.
func Serve(srv *http.Server, ln net.Listener) error {
	if srv.MaxHeaderBytes == 0 {
		srv.MaxHeaderBytes = ServerMaxHeaderBytes
	}
	if srv.IdleTimeout == 0 {
		srv.IdleTimeout = ServerIdleTimeout
	}
	srv.Handler = bodyDeadline(srv.Handler, RequestBodyTimeout)
	return srv.Serve(jsonErrorListener{ln})
}

// bodyDeadline gives a request with a body d to deliver it: a read
// deadline on the connection from the start of the handler. net/http
// lifts it when the body has been read to its end (it clears the deadline
// before its background read that watches for the client going away), so
// a streamed answer (SSE) runs as long as it needs
// (TestBodyDeadlineLiftedAfterBody). It wraps the handler net/http calls,
// whose ResponseWriter reaches the connection.
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	if next == nil {
		next = http.DefaultServeMux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		next.ServeHTTP(w, r)
	})
}

type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return jsonErrorConn{c}, nil
}

// jsonErrorConn rewrites net/http's plain-text error answers. net/http
// writes each one to the connection in a single Write, as
// "HTTP/1.1 <status>" + plainErrorHeaders + <text>, then closes the
// connection; a handler's answer never looks like that (net/http writes its
// header fields sorted, with a Date).
type jsonErrorConn struct{ net.Conn }

const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c jsonErrorConn) Write(b []byte) (int, error) {
	answer, ok := jsonError(b)
	if !ok {
		answer, ok = expectationJSON(b)
	}
	if ok {
		if _, err := c.Conn.Write(answer); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// CloseWrite lets net/http half-close the connection after an error, as
// it does on a bare TCP connection.
func (c jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// jsonError returns the JSON answer replacing b when b is one of
// net/http's own plain-text error answers.
func jsonError(b []byte) ([]byte, bool) {
	const prefix = "HTTP/1.1 "
	if !bytes.HasPrefix(b, []byte(prefix)) {
		return nil, false
	}
	end := bytes.Index(b, []byte(plainErrorHeaders))
	if end < 0 || bytes.IndexByte(b[:end], '\n') >= 0 || bytes.IndexByte(b[end+len(plainErrorHeaders):], '\n') >= 0 {
		return nil, false
	}
	statusLine := string(b[len(prefix):end]) // "431 Request Header Fields Too Large", "400 Bad Request: missing required Host header"
	status, err := strconv.Atoi(statusLine[:min(3, len(statusLine))])
	if err != nil || status < 400 || status > 599 {
		return nil, false
	}
	_, detail, _ := strings.Cut(statusLine, ": ")
	var code, msg string
	switch {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		code, msg = "header_too_large", "the request's header fields exceed the server's limit"
	case status == http.StatusNotImplemented:
		code, msg = "not_implemented", "unsupported transfer encoding"
	case status == http.StatusHTTPVersionNotSupported:
		// A request in another protocol than HTTP/1.x is malformed for
		// this server: no request yields a 5xx.
		status, code, msg = http.StatusBadRequest, "invalid_request", "malformed HTTP request: only HTTP/1.0 and HTTP/1.1 are served"
		detail = ""
	case status < 500:
		code, msg = "invalid_request", "malformed HTTP request"
	default:
		code, msg = "internal", "the server could not read the request"
	}
	if detail != "" {
		msg += ": " + detail
	}
	return jsonAnswer(status, code, msg), true
}

// expectationFailed is how net/http answers, before any handler runs, a
// request whose Expect header is not 100-continue: a 417 with no body,
// written at once with its Date and Connection: close. No handler of the
// API answers 417.
var expectationFailed = regexp.MustCompile("^HTTP/1\\.1 417 Expectation Failed\r\nConnection: close\r\nDate: [^\r\n]+\r\nContent-Length: 0\r\n\r\n$")

// expectationJSON returns the JSON answer replacing b when b is net/http's
// own 417.
func expectationJSON(b []byte) ([]byte, bool) {
	if !expectationFailed.Match(b) {
		return nil, false
	}
	return jsonAnswer(http.StatusExpectationFailed, "invalid_request",
		"unsupported Expect header: only Expect: 100-continue is understood"), true
}

// jsonAnswer is a whole HTTP/1.1 answer carrying the API's JSON error,
// closing the connection.
func jsonAnswer(status int, code, msg string) []byte {
	body, _ := json.Marshal(errorBody{apiError{Code: code, Message: msg}})
	body = append(body, '\n')
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	out.WriteString("Content-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n")
	out.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	out.Write(body)
	return out.Bytes()
}

// allowedOrigins is the set of Config.AllowedOrigins, lower-cased and
// without a trailing slash.
func allowedOrigins(list []string) map[string]bool {
	set := map[string]bool{}
	for _, o := range list {
		set[strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))] = true
	}
	return set
}

// CheckOrigin refuses an --allowed-origins entry that is not an origin
// (scheme://host[:port], http or https, nothing after it).
func CheckOrigin(o string) error {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("%q is not an origin: want scheme://host[:port], e.g. http://localhost:5173", o)
	}
	return nil
}
