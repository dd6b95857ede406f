package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// sessionBody is the body of POST /v1/sessions.
type sessionBody struct {
	Agent    *string         `json:"agent"`
	Title    *string         `json:"title"`
	Metadata json.RawMessage `json:"metadata"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	tenant := tenantOf(r)
	var body sessionBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.Agent == nil || *body.Agent == "" {
		return invalid("agent is required: the name of the agent this session talks to")
	}
	meta := json.RawMessage(`{}`)
	if m := bytes.TrimSpace(body.Metadata); len(m) > 0 && string(m) != "null" {
		if m[0] != '{' {
			return invalid("metadata must be a JSON object")
		}
		meta = m
	}
	if _, err := s.store.GetAgent(r.Context(), tenant, *body.Agent); err != nil {
		return notFound(err, "agent", *body.Agent)
	}
	now := s.clock.Now()
	ses := &forge.Session{
		ID:           s.ids.New(forge.PrefixSession),
		Tenant:       tenant,
		Kind:         forge.KindDirect,
		Agent:        *body.Agent,
		MainThreadID: s.ids.New(forge.PrefixThread),
		Metadata:     meta,
		CreatedAt:    now,
		UpdatedAt:    now,
	}
	if body.Title != nil {
		ses.Title = *body.Title
	}
	if err := s.store.CreateSession(r.Context(), ses); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+url.PathEscape(ses.ID))
	writeJSON(w, http.StatusCreated, ses)
	return nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	q, err := sessionQuery(r.URL.Query())
	if err != nil {
		return err
	}
	list, next, err := s.store.ListSessions(r.Context(), tenantOf(r), q)
	if err != nil {
		return err
	}
	writeList(w, list, next)
	return nil
}

// session loads the session named by the path, or answers not_found.
func (s *Server) session(r *http.Request) (*forge.Session, error) {
	sid := r.PathValue("sid")
	ses, err := s.store.GetSession(r.Context(), tenantOf(r), sid)
	if err != nil {
		return nil, notFound(err, "session", sid)
	}
	return ses, nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ses)
	return nil
}

// deleteSession deletes a session, cancelling its running turn first (the
// engine does both). Forums and monologues go through the forum layer, as
// DELETE /v1/forums/{fid} does: a forum's stints end and their monologue
// turns are cancelled; an active stint's monologue is refused.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	sid, tenant := r.PathValue("sid"), tenantOf(r)
	ses, err := s.store.GetSession(r.Context(), tenant, sid)
	if err != nil {
		return notFound(err, "session", sid)
	}
	switch {
	case s.forumSvc != nil && ses.Kind == forge.KindForum:
		err = s.forumSvc.DeleteForum(detach(r), tenant, sid)
	case s.forumSvc != nil && ses.Kind == forge.KindMonologue:
		err = s.forumSvc.DeleteMonologue(detach(r), tenant, sid)
	default:
		err = s.rt.DeleteSession(detach(r), tenant, sid)
	}
	if err != nil {
		return notFound(err, "session", sid)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listMessages lists the messages along the branch ending at the session
// tip: all of them (view=full, the default) or what the model would see
// next (view=model).
func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	view := "full"
	if q.Has("view") {
		view = q.Get("view")
		if view != "full" && view != "model" {
			return invalid("view must be full or model, got %q", view)
		}
	}
	opts, err := listOptions(q, defaultListLimit)
	if err != nil {
		return err
	}
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	tenant := tenantOf(r)
	var (
		msgs []*forge.Message
		next string
	)
	switch {
	case view == "model":
		msgs, next, err = s.rt.ModelView(r.Context(), tenant, ses.ID, opts)
	default:
		// With no turn yet, only messages outside turns (a forum's, the
		// copies in a monologue) are listed.
		tip := ""
		if ses.TipTurnID != nil {
			tip = *ses.TipTurnID
		}
		msgs, next, err = s.store.ListMessages(r.Context(), tenant, forge.MessageQuery{
			SessionID:   ses.ID,
			TipTurnID:   tip,
			ThreadID:    ses.MainThreadID,
			ListOptions: opts,
		})
	}
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	for _, m := range msgs {
		if m.Parts == nil {
			m.Parts = []*forge.Part{}
		}
	}
	writeList(w, msgs, next)
	return nil
}

// getCapabilities answers the capability states (the todo list, ...) kept
// in the snapshot of the session tip's turn; {} before any.
func (s *Server) getCapabilities(w http.ResponseWriter, r *http.Request) error {
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	caps := map[string]json.RawMessage{}
	if ses.TipTurnID != nil {
		snap, err := s.store.GetSnapshot(r.Context(), tenantOf(r), *ses.TipTurnID)
		switch {
		case err == nil && snap.Capabilities != nil:
			caps = snap.Capabilities
		case err != nil && !errors.Is(err, forge.ErrNotFound):
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": caps})
	return nil
}

// maxMetadataFilters bounds the metadata.KEY filters of one list.
const maxMetadataFilters = 16

// sessionQuery reads the filters of a list of sessions or forums:
// agent, kind, status, metadata.KEY, updated_after, order (API.md,
// "Retention and listing").
func sessionQuery(v url.Values) (forge.SessionQuery, error) {
	opts, err := listOptions(v, defaultListLimit)
	if err != nil {
		return forge.SessionQuery{}, err
	}
	q := forge.SessionQuery{ListOptions: opts, Agent: v.Get("agent"), Kind: v.Get("kind"), Status: v.Get("status")}
	switch q.Kind {
	case "", forge.KindDirect, forge.KindForum, forge.KindMonologue:
	default:
		return q, invalid("kind must be %s, %s or %s, got %q", forge.KindDirect, forge.KindForum, forge.KindMonologue, q.Kind)
	}
	switch o := v.Get("order"); o {
	case "", "desc":
	case "asc":
		q.Ascending = true
	default:
		return q, invalid("order must be desc or asc, got %q", o)
	}
	if a := v.Get("updated_after"); a != "" {
		t, err := time.Parse(time.RFC3339Nano, a)
		if err != nil {
			return q, invalid("updated_after must be an RFC 3339 time (2026-12-01T08:00:00Z), got %q", a)
		}
		q.UpdatedAfter = t
	}
	for key, vals := range v {
		k, ok := strings.CutPrefix(key, "metadata.") // the store checks keys and status
		if !ok {
			continue
		}
		if q.Metadata == nil {
			q.Metadata = map[string]string{}
		}
		if len(q.Metadata) == maxMetadataFilters {
			return q, invalid("at most %d metadata filters", maxMetadataFilters)
		}
		q.Metadata[k] = vals[len(vals)-1]
	}
	return q, nil
}
