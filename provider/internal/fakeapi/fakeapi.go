// Package fakeapi is the scaffolding the loopback fakes of the model APIs
// (openaitest, anthropictest) share: the loopback server and its shutdown,
// the queue of scripted answers, the request log, the delivery of a stream
// (delays, stalls, cuts, an error mid-stream) and small JSON and SSE
// helpers. What goes on the wire, every byte of it, stays in each fake.
package fakeapi

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Loopback is an HTTP server on 127.0.0.1 whose Close first releases the
// streams stalled by a Delivery's Hang.
type Loopback struct {
	srv      *httptest.Server
	done     chan struct{}
	once     sync.Once
	conns    atomic.Int64 // connections accepted
	inFlight atomic.Int64 // requests being answered
	gate     atomic.Pointer[func()]
}

// Start serves h on 127.0.0.1; t.Cleanup closes it.
func Start(t testing.TB, h http.Handler) *Loopback {
	l := Listen(h)
	t.Cleanup(l.Close)
	return l
}

// Listen starts h on 127.0.0.1 outside a test; the caller must Close it.
func Listen(h http.Handler) *Loopback {
	l := &Loopback{done: make(chan struct{})}
	l.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.inFlight.Add(1)
		defer l.inFlight.Add(-1)
		if g := l.gate.Load(); g != nil {
			(*g)()
		}
		h.ServeHTTP(w, r)
	}))
	l.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			l.conns.Add(1)
		}
	}
	l.srv.Start()
	return l
}

// InFlight is the number of requests being answered: a stream a client
// aborted is no longer counted once the server noticed.
func (l *Loopback) InFlight() int { return int(l.inFlight.Load()) }

// Connections is the number of connections the server has accepted: a
// client that reuses its connections opens no more than the calls it has
// in flight at once.
func (l *Loopback) Connections() int64 { return l.conns.Load() }

// SetGate makes every request call gate before it is answered (nil: no
// gate): a test holds requests until as many as it wants are in flight.
func (l *Loopback) SetGate(gate func()) {
	if gate == nil {
		l.gate.Store(nil)
		return
	}
	l.gate.Store(&gate)
}

// URL is the server's root, http://127.0.0.1:port.
func (l *Loopback) URL() string { return l.srv.URL }

// Done is closed by Close.
func (l *Loopback) Done() <-chan struct{} { return l.done }

// Close releases stalled streams, drops the connections and stops the
// server. It may be called more than once.
func (l *Loopback) Close() {
	l.once.Do(func() {
		close(l.done)
		l.srv.CloseClientConnections()
		l.srv.Close()
	})
}

// Script is the queue of scripted answers: served in order, one per
// request, the default one when the queue is empty. Safe for concurrent
// use.
type Script[R any] struct {
	mu    sync.Mutex // guards the following
	queue []R
	def   R
}

// NewScript returns an empty queue answering def.
func NewScript[R any](def R) *Script[R] { return &Script[R]{def: def} }

// Enqueue queues answers.
func (s *Script[R]) Enqueue(r ...R) {
	s.mu.Lock()
	s.queue = append(s.queue, r...)
	s.mu.Unlock()
}

// SetDefault sets the answer used when the queue is empty.
func (s *Script[R]) SetDefault(r R) {
	s.mu.Lock()
	s.def = r
	s.mu.Unlock()
}

// Pending is the number of queued answers not yet served.
func (s *Script[R]) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Next takes the next queued answer, or the default when none is queued.
func (s *Script[R]) Next() R {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return s.def
	}
	var zero R
	r := s.queue[0]
	s.queue[0] = zero // the answer is not kept alive by the slice
	s.queue = s.queue[1:]
	return r
}

// Log records requests in arrival order. Recording is on until SetOn(false)
// (load tests turn it off). Safe for concurrent use.
type Log[T any] struct {
	mu    sync.Mutex // guards the following
	off   bool
	items []T
}

// SetOn turns recording on or off.
func (l *Log[T]) SetOn(on bool) {
	l.mu.Lock()
	l.off = !on
	l.mu.Unlock()
}

// On tells whether requests are recorded.
func (l *Log[T]) On() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.off
}

// Add records v.
func (l *Log[T]) Add(v T) {
	l.mu.Lock()
	l.items = append(l.items, v)
	l.mu.Unlock()
}

// All returns the recorded requests.
func (l *Log[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

// Last returns the most recent request; ok is false when there was none.
func (l *Log[T]) Last() (v T, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.items) == 0 {
		return v, false
	}
	return l.items[len(l.items)-1], true
}

// Delivery is how a scripted stream is delivered. Counts are events
// before the effect, plus one (0: never), so the zero Delivery delivers
// everything at once.
type Delivery struct {
	Delay    time.Duration // before each event after the first
	Hang     int           // stall until the request or the server ends
	Cut      int           // drop the connection
	ErrAfter int           // write the error event and end the stream
	Silent   bool          // answer nothing at all until the request or the server ends
}

// Stream writes an event stream: the headers already set on w plus
// Content-Type text/event-stream and Cache-Control no-cache, status 200,
// then events one by one, each flushed, as d says. errEvent is what
// ErrAfter writes; an effect counted past the last event applies after it.
// The stream ends early when ctx or done ends.
func Stream(w http.ResponseWriter, ctx context.Context, done <-chan struct{}, d Delivery, events [][]byte, errEvent []byte) {
	if d.Silent {
		select {
		case <-ctx.Done():
		case <-done:
		}
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	var timer *time.Timer
	for i, ev := range events {
		switch i + 1 {
		case d.Hang:
			select {
			case <-ctx.Done():
			case <-done:
			}
			return
		case d.Cut:
			panic(http.ErrAbortHandler) // drops the connection mid-stream
		case d.ErrAfter:
			w.Write(errEvent)
			rc.Flush()
			return
		}
		if i > 0 && d.Delay > 0 {
			if timer == nil {
				timer = time.NewTimer(d.Delay)
			} else {
				timer.Reset(d.Delay)
			}
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
		if _, err := w.Write(ev); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	// Settings beyond the last event still apply.
	n := len(events) + 1
	switch {
	case d.Hang >= n:
		select {
		case <-ctx.Done():
		case <-done:
		}
	case d.Cut >= n:
		panic(http.ErrAbortHandler)
	case d.ErrAfter >= n:
		w.Write(errEvent)
		rc.Flush()
	}
}

// SplitSSE splits a captured event stream into its events (separated by
// blank lines, CRLF or LF), each ending in "\n\n".
func SplitSSE(sse []byte) [][]byte {
	var events [][]byte
	sse = bytes.ReplaceAll(sse, []byte("\r\n"), []byte("\n"))
	for _, ev := range bytes.Split(sse, []byte("\n\n")) {
		ev = bytes.Trim(ev, "\n")
		if len(ev) == 0 {
			continue
		}
		events = append(events, append(ev, '\n', '\n'))
	}
	return events
}

// WithHeader returns a copy of h with key set to value.
func WithHeader(h http.Header, key, value string) http.Header {
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(key, value)
	return h
}

// AppendString appends s as a JSON string, without HTML escaping (as both
// APIs write it), then any trailing bytes.
func AppendString(b []byte, s string, trailing ...byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	b = append(b, '"')
	return append(b, trailing...)
}

// Fragments splits s into pieces of about size bytes, on rune boundaries,
// as a model streams tool arguments.
func Fragments(s string, size int) []string {
	var out []string
	for len(s) > size {
		n := size
		for n < len(s) && s[n]&0xC0 == 0x80 {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}
