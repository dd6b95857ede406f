package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

const (
	// sseBuffer is how many events may wait between the engine's iterator
	// and the connection; a full buffer makes the iterator wait (the
	// engine decides when a subscriber is too slow).
	sseBuffer = 128
	// sseChunk is the size at which a burst is written out before it ends.
	sseChunk = 32 << 10
	// sseWriteWait bounds one write to the client: a client that reads
	// nothing for this long is cut off.
	sseWriteWait = 30 * time.Second
)

// sseWriter writes Server-Sent Events frames to one response, batching the
// frames of a burst into one write and one flush.
type sseWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	buf  []byte
	wait time.Duration
}

func newSSEWriter(w http.ResponseWriter, wait time.Duration) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 4096), wait: wait}
}

// start writes the stream's headers and flushes them, so the client knows
// the stream is open before the first event.
func (s *sseWriter) start() error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	s.w.WriteHeader(http.StatusOK)
	return s.flush()
}

// ephemeralEnvelope is the envelope of an event that is no position in
// the log (forum.typing): no seq, and no id: line.
type ephemeralEnvelope struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	TurnID    *string         `json:"turn_id"`
	ThreadID  *string         `json:"thread_id"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// event appends ev's frame: id, event type and the JSON envelope. An
// event with no seq (forum.typing) has no id: line and no seq.
func (s *sseWriter) event(ev *forge.Event) error {
	if ev.Seq == 0 {
		data, err := json.Marshal(ephemeralEnvelope{Type: ev.Type, SessionID: ev.SessionID, TurnID: ev.TurnID,
			ThreadID: ev.ThreadID, CreatedAt: ev.CreatedAt, Data: ev.Data})
		if err != nil {
			return err
		}
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, oneLine(ev.Type)...)
		s.buf = append(s.buf, "\ndata: "...)
		s.buf = append(s.buf, data...)
		s.buf = append(s.buf, "\n\n"...)
		return nil
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, "id: "...)
	s.buf = strconv.AppendInt(s.buf, ev.Seq, 10)
	s.buf = append(s.buf, "\nevent: "...)
	s.buf = append(s.buf, oneLine(ev.Type)...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	if len(s.buf) >= sseChunk {
		return s.write()
	}
	return nil
}

// errorEvent appends an "error" frame (no id: it is no position in the
// log) telling why the stream ends early.
func (s *sseWriter) errorEvent(code, message string) {
	data, _ := json.Marshal(errorBody{apiError{Code: code, Message: message}})
	s.buf = append(s.buf, "event: error\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
}

// comment appends a comment line, which clients ignore (keep-alive).
func (s *sseWriter) comment(text string) {
	s.buf = append(s.buf, ": "...)
	s.buf = append(s.buf, oneLine(text)...)
	s.buf = append(s.buf, "\n\n"...)
}

func (s *sseWriter) write() error {
	if len(s.buf) == 0 {
		return nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.wait))
	_, err := s.w.Write(s.buf)
	s.buf = s.buf[:0]
	return err
}

// flush writes what is buffered and pushes it to the client.
func (s *sseWriter) flush() error {
	if err := s.write(); err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.wait))
	return s.rc.Flush()
}

func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	return s
}

type sseItem struct {
	ev  forge.Event
	err error
}

// stream answers the events q selects as an SSE stream: replay, then live
// tail. It ends after the turn's turn.done when q.TurnID is set, when the
// engine's iterator ends or fails, or when the client leaves. While idle it
// sends a ping comment every KeepAlive. It flushes once no further event is
// immediately ready, so a fast producer gets batched writes.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, tenant, sid string, q engine.EventsQuery) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s.streamEvents(ctx, cancel, w, r, sid, q.TurnID, s.rt.Events(ctx, tenant, sid, q))
}

// streamEvents writes events as SSE; ctx is the iterator's context and
// cancel ends it when the client leaves.
func (s *Server) streamEvents(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request, sid, turnID string, events iter.Seq2[forge.Event, error]) {
	items := make(chan sseItem, sseBuffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(items)
		for ev, err := range events {
			select {
			case items <- sseItem{ev, err}:
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

	sw := newSSEWriter(w, s.writeWait)
	// Each write sets its own deadline (which also lifts a server
	// WriteTimeout for the stream's life); clear it when done. net/http
	// clears it after the handler too; this keeps that explicit.
	defer func() { _ = sw.rc.SetWriteDeadline(time.Time{}) }()
	if err := sw.start(); err != nil {
		return
	}
	ping := time.NewTicker(s.keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			sw.comment("ping")
			if sw.flush() != nil {
				return
			}
		case it, ok := <-items:
			end := false
			for {
				if end = s.frame(sw, it, ok, turnID, sid); end {
					break
				}
				// Take whatever else is ready before flushing.
				select {
				case it, ok = <-items:
					continue
				default:
				}
				break
			}
			if sw.flush() != nil || end {
				return
			}
			ping.Reset(s.keepAlive)
		}
	}
}

// frame writes one item and reports whether the stream ends with it.
func (s *Server) frame(sw *sseWriter, it sseItem, ok bool, turnID, sid string) (end bool) {
	if !ok {
		return true // the iterator ended
	}
	if it.err != nil {
		if errors.Is(it.err, context.Canceled) {
			return true
		}
		_, code, msg := classify(it.err)
		s.log.Warn("event stream ended by an error", "session_id", sid, "turn_id", turnID, "err", it.err)
		sw.errorEvent(code, msg)
		return true
	}
	if err := sw.event(&it.ev); err != nil {
		s.log.Debug("event stream write failed", "session_id", sid, "turn_id", turnID, "err", err)
		return true
	}
	return turnID != "" && it.ev.Type == forge.EventTurnDone && it.ev.TurnID != nil && *it.ev.TurnID == turnID
}
