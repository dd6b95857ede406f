package client

import (
	"context"
	"testing"

	"github.com/forge-runtime/forge"
)

func TestSchedules(t *testing.T) {
	t.Parallel()
	srv, seen := jsonServer(t, map[string]route{
		"POST /v1/schedules":           {201, `{"id":"sch_1","agent":"digest","every":"30s","timezone":"UTC","session_id":null,"catch_up":"once","paused":false}`},
		"GET /v1/schedules/sch_1":      {200, `{"id":"sch_1","agent":"digest","every":"30s"}`},
		"GET /v1/schedules":            {200, `{"data":[{"id":"sch_1"}],"next_cursor":null}`},
		"PATCH /v1/schedules/sch_1":    {200, `{"id":"sch_1","paused":true}`},
		"GET /v1/schedules/sch_1/runs": {200, `{"data":[{"id":"run_1","schedule_id":"sch_1","status":"started","turn_id":"turn_1"}],"next_cursor":"c"}`},
		"DELETE /v1/schedules/sch_1":   {204, ``},
	})
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	sc, err := c.CreateSchedule(ctx, CreateScheduleRequest{Agent: "digest", Every: "30s",
		Input: []forge.Input{{Type: forge.InputMessage, Text: "summarize"}}})
	if err != nil || sc.ID != "sch_1" || sc.Every != "30s" {
		t.Fatalf("%+v %v", sc, err)
	}
	if sc, err = c.GetSchedule(ctx, "sch_1"); err != nil || sc.Agent != "digest" {
		t.Fatalf("%+v %v", sc, err)
	}
	if p, err := c.ListSchedules(ctx, ListOptions{}); err != nil || len(p.Data) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	yes := true
	if sc, err = c.PatchSchedule(ctx, "sch_1", PatchScheduleRequest{Paused: &yes}); err != nil || !sc.Paused {
		t.Fatalf("%+v %v", sc, err)
	}
	runs, err := c.ListScheduleRuns(ctx, "sch_1", ListOptions{Limit: 5})
	if err != nil || len(runs.Data) != 1 || *runs.Data[0].TurnID != "turn_1" || runs.NextCursor != "c" {
		t.Fatalf("%+v %v", runs, err)
	}
	if err := c.DeleteSchedule(ctx, "sch_1"); err != nil {
		t.Fatal(err)
	}
	r := seen()
	if r[0].Body != `{"agent":"digest","every":"30s","input":[{"type":"message","text":"summarize"}]}` {
		t.Errorf("create body %s", r[0].Body)
	}
	if r[3].Body != `{"paused":true}` || r[3].Method != "PATCH" {
		t.Errorf("patch %s %s", r[3].Method, r[3].Body)
	}
	if r[4].Query != "limit=5" {
		t.Errorf("runs query %q", r[4].Query)
	}
}
