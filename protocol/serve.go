package protocol

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// Runtime is the part of the engine the protocol handlers call: the same
// methods httpapi.Runtime has for turns and events.
type Runtime interface {
	StartTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, error)
	StreamTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error)
	WaitTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
	Cancel(ctx context.Context, tenant, sessionID, reason string) (*forge.Turn, error)
	Events(ctx context.Context, tenant, sessionID string, q engine.EventsQuery) iter.Seq2[forge.Event, error]
}

// Env is what the server mounting a protocol hands its handlers.
type Env struct {
	Store   forge.Store
	Runtime Runtime
	// Tenant authenticates a request and returns its tenant.
	Tenant func(r *http.Request) (string, error)
	// Decode reads a request's JSON body into dst (a pointer to a struct)
	// with the server's limits: size, nesting, valid UTF-8, no unknown or
	// repeated field. required false accepts an empty body.
	Decode func(w http.ResponseWriter, r *http.Request, dst any, required bool) error
	// Classify maps an error to its HTTP status, Forge error code and
	// client-facing message (a 5xx never shows the error's own text).
	Classify  func(err error) (status int, code, message string)
	Log       *slog.Logger
	Clock     forge.Clock
	IDs       forge.IDGen
	KeepAlive time.Duration
}

// WriteWait bounds one write to a streaming client: one that reads
// nothing for this long is cut off.
const WriteWait = 30 * time.Second

// SSE writes Server-Sent Events frames, batching the frames of a burst.
type SSE struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

// NewSSE returns a writer on w.
func NewSSE(w http.ResponseWriter) *SSE {
	return &SSE{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 4096)}
}

// Start writes the stream's status and headers (plus extra, in pairs) and
// flushes them.
func (s *SSE) Start(extra ...string) error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	s.w.WriteHeader(http.StatusOK)
	return s.Flush()
}

// Frame appends one frame; event and id are left out when empty. data
// must hold no newline (JSON from encoding/json holds none).
func (s *SSE) Frame(event, id string, data []byte) {
	if event != "" {
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, oneLine(event)...)
		s.buf = append(s.buf, '\n')
	}
	if id != "" {
		s.buf = append(s.buf, "id: "...)
		s.buf = append(s.buf, oneLine(id)...)
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, "data: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
}

// Comment appends a comment line (a keep-alive clients ignore).
func (s *SSE) Comment(text string) {
	s.buf = append(s.buf, ": "...)
	s.buf = append(s.buf, oneLine(text)...)
	s.buf = append(s.buf, "\n\n"...)
}

// Buffered is how many bytes wait to be written.
func (s *SSE) Buffered() int { return len(s.buf) }

// Flush writes what is buffered and pushes it to the client.
func (s *SSE) Flush() error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(WriteWait))
	if len(s.buf) > 0 {
		_, err := s.w.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

// End clears the write deadline the stream set.
func (s *SSE) End() { _ = s.rc.SetWriteDeadline(time.Time{}) }

func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	return s
}

type item struct {
	ev  forge.Event
	err error
}

// Pump reads events (with ctx, which it cancels when it returns) and hands
// each to handle, which buffers frames on sse; it flushes once no further
// event is immediately ready, pings an idle client every keepAlive, and
// returns when handle reports the end, the events end, an error comes
// (handed to handle with a zero event) or the client leaves. The caller
// has started sse.
func Pump(ctx context.Context, sse *SSE, keepAlive time.Duration, events iter.Seq2[forge.Event, error], handle func(ev forge.Event, err error) (end bool)) {
	ctx, cancel := context.WithCancel(ctx)
	items := make(chan item, 128)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(items)
		for ev, err := range events {
			select {
			case items <- item{ev, err}:
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
	if keepAlive <= 0 {
		keepAlive = 15 * time.Second
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			sse.Comment("ping")
			if sse.Flush() != nil {
				return
			}
		case it, ok := <-items:
			end := false
			for {
				if !ok {
					end = true
					break
				}
				if it.err != nil && errors.Is(it.err, context.Canceled) {
					end = true
					break
				}
				if end = handle(it.ev, it.err); end || it.err != nil {
					end = true
					break
				}
				if sse.Buffered() >= 32<<10 {
					break
				}
				select {
				case it, ok = <-items:
					continue
				default:
				}
				break
			}
			if sse.Flush() != nil || end {
				return
			}
			ping.Reset(keepAlive)
		}
	}
}

// TurnEvents returns every event of a turn from its turn.created: the
// stored log, then (while it runs) the live tail, ending after turn.done.
func TurnEvents(ctx context.Context, rt Runtime, tenant, sessionID, turnID string) iter.Seq2[forge.Event, error] {
	return rt.Events(ctx, tenant, sessionID, engine.EventsQuery{TurnID: turnID})
}

// StoredTurnEvents yields a turn's stored events in seq order, page by
// page (no live tail: for reading a turn as it is now).
func StoredTurnEvents(ctx context.Context, store forge.Store, tenant, sessionID, turnID string) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		after := int64(0)
		for {
			page, err := store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: sessionID, TurnID: turnID, After: after, Limit: 1000})
			if err != nil {
				yield(forge.Event{}, err)
				return
			}
			for _, ev := range page {
				if !yield(ev, nil) {
					return
				}
				after = ev.Seq
			}
			if len(page) < 1000 {
				return
			}
		}
	}
}

// Detach returns r's context without its cancellation: a state change the
// server accepted (starting a turn, cancelling one) runs to its end even
// if the client hangs up.
func Detach(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }
