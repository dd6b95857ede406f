// Package sse writes Server-Sent Events streams: the frames, batched per
// burst, and the pump that feeds them from an iterator with keep-alive
// pings. Forge's own event stream (httpapi) and the protocols it speaks
// (protocol/...) each frame their events; this is the part they share.
package sse

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	// WriteWait bounds one write to a client: a client that reads nothing
	// for this long is cut off.
	WriteWait = 30 * time.Second
	// buffer is how many items may wait between the iterator and the
	// connection; a full buffer makes the iterator wait (its producer
	// decides when a subscriber is too slow).
	buffer = 128
	// chunk is the size at which a burst is written out before it ends.
	chunk = 32 << 10
	// defaultKeepAlive is the ping interval when none is given.
	defaultKeepAlive = 15 * time.Second
	// DefaultCoalesce is a new Writer's Coalesce: a paced stream's items
	// wait at most this long for company before they are written.
	DefaultCoalesce = 3 * time.Millisecond
)

// Writer writes Server-Sent Events frames to one response, batching the
// frames of a burst into one write and one flush. Each write has between
// three quarters of wait and wait to finish (the deadline is moved only
// when less than three quarters are left: moving it is a timer change per
// write, a few percent of a paced stream's CPU), which also lifts a
// server's WriteTimeout for the stream's life.
type Writer struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	buf  []byte
	wait time.Duration
	// deadline is the connection's write deadline as last set.
	deadline time.Time
	// Coalesce, when positive, is the least time between two flushes of
	// Pump: an item that arrives sooner after the last flush waits with
	// those that follow until this much time has passed since it, so a
	// steadily paced stream costs one write per Coalesce, not one per
	// item. An item after a quiet spell is flushed at once, and so is one
	// the handler marks Urgent.
	Coalesce time.Duration
	urgent   bool // the frames buffered go out with the next item, not held
}

// Urgent has Pump flush what is buffered at once instead of holding it
// for company (Coalesce): for the first frame of a run, which a reader is
// waiting for, as opposed to the next of many.
func (s *Writer) Urgent() { s.urgent = true }

// NewWriter returns a writer on w whose writes may each take wait.
func NewWriter(w http.ResponseWriter, wait time.Duration) *Writer {
	return &Writer{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 4096), wait: wait, Coalesce: DefaultCoalesce}
}

// Start writes the stream's status and headers (with those the caller set
// on the response) and flushes them, so the client knows the stream is
// open before the first event.
func (s *Writer) Start() error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	s.w.WriteHeader(http.StatusOK)
	return s.Flush()
}

// Event appends one frame: an id: line when id > 0, an event: line when
// event is set, then data, which must hold no newline (JSON from
// encoding/json holds none).
func (s *Writer) Event(id int64, event string, data []byte) {
	if id > 0 {
		s.buf = append(s.buf, "id: "...)
		s.buf = strconv.AppendInt(s.buf, id, 10)
		s.buf = append(s.buf, '\n')
	}
	if event != "" {
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, oneLine(event)...)
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, "data: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
}

// Comment appends a comment line, which clients ignore (a keep-alive).
func (s *Writer) Comment(text string) {
	s.buf = append(s.buf, ": "...)
	s.buf = append(s.buf, oneLine(text)...)
	s.buf = append(s.buf, "\n\n"...)
}

// Buffered is how many bytes wait to be written.
func (s *Writer) Buffered() int { return len(s.buf) }

// Flush writes what is buffered and pushes it to the client.
func (s *Writer) Flush() error {
	if now := time.Now(); s.deadline.Sub(now) < s.wait-s.wait/4 {
		s.deadline = now.Add(s.wait)
		_ = s.rc.SetWriteDeadline(s.deadline)
	}
	if len(s.buf) > 0 {
		_, err := s.w.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

// End clears the write deadline the stream set (net/http clears it after
// the handler too; this keeps that explicit).
func (s *Writer) End() {
	s.deadline = time.Time{}
	_ = s.rc.SetWriteDeadline(time.Time{})
}

func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	return s
}

type item[T any] struct {
	v   T
	err error
}

// Pump streams items as SSE on w. ctx is the items' context and cancel
// ends it: Pump reads the items on a goroutine of its own, starts w, and
// hands each item to handle, which appends its frames to w. It writes and
// flushes once no further item is immediately ready (or a burst has
// filled 32 KiB), pings an idle client every keepAlive (15 s when not
// positive), and returns when handle reports the end, an error came
// (handed to handle, except context.Canceled), the items end, a write
// fails or ctx is done. idle, when not nil, runs at each keep-alive tick
// before the ping: it may append a last frame to w and report the end (a
// stream whose subject is gone). Before returning Pump cancels ctx, waits
// for its goroutine and clears w's deadline.
func Pump[T any](ctx context.Context, cancel context.CancelFunc, w *Writer, keepAlive time.Duration, items iter.Seq2[T, error], handle func(v T, err error) (end bool), idle func() (end bool)) {
	ch := make(chan item[T], buffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for v, err := range items {
			select {
			case ch <- item[T]{v, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-done
	}()
	defer w.End()
	if w.Start() != nil {
		return
	}
	if keepAlive <= 0 {
		keepAlive = defaultKeepAlive
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	var (
		lastFlush time.Time
		hold      *time.Timer // the held flush's timer, nil when none is held
		holdC     <-chan time.Time
	)
	defer func() {
		if hold != nil {
			hold.Stop()
		}
	}()
	flush := func() bool {
		if hold != nil {
			hold.Stop()
			hold, holdC = nil, nil
		}
		lastFlush, w.urgent = time.Now(), false
		return w.Flush() == nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if idle != nil && idle() {
				_ = flush()
				return
			}
			w.Comment("ping")
			if !flush() {
				return
			}
		case <-holdC:
			if !flush() {
				return
			}
		case it, ok := <-ch:
			end := false
			for {
				switch {
				case !ok, errors.Is(it.err, context.Canceled):
					end = true // the items ended, or were cancelled
				default:
					end = handle(it.v, it.err) || it.err != nil
				}
				if end || w.Buffered() >= chunk {
					break
				}
				// Take whatever else is ready before flushing.
				select {
				case it, ok = <-ch:
					continue
				default:
				}
				break
			}
			if !end && w.Coalesce > 0 && !w.urgent && w.Buffered() < chunk {
				if since := time.Since(lastFlush); since < w.Coalesce {
					if hold == nil {
						hold = time.NewTimer(w.Coalesce - since)
						holdC = hold.C
					}
					ping.Reset(keepAlive)
					continue
				}
			}
			if !flush() || end {
				return
			}
			ping.Reset(keepAlive)
		}
	}
}
