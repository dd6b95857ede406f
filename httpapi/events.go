package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// sessionEvents serves GET /v1/sessions/{sid}/events.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) error {
	return s.events(w, r, "")
}

// turnEvents serves GET /v1/sessions/{sid}/turns/{tid}/events.
func (s *Server) turnEvents(w http.ResponseWriter, r *http.Request) error {
	return s.events(w, r, r.PathValue("tid"))
}

// events answers a session's or a turn's events after a seq: an SSE stream
// (replay, then live tail) for Accept: text/event-stream, otherwise a page
// of the stored log.
//
// The position is, by precedence: the Last-Event-ID header, then ?cursor
// (the next_cursor of a previous page), then ?after; absent, from the
// start.
func (s *Server) events(w http.ResponseWriter, r *http.Request, turnID string) error {
	tenant := tenantOf(r)
	q := r.URL.Query()
	sse := acceptsSSE(r)
	after, err := eventPosition(r)
	if err != nil {
		return err
	}
	limit := 0
	if !sse {
		if limit, err = parseLimit(q, defaultEventLimit); err != nil {
			return err
		}
	}
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	if turnID != "" {
		if _, err := s.store.GetTurn(r.Context(), tenant, ses.ID, turnID); err != nil {
			if errors.Is(err, forge.ErrNotFound) {
				return forge.Errorf(forge.ErrNotFound, "turn %q not found in session %q", turnID, ses.ID)
			}
			return err
		}
	}
	if sse {
		s.stream(w, r, tenant, ses.ID, engine.EventsQuery{After: after, TurnID: turnID})
		return nil
	}
	evs, err := s.store.ListEvents(r.Context(), tenant, forge.EventQuery{
		SessionID: ses.ID, TurnID: turnID, After: after, Limit: limit + 1,
	})
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	next := ""
	if len(evs) > limit {
		evs = evs[:limit]
		next = strconv.FormatInt(evs[limit-1].Seq, 10)
	}
	writeList(w, evs, next)
	return nil
}

// eventPosition returns the seq to resume after.
func eventPosition(r *http.Request) (int64, error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		return parseSeq(v, "Last-Event-ID")
	}
	q := r.URL.Query()
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, invalid("cursor is not valid: pass the next_cursor of a previous page")
		}
		return n, nil
	}
	if q.Has("after") {
		return parseSeq(q.Get("after"), "after")
	}
	return 0, nil
}
