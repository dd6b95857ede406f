// Package client is the Go client SDK of the Forge HTTP API (API.md).
//
// A Client is safe for concurrent use. Every method takes a context first;
// cancelling it aborts the request (a streamed turn keeps running on the
// server: a client disconnect never cancels a turn, use Cancel for that).
//
// Streams (StreamTurn, TurnEvents, SessionEvents) are iter.Seq2 sequences of
// events. They reconnect by themselves when the connection drops, resuming
// with Last-Event-ID set to the last seq received, and never yield an event
// twice.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// Client talks to one Forge server.
type Client struct {
	base   *url.URL
	apiKey string
	hc     *http.Client

	maxRetries  int
	backoff     time.Duration
	maxBackoff  time.Duration
	idleTimeout time.Duration
	userAgent   string
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends key as "Authorization: Bearer KEY" on every request.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithHTTPClient sets the HTTP client. Its Timeout, if any, bounds every
// request including streams: leave it zero and use contexts instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithReconnect sets how a stream reconnects after its connection drops: at
// most attempts consecutive failed attempts (a reconnection that delivers an
// event resets the count), waiting backoff before the first and doubling up
// to maxBackoff. attempts 0 disables reconnection. The default is 8
// attempts, 100 ms, 5 s.
func WithReconnect(attempts int, backoff, maxBackoff time.Duration) Option {
	return func(c *Client) {
		c.maxRetries = attempts
		if backoff > 0 {
			c.backoff = backoff
		}
		if maxBackoff > 0 {
			c.maxBackoff = maxBackoff
		}
	}
}

// WithStreamIdleTimeout sets how long a stream may stay silent (no event and
// no keep-alive comment) before the connection is deemed dead and resumed
// on a new one. 0 disables the check. The default is 75 s.
func WithStreamIdleTimeout(d time.Duration) Option {
	return func(c *Client) { c.idleTimeout = d }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client of the server at baseURL ("http://127.0.0.1:8080";
// a trailing "/v1" is accepted and ignored).
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		return nil, errors.New("forge client: empty base URL")
	}
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("forge client: bad base URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("forge client: base URL %q must be http or https", baseURL)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{
		base:        u,
		hc:          &http.Client{},
		maxRetries:  8,
		backoff:     100 * time.Millisecond,
		maxBackoff:  5 * time.Second,
		idleTimeout: 75 * time.Second,
		userAgent:   "forge-go-client",
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL returns the server's base URL, without /v1.
func (c *Client) BaseURL() string { return c.base.String() }

// APIError is an error answer of the server: its HTTP status and the
// {"error": {"code", "message"}} body. It unwraps to the matching sentinel
// of package forge, so errors.Is(err, forge.ErrNotFound) works.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// Unwrap returns the forge sentinel error of the code (forge.ErrNotFound for
// "not_found", forge.ErrIdempotencyMismatch for "idempotency_mismatch", ...),
// or nil for codes without one.
func (e *APIError) Unwrap() error { return forge.ErrorForCode(e.Code) }

// ErrorCode returns the API error code of err ("not_found", ...) when err is
// or wraps an *APIError, and "" otherwise.
func ErrorCode(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// IsNotFound reports whether err is a not_found answer.
func IsNotFound(err error) bool { return ErrorCode(err) == "not_found" }

// IsConflict reports whether err is a 409 answer (turn_in_progress,
// pending_actions or conflict).
func IsConflict(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}

// ListOptions page through a list.
type ListOptions struct {
	Limit  int    // 0: the server's default
	Cursor string // the NextCursor of the previous page
}

func (o ListOptions) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// Page is one page of a list. NextCursor is "" on the last page.
type Page[T any] struct {
	Data       []T
	NextCursor string
}

type pageJSON[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

func (c *Client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("forge client: encoding request: %w", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, q), r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	return req, nil
}

// do sends a JSON request and decodes a JSON answer into out (nil: discard).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body any, hdr http.Header, out any) (int, error) {
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp.StatusCode, readAPIError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("forge client: decoding %s %s answer: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// readAPIError turns an error answer into an *APIError. Bodies that are not
// the API's error shape (a proxy's page) keep their first line as message.
func readAPIError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &APIError{Status: resp.StatusCode}
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	e.Code = codeForStatus(resp.StatusCode)
	msg := strings.TrimSpace(string(b))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

func codeForStatus(status int) string {
	switch status {
	case 400:
		return "invalid_request"
	case 401, 403:
		return "unauthorized"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 413:
		return "payload_too_large"
	}
	if status >= 500 {
		return "server_error"
	}
	return "http_" + strconv.Itoa(status)
}

func seg(s string) string { return url.PathEscape(s) }

// Health calls GET /healthz and returns nil when the server can serve.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, nil)
	return err
}
