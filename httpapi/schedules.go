package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/forge-runtime/forge"
)

// scheduleBody is the body of POST /v1/schedules.
type scheduleBody struct {
	Agent     *string     `json:"agent"`
	Cron      *string     `json:"cron"`
	Every     *string     `json:"every"`
	Timezone  *string     `json:"timezone"`
	Input     []inputBody `json:"input"`
	SessionID *string     `json:"session_id"`
	CatchUp   *string     `json:"catch_up"`
	Paused    *bool       `json:"paused"`
}

// schedulePatch is the body of PATCH /v1/schedules/{id}: the fields that
// may change (a schedule's agent and session are its identity).
type schedulePatch struct {
	Cron     *string     `json:"cron"`
	Every    *string     `json:"every"`
	Timezone *string     `json:"timezone"`
	Input    []inputBody `json:"input"`
	CatchUp  *string     `json:"catch_up"`
	Paused   *bool       `json:"paused"`
}

// scheduleInput checks a schedule's input: one message item (each run
// sends it as its turn's message). Attachments are refused: a run has no
// request to carry inline files, and stored files may be deleted.
func scheduleInput(items []inputBody) ([]forge.Input, error) {
	if len(items) != 1 {
		return nil, invalid("input must hold exactly one item, a message: the text each run sends (got %d items)", len(items))
	}
	in, err := items[0].input(0)
	if err != nil {
		return nil, err
	}
	if in.Type != forge.InputMessage {
		return nil, invalid("input[0].type must be message: a run starts a turn with a message, it resolves no calls")
	}
	if items[0].Files != nil {
		return nil, invalid("input[0].files: a schedule's message cannot carry attachments")
	}
	return []forge.Input{in}, nil
}

func checkCatchUp(p *string) (string, error) {
	if p == nil {
		return forge.CatchUpOnce, nil
	}
	switch *p {
	case forge.CatchUpOnce, forge.CatchUpSkip:
		return *p, nil
	}
	return "", invalid("catch_up must be once or skip, got %q", *p)
}

func checkTimezone(p *string) (string, error) {
	if p == nil {
		return "UTC", nil
	}
	if *p == "" {
		return "", invalid("timezone must be an IANA zone name such as Europe/Paris (omit it for UTC)")
	}
	return *p, nil
}

// cadence returns the cron and every fields of a body, "" when absent;
// an explicit empty string is refused.
func cadence(cron, every *string) (string, string, error) {
	c, e := "", ""
	if cron != nil {
		if *cron == "" {
			return "", "", invalid("cron must not be empty (omit it, or send every instead)")
		}
		c = *cron
	}
	if every != nil {
		if *every == "" {
			return "", "", invalid("every must not be empty (omit it, or send cron instead)")
		}
		e = *every
	}
	return c, e, nil
}

// parseCadence checks a cadence with the server's parser (none: this
// server keeps no schedules).
func (s *Server) parseCadence(cron, every, tz string) (forge.Cadence, error) {
	if s.cadences == nil {
		return nil, forge.Errorf(errNotImplemented, "this server runs no schedules")
	}
	return s.cadences.ParseCadence(cron, every, tz)
}

// slotNow is the server's now at the precision of slots.
func (s *Server) slotNow() time.Time { return s.clock.Now().UTC().Truncate(time.Millisecond) }

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) error {
	tenant := tenantOf(r)
	var body scheduleBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.Agent == nil || *body.Agent == "" {
		return invalid("agent is required: the name of the agent each run talks to")
	}
	cron, every, err := cadence(body.Cron, body.Every)
	if err != nil {
		return err
	}
	tz, err := checkTimezone(body.Timezone)
	if err != nil {
		return err
	}
	spec, err := s.parseCadence(cron, every, tz)
	if err != nil {
		return err
	}
	catchUp, err := checkCatchUp(body.CatchUp)
	if err != nil {
		return err
	}
	input, err := scheduleInput(body.Input)
	if err != nil {
		return err
	}
	// As POST /v1/sessions: an agent that does not exist is not_found.
	if _, err := s.store.GetAgent(r.Context(), tenant, *body.Agent); err != nil {
		return notFound(err, "agent", *body.Agent)
	}
	if sid := body.SessionID; sid != nil {
		if *sid == "" {
			return invalid("session_id must be a session id, or null for a new session each run")
		}
		ses, err := s.store.GetSession(r.Context(), tenant, *sid)
		if err != nil {
			return notFound(err, "session", *sid)
		}
		if ses.Kind != forge.KindDirect {
			return invalid("session %s is a %s: schedules run in direct sessions", ses.ID, ses.Kind)
		}
		if ses.Agent != *body.Agent {
			return invalid("session %s talks to agent %q, not %q", ses.ID, ses.Agent, *body.Agent)
		}
	}
	now := s.slotNow()
	sc := &forge.Schedule{
		ID: s.ids.New(forge.PrefixSchedule), Tenant: tenant, Agent: *body.Agent,
		Cron: cron, Every: every, Timezone: tz, Input: input, SessionID: body.SessionID, CatchUp: catchUp,
		Paused: body.Paused != nil && *body.Paused, NextRunAt: spec.Next(now), CreatedAt: now, UpdatedAt: now,
	}
	if err := s.store.CreateSchedule(r.Context(), sc); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/schedules/"+url.PathEscape(sc.ID))
	writeJSON(w, http.StatusCreated, sc)
	return nil
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	list, next, err := s.store.ListSchedules(r.Context(), tenantOf(r), opts)
	if err != nil {
		return err
	}
	writeList(w, list, next)
	return nil
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("schid")
	sc, err := s.store.GetSchedule(r.Context(), tenantOf(r), id)
	if err != nil {
		return notFound(err, "schedule", id)
	}
	writeJSON(w, http.StatusOK, sc)
	return nil
}

// patchSchedule changes a schedule. A new cadence (cron, every,
// timezone) or a resume (paused: false on a paused schedule) computes
// next_run_at afresh from now: the slots of a pause are not caught up.
// The write is a compare-and-swap on next_run_at, retried when a slot
// fired meanwhile, so a patch never puts back a slot already fired.
func (s *Server) patchSchedule(w http.ResponseWriter, r *http.Request) error {
	tenant, id := tenantOf(r), r.PathValue("schid")
	var body schedulePatch
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.Cron != nil && body.Every != nil {
		return invalid("cron and every exclude each other: give one")
	}
	cron, every, err := cadence(body.Cron, body.Every)
	if err != nil {
		return err
	}
	var tz, catchUp string
	if body.Timezone != nil {
		if tz, err = checkTimezone(body.Timezone); err != nil {
			return err
		}
	}
	if body.CatchUp != nil {
		if catchUp, err = checkCatchUp(body.CatchUp); err != nil {
			return err
		}
	}
	var input []forge.Input
	if body.Input != nil {
		if input, err = scheduleInput(body.Input); err != nil {
			return err
		}
	}
	for range 5 {
		sc, err := s.store.GetSchedule(r.Context(), tenant, id)
		if err != nil {
			return notFound(err, "schedule", id)
		}
		expect := sc.NextRunAt
		recompute := false
		if cron != "" {
			sc.Cron, sc.Every, recompute = cron, "", true
		}
		if every != "" {
			sc.Every, sc.Cron, recompute = every, "", true
		}
		if tz != "" {
			sc.Timezone, recompute = tz, true
		}
		if catchUp != "" {
			sc.CatchUp = catchUp
		}
		if input != nil {
			sc.Input = input
		}
		if body.Paused != nil {
			if sc.Paused && !*body.Paused {
				recompute = true
			}
			sc.Paused = *body.Paused
		}
		now := s.slotNow()
		if recompute {
			spec, err := s.parseCadence(sc.Cron, sc.Every, sc.Timezone)
			if err != nil {
				return err
			}
			sc.NextRunAt = spec.Next(now)
		}
		sc.UpdatedAt = now
		err = s.store.UpdateSchedule(r.Context(), sc, expect)
		if errors.Is(err, forge.ErrConflict) {
			continue // a slot fired meanwhile: apply the patch to what it left
		}
		if err != nil {
			return notFound(err, "schedule", id)
		}
		writeJSON(w, http.StatusOK, sc)
		return nil
	}
	return forge.Errorf(forge.ErrConflict, "schedule %s kept firing while it was being changed; retry", id)
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("schid")
	if err := s.store.DeleteSchedule(r.Context(), tenantOf(r), id); err != nil {
		return notFound(err, "schedule", id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listScheduleRuns lists a schedule's runs, oldest slot first, each with
// its turn's current status (turn_status) when it started one.
func (s *Server) listScheduleRuns(w http.ResponseWriter, r *http.Request) error {
	tenant, id := tenantOf(r), r.PathValue("schid")
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	runs, next, err := s.store.ListScheduleRuns(r.Context(), tenant, id, opts)
	if err != nil {
		return notFound(err, "schedule", id)
	}
	for _, run := range runs {
		if run.TurnID == nil || run.SessionID == nil {
			continue
		}
		t, err := s.store.GetTurn(r.Context(), tenant, *run.SessionID, *run.TurnID)
		switch {
		case err == nil:
			run.TurnStatus = t.Status
		case !errors.Is(err, forge.ErrNotFound):
			return err
		} // a deleted session's turn: no status
	}
	writeList(w, runs, next)
	return nil
}
