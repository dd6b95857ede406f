package client

import (
	"context"
	"net/http"

	"github.com/forge-runtime/forge"
)

// CreateScheduleRequest is the body of POST /v1/schedules: exactly one of
// Cron and Every; Input is one message item; SessionID nil makes a new
// session each run.
type CreateScheduleRequest struct {
	Agent     string        `json:"agent"`
	Cron      string        `json:"cron,omitempty"`
	Every     string        `json:"every,omitempty"`
	Timezone  string        `json:"timezone,omitempty"`
	Input     []forge.Input `json:"input"`
	SessionID *string       `json:"session_id,omitempty"`
	CatchUp   string        `json:"catch_up,omitempty"`
	Paused    bool          `json:"paused,omitempty"`
}

// PatchScheduleRequest is the body of PATCH /v1/schedules/{id}: the
// fields to change, nil for those that stay.
type PatchScheduleRequest struct {
	Cron     *string       `json:"cron,omitempty"`
	Every    *string       `json:"every,omitempty"`
	Timezone *string       `json:"timezone,omitempty"`
	Input    []forge.Input `json:"input,omitempty"`
	CatchUp  *string       `json:"catch_up,omitempty"`
	Paused   *bool         `json:"paused,omitempty"`
}

// CreateSchedule creates a schedule.
func (c *Client) CreateSchedule(ctx context.Context, req CreateScheduleRequest) (*forge.Schedule, error) {
	var out forge.Schedule
	if _, err := c.do(ctx, http.MethodPost, "/v1/schedules", nil, req, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSchedule returns a schedule.
func (c *Client) GetSchedule(ctx context.Context, id string) (*forge.Schedule, error) {
	var out forge.Schedule
	if _, err := c.do(ctx, http.MethodGet, "/v1/schedules/"+seg(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSchedules returns a page of schedules, oldest first.
func (c *Client) ListSchedules(ctx context.Context, opts ListOptions) (*Page[forge.Schedule], error) {
	return list[forge.Schedule](ctx, c, "/v1/schedules", opts.query(nil))
}

// PatchSchedule changes a schedule (pause, resume, cadence, input).
func (c *Client) PatchSchedule(ctx context.Context, id string, req PatchScheduleRequest) (*forge.Schedule, error) {
	var out forge.Schedule
	if _, err := c.do(ctx, http.MethodPatch, "/v1/schedules/"+seg(id), nil, req, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule deletes a schedule and its runs (their turns stay).
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/schedules/"+seg(id), nil, nil, nil, nil)
	return err
}

// ListScheduleRuns returns a page of a schedule's runs, oldest slot first.
func (c *Client) ListScheduleRuns(ctx context.Context, id string, opts ListOptions) (*Page[forge.ScheduleRun], error) {
	return list[forge.ScheduleRun](ctx, c, "/v1/schedules/"+seg(id)+"/runs", opts.query(nil))
}
