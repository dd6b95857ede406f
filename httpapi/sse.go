package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/sse"
	"github.com/forge-runtime/forge/protocol"
)

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

// writeEvent appends ev's frame: id, event type and the JSON envelope. An
// event with no seq (forum.typing) has no id: line and no seq.
func writeEvent(sw *sse.Writer, ev *forge.Event) error {
	var data []byte
	var err error
	if ev.Seq == 0 {
		data, err = json.Marshal(ephemeralEnvelope{Type: ev.Type, SessionID: ev.SessionID, TurnID: ev.TurnID,
			ThreadID: ev.ThreadID, CreatedAt: ev.CreatedAt, Data: ev.Data})
	} else {
		data, err = ev.JSON() // encoded once for every subscriber
	}
	if err != nil {
		return err
	}
	sw.Event(ev.Seq, ev.Type, data)
	return nil
}

// writeError appends an "error" frame (no id: it is no position in the
// log) telling why the stream ends early.
func writeError(sw *sse.Writer, code, message string) {
	data, _ := json.Marshal(errorBody{apiError{Code: code, Message: message}})
	sw.Event(0, "error", data)
}

// stream answers the events q selects as an SSE stream: replay, then live
// tail. It ends after the turn's turn.done when q.TurnID is set, when the
// engine's iterator ends or fails, or when the client leaves. While idle it
// sends a ping comment every KeepAlive. It flushes once no further event is
// immediately ready, so a fast producer gets batched writes. The stream is
// opened before anything is answered: a stream the bus cannot serve (it
// is down) returns the error for a 503 with Retry-After, rather than a
// 200 that ends in an error frame at once (clients would loop on it); an
// ended turn's stream is served from the store, bus or no bus.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, tenant, sid string, q engine.EventsQuery) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	after := q.After
	if q.TurnID != "" {
		after = 0 // a turn stream ends with its turn
	}
	events, err := s.rt.OpenEvents(ctx, tenant, sid, q)
	if err != nil {
		return err
	}
	s.streamEvents(ctx, cancel, w, r, sid, q.TurnID, after, events)
	return nil
}

// streamEvents writes events as SSE (sse.Pump); ctx is the iterator's
// context and cancel ends it when the client leaves. A stream whose
// session (or forum) is deleted ends with a not_found error frame, noticed
// at a keep-alive tick: nothing more will come, and a client would
// otherwise follow a deleted session forever. So does, with an
// invalid_request frame, a stream resumed after after (not 0) that has
// sent nothing when its session's log turns out to end below the cursor
// (the turn running when it started ended below it: pastEnd).
func (s *Server) streamEvents(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request, sid, turnID string, after int64, events iter.Seq2[forge.Event, error]) {
	sw := sse.NewWriter(w, s.writeWait)
	tenant := tenantOf(r)
	sent := false // an event with a seq was sent
	var runs protocol.Runs
	sse.Pump(ctx, cancel, sw, s.keepAlive, events, func(ev forge.Event, err error) bool {
		sent = sent || (err == nil && ev.Seq > 0)
		if err != nil || runs.Starts(ev) {
			sw.Urgent()
		}
		return s.frame(sw, ev, err, turnID, sid)
	}, func() bool {
		if s.sessionGone(ctx, sw, tenant, sid) {
			return true
		}
		return after > 0 && !sent && s.cursorPastEnd(ctx, sw, tenant, sid, after)
	})
}

// cursorPastEnd reports whether the stream's cursor lies past the end of
// its session's log, appending the error frame that ends the stream.
// Failures are let pass: the next tick looks again.
func (s *Server) cursorPastEnd(ctx context.Context, sw *sse.Writer, tenant, sid string, after int64) bool {
	if s.store == nil {
		return false
	}
	ses, err := s.store.GetSession(ctx, tenant, sid)
	if err != nil {
		return false
	}
	if past, err := s.pastEnd(ctx, tenant, ses, after); err != nil || !past {
		return false
	}
	_, code, msg := classify(errCursorPastEnd(sid, after))
	writeError(sw, code, msg)
	return true
}

// sessionGone reports whether the session is deleted, appending the
// not_found error frame that ends its stream. Other failures are let
// pass: the next tick looks again.
func (s *Server) sessionGone(ctx context.Context, sw *sse.Writer, tenant, sid string) bool {
	if s.store == nil {
		return false
	}
	if _, err := s.store.GetSession(ctx, tenant, sid); !errors.Is(err, forge.ErrNotFound) {
		return false
	}
	writeError(sw, "not_found", "session "+sid+" was deleted")
	return true
}

// frame writes one event, or the error that ends the stream, and reports
// whether the stream ends with it.
func (s *Server) frame(sw *sse.Writer, ev forge.Event, err error, turnID, sid string) (end bool) {
	if err != nil {
		_, code, msg := classify(err)
		s.log.Warn("event stream ended by an error", "session_id", sid, "turn_id", turnID, "err", err)
		writeError(sw, code, msg)
		return true
	}
	if err := writeEvent(sw, &ev); err != nil {
		s.log.Debug("event stream write failed", "session_id", sid, "turn_id", turnID, "err", err)
		return true
	}
	return turnID != "" && ev.Type == forge.EventTurnDone && ev.TurnID != nil && *ev.TurnID == turnID
}
