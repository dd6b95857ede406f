// Package wire is the HTTP plumbing the model providers share: the client
// their requests go through and the reading of Retry-After hints.
package wire

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultMaxIdleConnsPerHost is how many idle connections to one model
// server a transport keeps by default: a model call holds its connection
// for the whole stream (HTTP/1.1, as local and compatible servers speak),
// so about 1,000 sessions calling the same server at once need as many,
// and each one closed after its call (Go's default keeps 2) is a new dial
// and a socket in TIME_WAIT for the next. Idle ones close after
// DefaultIdleConnTimeout.
const DefaultMaxIdleConnsPerHost = 1024

// DefaultIdleConnTimeout is how long an idle connection is kept.
const DefaultIdleConnTimeout = 90 * time.Second

// TransportOptions size a transport's pool of connections.
type TransportOptions struct {
	// MaxIdleConnsPerHost: 0 means DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// IdleConnTimeout: 0 means DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
}

// NewTransport returns a transport for model APIs: Go's default settings
// (proxy from the environment, dial and TLS timeouts, HTTP/2), enough idle
// connections per host for the concurrency an agent server has (it talks
// to few hosts, often), no bound on idle connections across hosts beyond
// that, and a response-header timeout long enough for any model's first
// byte; the callers' first-byte and idle timeouts (provider.Wrap) are the
// real bounds. There is no overall timeout: streams are long.
func NewTransport(o TransportOptions) http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = o.MaxIdleConnsPerHost
	if t.MaxIdleConnsPerHost <= 0 {
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	t.MaxIdleConns = 0 // the per-host bound is the one that matters
	t.IdleConnTimeout = o.IdleConnTimeout
	if t.IdleConnTimeout <= 0 {
		t.IdleConnTimeout = DefaultIdleConnTimeout
	}
	t.ResponseHeaderTimeout = 10 * time.Minute
	return t
}

// DefaultTransport is one NewTransport with the default options, shared by
// every provider built without a transport of its own, so they share its
// connection pool.
var DefaultTransport = sync.OnceValue(func() http.RoundTripper { return NewTransport(TransportOptions{}) })

// DefaultClient is an http.Client on DefaultTransport.
var DefaultClient = sync.OnceValue(func() *http.Client {
	return &http.Client{Transport: DefaultTransport()}
})

// RetryAfter reads how long a server asks to wait before a retry:
// retry-after-ms (OpenAI and Anthropic, milliseconds), else Retry-After in
// seconds or as an HTTP date (relative to now). It is 0 when absent,
// unreadable, not positive, or absurd (a million seconds and more).
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 && s < 1e6 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// StreamCut is the message of a stream that ended before the response was
// complete: which server (base URL) and model, what the stream lacked (the
// protocol's end markers), and the read error, if any. It tells the
// operator which of several servers is at fault.
func StreamCut(baseURL, model string, err error, missing []string) string {
	msg := fmt.Sprintf("the stream from %s (model %q) ended before the response was complete", baseURL, model)
	if len(missing) > 0 {
		msg += ": no " + joinOr(missing)
	}
	if err != nil {
		return msg + "; the connection was interrupted: " + err.Error()
	}
	return msg + "; the server closed it"
}

// joinOr joins words as "a, b or c".
func joinOr(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// DisplayURL is u without the password it may carry.
func DisplayURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		return u
	}
	return pu.Redacted()
}

// WaitingBody is a streamed response body that calls wait (the function
// forge.ReportWaits returned) before each read. The SSE decoders read
// only when the bytes they hold end before the next event does, so each
// read is a point where the stream may wait for the network; the events
// decoded before it were in memory.
type WaitingBody struct {
	io.ReadCloser
	wait func()
}

// NewWaitingBody wraps body.
func NewWaitingBody(body io.ReadCloser, wait func()) *WaitingBody {
	return &WaitingBody{ReadCloser: body, wait: wait}
}

func (b *WaitingBody) Read(p []byte) (int, error) {
	if b.wait != nil {
		b.wait()
	}
	return b.ReadCloser.Read(p)
}

// Stop ends the calls of wait: the reply is complete, and what is read
// after it (to reuse the connection) is no wait for the model.
func (b *WaitingBody) Stop() { b.wait = nil }
