package httpapi

import (
	"context"
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
		if turnID == "" {
			// A turn stream ends with its turn whatever the cursor; a
			// session stream would wait forever for seqs past its cursor.
			if err := s.checkCursor(r.Context(), tenant, ses, after); err != nil {
				return err
			}
		}
		release, err := s.streams.open(tenant, ses.ID)
		if err != nil {
			return err
		}
		defer release()
		return s.stream(w, r, tenant, ses.ID, engine.EventsQuery{After: after, TurnID: turnID})
	}
	evs, next, err := s.eventPage(r.Context(), tenant, forge.EventQuery{SessionID: ses.ID, TurnID: turnID, After: after}, limit)
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	writeList(w, evs, next)
	return nil
}

// eventPage reads a page of the stored events q selects: at most limit,
// with the cursor of the next page when more follow ("" when none do).
// It asks for one more row than it answers; a page that comes back full
// without it (a store pages at most 10000 events: limit is the largest
// page already) is followed by a one-row look for the next event.
func (s *Server) eventPage(ctx context.Context, tenant string, q forge.EventQuery, limit int) ([]forge.Event, string, error) {
	q.Limit = limit + 1
	evs, err := s.store.ListEvents(ctx, tenant, q)
	if err != nil {
		return nil, "", err
	}
	if len(evs) < limit {
		return evs, "", nil
	}
	more := len(evs) > limit
	evs = evs[:limit]
	last := evs[limit-1].Seq
	if !more {
		q.After, q.Limit = last, 1
		next, err := s.store.ListEvents(ctx, tenant, q)
		if err != nil {
			return nil, "", err
		}
		more = len(next) > 0
	}
	if !more {
		return evs, "", nil
	}
	return evs, strconv.FormatInt(last, 10), nil
}

// errCursorPastEnd words a stream cursor beyond the end of the log.
func errCursorPastEnd(sid string, after int64) error {
	return invalid("cursor after the end of the log: session %s has no event at or after seq %d and runs no turn that could publish one; resume after a seq this stream sent (or omit the cursor to start from the beginning)", sid, after)
}

// checkCursor refuses a session stream's cursor that no stream of the
// session can have sent (errCursorPastEnd); a live tail from it would
// never yield anything.
func (s *Server) checkCursor(ctx context.Context, tenant string, ses *forge.Session, after int64) error {
	past, err := s.pastEnd(ctx, tenant, ses, after)
	if err != nil {
		return err
	}
	if past {
		return errCursorPastEnd(ses.ID, after)
	}
	return nil
}

// pastEnd reports whether after lies beyond anything the session's log
// can have published: no turn runs, and no stored event has a seq at or
// above after. Seqs are not dense, and a running turn's deltas are never
// stored, so while a turn runs any cursor may be one a client received;
// once none runs, every seq ever published is at or below the last
// stored event (a turn's deltas come before its turn.done; what is
// written outside turns is stored before it is published). The running
// turn, if any, is the session's tip: creating a turn moves the tip.
func (s *Server) pastEnd(ctx context.Context, tenant string, ses *forge.Session, after int64) (bool, error) {
	if after <= 0 {
		return false, nil
	}
	if ses.TipTurnID != nil {
		tip, err := s.store.GetTurn(ctx, tenant, ses.ID, *ses.TipTurnID)
		if err != nil {
			return false, err
		}
		if !tip.Ended() {
			return false, nil
		}
	}
	evs, err := s.store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: ses.ID, After: after - 1, Limit: 1})
	if err != nil {
		return false, err
	}
	return len(evs) == 0, nil
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
