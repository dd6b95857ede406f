package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
)

// stream is one logical event stream, made of as many connections as it
// takes.
type stream struct {
	c         *Client
	sessionID string
	turnID    string // "" until known for a POSTed turn; "" for session streams
	untilDone bool   // end after turn.done
	post      *TurnRequest
	path      string // the events path when it is no session's (a forum's)
	last      int64  // the last seq yielded (or the caller's after)
	retryHint time.Duration
}

// errSwitch asks the loop to reconnect at once, without counting a failure.
var errSwitch = errors.New("switch to the turn's event stream")

// retryable marks an error that a new connection may get past.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

func (s *stream) run(ctx context.Context) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		failures := 0
		for {
			if err := ctx.Err(); err != nil {
				yield(forge.Event{}, err)
				return
			}
			progressed, finished, err := s.connect(ctx, yield)
			if finished {
				return
			}
			if errors.Is(err, errSwitch) {
				continue
			}
			var rerr retryable
			if !errors.As(err, &rerr) {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(forge.Event{}, err)
				return
			}
			if progressed {
				failures = 0
			}
			failures++
			if failures > s.c.maxRetries {
				yield(forge.Event{}, fmt.Errorf("forge client: event stream lost (%d reconnection attempts failed): %w", s.c.maxRetries, rerr.err))
				return
			}
			if !sleep(ctx, s.delay(failures)) {
				yield(forge.Event{}, ctx.Err())
				return
			}
		}
	}
}

// delay is the wait before reconnection attempt n (1-based): exponential
// from the base (the server's retry hint when larger), capped, with jitter.
func (s *stream) delay(n int) time.Duration {
	d := s.c.backoff
	if s.retryHint > d {
		d = s.retryHint
	}
	for i := 1; i < n && d < s.c.maxBackoff; i++ {
		d *= 2
	}
	if d > s.c.maxBackoff {
		d = s.c.maxBackoff
	}
	// +-20% jitter so that many clients do not reconnect in step.
	j := time.Duration(rand.Int64N(int64(d)/5 + 1))
	if rand.IntN(2) == 0 {
		return d - j
	}
	return d + j
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// request builds the next connection's request: the turn's POST until the
// turn id is known, then a GET of the turn's (or session's) events resuming
// after the last seq.
func (s *stream) request(ctx context.Context) (*http.Request, error) {
	var req *http.Request
	var err error
	if s.post != nil && s.turnID == "" {
		req, err = s.c.newRequest(ctx, http.MethodPost, turnsPath(s.sessionID), nil, s.post)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", s.post.IdempotencyKey)
	} else {
		q := map[string][]string{}
		if s.last > 0 {
			q["after"] = []string{strconv.FormatInt(s.last, 10)}
		}
		path := s.path
		if path == "" {
			path = eventsPath(s.sessionID, s.turnID)
		}
		req, err = s.c.newRequest(ctx, http.MethodGet, path, q, nil)
		if err != nil {
			return nil, err
		}
		if s.last > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
		}
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	return req, nil
}

// idleReader cancels its connection when no byte arrives for d.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 && r.d > 0 {
		r.t.Reset(r.d)
	}
	return n, err
}

// connect runs one connection. It reports whether it yielded a new event,
// whether the stream is finished (turn.done yielded, or the consumer
// stopped), and otherwise why the connection ended.
func (s *stream) connect(ctx context.Context, yield func(forge.Event, error) bool) (progressed, finished bool, err error) {
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	isPost := s.post != nil && s.turnID == ""
	req, err := s.request(connCtx)
	if err != nil {
		return false, false, err
	}
	var idle atomic.Bool
	var timer *time.Timer
	if d := s.c.idleTimeout; d > 0 {
		timer = time.AfterFunc(d, func() { idle.Store(true); cancel() })
		defer timer.Stop()
	}
	resp, err := s.c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, false, ctx.Err()
		}
		return false, false, retryable{fmt.Errorf("forge client: connecting: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		aerr := readAPIError(resp)
		switch resp.StatusCode {
		case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return false, false, retryable{aerr}
		}
		return false, false, aerr
	}
	if isPost {
		// The server names the turn in a header before its first event.
		s.turnID = resp.Header.Get("Forge-Turn-Id")
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/json" && isPost {
		// A replayed POST (same Idempotency-Key) may answer with the turn
		// as JSON: follow its event stream from the start.
		var t forge.Turn
		if err := json.NewDecoder(resp.Body).Decode(&t); err != nil || t.ID == "" {
			return false, false, fmt.Errorf("forge client: unexpected answer to a streamed turn: %v", err)
		}
		s.turnID = t.ID
		return false, false, errSwitch
	}
	if mt != "text/event-stream" {
		return false, false, fmt.Errorf("forge client: expected an event stream, got %q", resp.Header.Get("Content-Type"))
	}
	var body io.Reader = resp.Body
	if timer != nil {
		body = &idleReader{r: resp.Body, t: timer, d: s.c.idleTimeout}
	}
	sr := NewSSEReader(body)
	for {
		f, err := sr.Next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return progressed, false, ctx.Err()
			case idle.Load():
				return progressed, false, retryable{errors.New("forge client: event stream idle for too long")}
			case err == io.EOF || err == io.ErrUnexpectedEOF:
				return progressed, false, retryable{errors.New("forge client: event stream closed before its end")}
			case errors.Is(err, ErrLineTooLong):
				return progressed, false, err
			}
			return progressed, false, retryable{fmt.Errorf("forge client: reading event stream: %w", err)}
		}
		if f.Retry > 0 {
			s.retryHint = f.Retry
		}
		if f.Data == "" {
			continue
		}
		if f.Event == "error" {
			// The server ended the stream early. A server-side failure may
			// pass on a new connection; a refusal will not.
			err := frameError(f.Data)
			switch ErrorCode(err) {
			case "invalid_request", "unauthorized", "not_found", "payload_too_large":
				return progressed, false, err
			}
			return progressed, false, retryable{err}
		}
		var ev forge.Event
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			return progressed, false, fmt.Errorf("forge client: bad event frame (id %q): %w", f.ID, err)
		}
		if ev.Seq == 0 && f.HasID {
			ev.Seq, _ = strconv.ParseInt(strings.TrimSpace(f.ID), 10, 64)
		}
		if ev.Type == "" {
			ev.Type = f.Event
		}
		if s.post != nil && s.turnID == "" {
			if strings.HasPrefix(ev.Type, "turn.") && ev.ID != "" {
				s.turnID = ev.ID
			} else if ev.TurnID != nil {
				s.turnID = *ev.TurnID
			}
		}
		if ev.Seq == 0 && !f.HasID {
			// An ephemeral event (forum.typing): no position in the log.
			if !yield(ev, nil) {
				return progressed, true, nil
			}
			continue
		}
		if ev.Seq <= s.last {
			continue // already yielded before a reconnection
		}
		s.last = ev.Seq
		progressed = true
		if !yield(ev, nil) {
			return progressed, true, nil
		}
		if s.untilDone && ev.Type == forge.EventTurnDone {
			return progressed, true, nil
		}
	}
}

// frameError reads an "event: error" frame, which a server may send when a
// stream cannot go on.
func frameError(data string) error {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &body) == nil && body.Error.Code != "" {
		return &APIError{Status: http.StatusOK, Code: body.Error.Code, Message: body.Error.Message}
	}
	return fmt.Errorf("forge client: stream error: %s", data)
}
