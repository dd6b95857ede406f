package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/scheduler"
)

func digestBody(extra map[string]any) map[string]any {
	b := map[string]any{"agent": "digest", "every": "30s",
		"input": []any{map[string]any{"type": "message", "text": "summarize"}}}
	for k, v := range extra {
		if v == nil {
			delete(b, k)
			continue
		}
		b[k] = v
	}
	return b
}

// TestScheduleValidation: every malformed schedule is a 400 with a
// sentence naming the problem; an unknown agent is 404 (as for sessions).
func TestScheduleValidation(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest")
	forum := map[string]any{}
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &forum)
	other := s.createSession("digest")
	s.createAgent("other")
	otherAgents := s.createSession("other")
	msg := []any{map[string]any{"type": "message", "text": "go"}}
	for _, c := range []struct {
		name   string
		body   any
		status int
		says   string
	}{
		{"both cron and every", digestBody(map[string]any{"cron": "* * * * *"}), 400, "exclude each other"},
		{"neither", digestBody(map[string]any{"every": nil}), 400, "needs cron"},
		{"bad cron", digestBody(map[string]any{"every": nil, "cron": "0 25 * * *"}), 400, "five-field cron"},
		{"six fields", digestBody(map[string]any{"every": nil, "cron": "0 0 8 * * *"}), 400, "five-field cron"},
		{"unknown timezone", digestBody(map[string]any{"every": nil, "cron": "0 8 * * *", "timezone": "Europe/Atlantis"}), 400, "IANA zone"},
		{"empty timezone", digestBody(map[string]any{"timezone": ""}), 400, "IANA zone"},
		{"every under 1s", digestBody(map[string]any{"every": "500ms"}), 400, "at least 1s"},
		{"every not a duration", digestBody(map[string]any{"every": "daily"}), 400, "not a duration"},
		{"every empty", digestBody(map[string]any{"every": ""}), 400, "every must not be empty"},
		{"every a number", digestBody(map[string]any{"every": 30}), 400, "every"},
		{"bad catch_up", digestBody(map[string]any{"catch_up": "all"}), 400, "catch_up must be once or skip"},
		{"no agent", digestBody(map[string]any{"agent": nil}), 400, "agent is required"},
		{"unknown agent", digestBody(map[string]any{"agent": "ghost"}), 404, `ghost`},
		{"no input", digestBody(map[string]any{"input": nil}), 400, "exactly one item"},
		{"two items", digestBody(map[string]any{"input": append(msg, msg...)}), 400, "exactly one item"},
		{"blank text", digestBody(map[string]any{"input": []any{map[string]any{"type": "message", "text": " "}}}), 400, "must not be blank"},
		{"a resolution", digestBody(map[string]any{"input": []any{map[string]any{"type": "approval", "call_id": "call_1", "approved": true}}}), 400, "must be message"},
		{"attachments", digestBody(map[string]any{"input": []any{map[string]any{"type": "message", "text": "x", "files": []any{map[string]any{"file_id": "file_1"}}}}}), 400, "attachments"},
		{"unknown field", digestBody(map[string]any{"when": "now"}), 400, "when"},
		{"unknown session", digestBody(map[string]any{"session_id": "ses_nope"}), 404, "not found"},
		{"empty session", digestBody(map[string]any{"session_id": ""}), 400, "session_id must be a session id"},
		{"a forum", digestBody(map[string]any{"session_id": forum["id"]}), 400, "direct sessions"},
		{"another agent's session", digestBody(map[string]any{"session_id": otherAgents.ID}), 400, "talks to agent"},
		{"not an object", `[1]`, 400, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := s.do(req{method: "POST", path: "/v1/schedules", body: c.body})
			if a.status != c.status || !strings.Contains(string(a.body), c.says) {
				t.Fatalf("got %s, want %d saying %q", a, c.status, c.says)
			}
		})
	}
	var list struct{ Data []forge.Schedule }
	s.call("GET", "/v1/schedules", nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("refused schedules were stored: %+v", list.Data)
	}
	// And a valid one on a session of its agent.
	var sc forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(map[string]any{"session_id": other.ID}), 201, &sc)
	if sc.SessionID == nil || *sc.SessionID != other.ID {
		t.Fatalf("schedule %+v", sc)
	}
	// PATCH refusals.
	for _, c := range []struct {
		body any
		says string
	}{
		{map[string]any{"cron": "* * * * *", "every": "1m"}, "exclude each other"},
		{map[string]any{"every": "1ms"}, "at least 1s"},
		{map[string]any{"cron": "nope"}, "five-field cron"},
		{map[string]any{"timezone": "Nowhere/Else"}, "IANA zone"},
		{map[string]any{"catch_up": "twice"}, "catch_up"},
		{map[string]any{"input": []any{}}, "exactly one item"},
		{map[string]any{"agent": "other"}, "agent"},
		{map[string]any{"session_id": nil}, "session_id"},
		{map[string]any{"paused": "yes"}, "paused"},
	} {
		a := s.do(req{method: "PATCH", path: "/v1/schedules/" + sc.ID, body: c.body})
		if a.status != 400 || !strings.Contains(string(a.body), c.says) {
			t.Errorf("PATCH %v: %s, want 400 saying %q", c.body, a, c.says)
		}
	}
	var got forge.Schedule
	s.call("GET", "/v1/schedules/"+sc.ID, nil, 200, &got)
	if got.Every != "30s" || got.Paused || !got.NextRunAt.Equal(sc.NextRunAt) {
		t.Fatalf("refused patches changed the schedule: %+v", got)
	}
}

// TestScheduleCRUD: create (defaults: UTC, catch_up once, next slot),
// list with pages, patch (cadence, pause, resume), delete.
func TestScheduleCRUD(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest")
	before := time.Now().UTC()
	var sc forge.Schedule
	a := s.call("POST", "/v1/schedules", map[string]any{"agent": "digest", "cron": "0 8 * * 1-5", "timezone": "Europe/Paris",
		"input": []any{map[string]any{"type": "message", "text": "morning digest"}}, "session_id": nil}, 201, &sc)
	if !strings.HasPrefix(sc.ID, forge.PrefixSchedule) || sc.CatchUp != forge.CatchUpOnce || sc.Paused || sc.SessionID != nil ||
		a.header.Get("Location") != "/v1/schedules/"+sc.ID {
		t.Fatalf("created %s", a)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	local := sc.NextRunAt.In(paris)
	if !sc.NextRunAt.After(before) || local.Hour() != 8 || local.Minute() != 0 || local.Weekday() == time.Saturday ||
		local.Weekday() == time.Sunday || sc.NextRunAt.Sub(before) > 4*24*time.Hour {
		t.Fatalf("next_run_at %s (%s in Paris)", sc.NextRunAt, local)
	}
	var raw map[string]any
	_ = json.Unmarshal(a.body, &raw)
	for _, k := range []string{"id", "agent", "cron", "timezone", "input", "session_id", "catch_up", "paused", "next_run_at", "created_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("the schedule has no %q: %s", k, a.body)
		}
	}
	var every forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(map[string]any{"every": "90s", "catch_up": "skip", "paused": true}), 201, &every)
	if every.Timezone != "UTC" || every.CatchUp != forge.CatchUpSkip || !every.Paused ||
		every.NextRunAt.Sub(every.CreatedAt) != 90*time.Second {
		t.Fatalf("interval schedule %+v", every)
	}
	s.call("POST", "/v1/schedules", digestBody(nil), 201, nil)

	var page struct {
		Data       []forge.Schedule
		NextCursor *string `json:"next_cursor"`
	}
	s.call("GET", "/v1/schedules?limit=2", nil, 200, &page)
	if len(page.Data) != 2 || page.Data[0].ID != sc.ID || page.NextCursor == nil {
		t.Fatalf("first page %+v", page)
	}
	s.call("GET", "/v1/schedules?limit=2&cursor="+*page.NextCursor, nil, 200, &page)
	if len(page.Data) != 1 || page.NextCursor != nil {
		t.Fatalf("second page %+v", page)
	}

	// Resume: next_run_at from now. A new cadence: likewise.
	var patched forge.Schedule
	s.call("PATCH", "/v1/schedules/"+every.ID, map[string]any{"paused": false}, 200, &patched)
	if patched.Paused || !patched.NextRunAt.After(every.NextRunAt.Add(-time.Millisecond)) {
		t.Fatalf("resumed %+v", patched)
	}
	s.call("PATCH", "/v1/schedules/"+sc.ID, map[string]any{"every": "1h", "input": []any{map[string]any{"type": "message", "text": "hourly"}}}, 200, &patched)
	if patched.Cron != "" || patched.Every != "1h" || patched.Input[0].Text != "hourly" ||
		patched.NextRunAt.Sub(patched.UpdatedAt) != time.Hour {
		t.Fatalf("patched %+v", patched)
	}
	patched = forge.Schedule{}
	s.call("PATCH", "/v1/schedules/"+sc.ID, map[string]any{"cron": "30 6 * * *", "timezone": "America/New_York", "paused": true}, 200, &patched)
	ny, _ := time.LoadLocation("America/New_York")
	if patched.Every != "" || !patched.Paused || patched.NextRunAt.In(ny).Hour() != 6 || patched.NextRunAt.In(ny).Minute() != 30 {
		t.Fatalf("patched %+v", patched)
	}
	var got forge.Schedule
	s.call("GET", "/v1/schedules/"+sc.ID, nil, 200, &got)
	if got.Cron != "30 6 * * *" || got.Timezone != "America/New_York" || !got.Paused || !got.NextRunAt.Equal(patched.NextRunAt) {
		t.Fatalf("stored %+v", got)
	}
	var runs struct{ Data []forge.ScheduleRun }
	s.call("GET", "/v1/schedules/"+sc.ID+"/runs", nil, 200, &runs)
	if len(runs.Data) != 0 {
		t.Fatalf("runs %+v", runs)
	}
	s.call("DELETE", "/v1/schedules/"+sc.ID, nil, 204, nil)
	for _, r := range []req{
		{method: "GET", path: "/v1/schedules/" + sc.ID},
		{method: "DELETE", path: "/v1/schedules/" + sc.ID},
		{method: "GET", path: "/v1/schedules/" + sc.ID + "/runs"},
		{method: "PATCH", path: "/v1/schedules/" + sc.ID, body: map[string]any{"paused": false}},
	} {
		if a := s.do(r); a.status != 404 || a.errCode() != "not_found" {
			t.Errorf("%s %s after delete: %s", r.method, r.path, a)
		}
	}
}

// TestSchedulesOfAnotherTenantAreNotFound: another tenant's schedule, and
// another tenant's session for a schedule, are not_found.
func TestSchedulesOfAnotherTenantAreNotFound(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"ka": "acme", "kb": "globex"} })
	s.key = "ka"
	s.createAgent("digest")
	ses := s.createSession("digest")
	var sc forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(nil), 201, &sc)
	s.key = "kb"
	s.createAgent("digest")
	for _, r := range []req{
		{method: "GET", path: "/v1/schedules/" + sc.ID},
		{method: "PATCH", path: "/v1/schedules/" + sc.ID, body: map[string]any{"paused": true}},
		{method: "DELETE", path: "/v1/schedules/" + sc.ID},
		{method: "GET", path: "/v1/schedules/" + sc.ID + "/runs"},
		{method: "POST", path: "/v1/schedules", body: digestBody(map[string]any{"session_id": ses.ID})},
	} {
		if a := s.do(r); a.status != 404 || a.errCode() != "not_found" {
			t.Fatalf("%s %s as another tenant: %s", r.method, r.path, a)
		}
	}
	var list struct{ Data []forge.Schedule }
	s.call("GET", "/v1/schedules", nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("another tenant lists %+v", list.Data)
	}
	s.key = "ka"
	var got forge.Schedule
	s.call("GET", "/v1/schedules/"+sc.ID, nil, 200, &got)
	if got.Paused {
		t.Fatal("another tenant paused the schedule")
	}
}

// startScheduler runs a scheduler on the stack's store and engine, as
// server.New does, polling every 100 ms.
func (s *stack) startScheduler() {
	s.t.Helper()
	ids := forge.NewULIDGen(nil)
	sch := scheduler.New(scheduler.Config{Store: s.store, Interval: 100 * time.Millisecond, IDs: ids,
		Runner: &scheduler.EngineRunner{Store: s.store, Engine: s.eng, Clock: forge.SystemClock{}, IDs: ids}})
	sch.Start()
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sch.Close(ctx); err != nil {
			s.t.Error(err)
		}
	})
}

type runList struct {
	Data []forge.ScheduleRun
}

// waitRuns polls the schedule's runs until ok holds for them.
func (s *stack) waitRuns(id string, ok func([]forge.ScheduleRun) bool) []forge.ScheduleRun {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var runs runList
		s.call("GET", "/v1/schedules/"+id+"/runs", nil, 200, &runs)
		if ok(runs.Data) {
			return runs.Data
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("runs of %s: %+v", id, runs.Data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestScheduleFiresTurns: an every-2s schedule on the echo model runs
// ordinary turns, each in a new session, marked with the schedule's
// trigger; its runs list distinct slots, 2 s apart, each with its turn
// done. Paused, it fires no more.
func TestScheduleFiresTurns(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest")
	s.startScheduler()
	var sc forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(map[string]any{"every": "2s"}), 201, &sc)
	done := func(runs []forge.ScheduleRun) int {
		n := 0
		for _, r := range runs {
			if r.TurnStatus == forge.TurnDone {
				n++
			}
		}
		return n
	}
	runs := s.waitRuns(sc.ID, func(r []forge.ScheduleRun) bool { return done(r) >= 2 })
	seen := map[string]bool{}
	for i, r := range runs {
		if seen[r.Slot.String()] {
			t.Fatalf("slot %s fired twice: %+v", r.Slot, runs)
		}
		seen[r.Slot.String()] = true
		if i > 0 && (r.Slot.Sub(runs[i-1].Slot)%(2*time.Second) != 0 || !r.Slot.After(runs[i-1].Slot)) {
			t.Fatalf("slots %s then %s: not on the 2s cadence", runs[i-1].Slot, r.Slot)
		}
		if r.Status != forge.RunStarted || r.TurnID == nil || r.SessionID == nil || r.ScheduleID != sc.ID {
			t.Fatalf("run %d: %+v", i, r)
		}
		if r.Slot.Sub(sc.CreatedAt)%(2*time.Second) != 0 {
			t.Fatalf("slot %s is not on the cadence from %s", r.Slot, sc.CreatedAt)
		}
	}
	if *runs[0].SessionID == *runs[1].SessionID {
		t.Fatal("two runs of a schedule without session_id share a session")
	}
	var turn forge.Turn
	s.call("GET", "/v1/sessions/"+*runs[0].SessionID+"/turns/"+*runs[0].TurnID, nil, 200, &turn)
	if turn.Trigger == nil || turn.Trigger.Type != forge.TriggerSchedule || turn.Trigger.ScheduleID != sc.ID ||
		turn.Output == nil || turn.Output.Text != "echo: summarize" {
		t.Fatalf("the run's turn %+v (trigger %+v)", turn, turn.Trigger)
	}
	var ses forge.Session
	s.call("GET", "/v1/sessions/"+*runs[0].SessionID, nil, 200, &ses)
	if ses.Agent != "digest" || !strings.Contains(string(ses.Metadata), sc.ID) {
		t.Fatalf("the run's session %+v", ses)
	}

	// Paused: no run after the pause answered, over two more slots.
	var paused forge.Schedule
	s.call("PATCH", "/v1/schedules/"+sc.ID, map[string]any{"paused": true}, 200, &paused)
	var after runList
	s.call("GET", "/v1/schedules/"+sc.ID+"/runs", nil, 200, &after)
	until := paused.NextRunAt.Add(4500 * time.Millisecond)
	for time.Now().Before(until) {
		time.Sleep(200 * time.Millisecond)
	}
	var later runList
	s.call("GET", "/v1/schedules/"+sc.ID+"/runs", nil, 200, &later)
	if len(later.Data) != len(after.Data) {
		t.Fatalf("a paused schedule fired: %d runs, then %d", len(after.Data), len(later.Data))
	}
}

// TestScheduleOnASession: a schedule with session_id runs each turn on
// that session, one after the other.
func TestScheduleOnASession(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest")
	ses := s.createSession("digest")
	s.startScheduler()
	var sc forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(map[string]any{"every": "1s", "session_id": ses.ID}), 201, &sc)
	runs := s.waitRuns(sc.ID, func(r []forge.ScheduleRun) bool {
		n := 0
		for _, x := range r {
			if x.TurnStatus == forge.TurnDone {
				n++
			}
		}
		return n >= 2
	})
	s.call("DELETE", "/v1/schedules/"+sc.ID, nil, 204, nil)
	for _, r := range runs {
		if r.Status == forge.RunStarted && (r.SessionID == nil || *r.SessionID != ses.ID) {
			t.Fatalf("run on another session: %+v", r)
		}
	}
	var turns struct{ Data []forge.Turn }
	s.call("GET", "/v1/sessions/"+ses.ID+"/turns", nil, 200, &turns)
	if len(turns.Data) < 2 || turns.Data[1].PreviousTurnID == nil || *turns.Data[1].PreviousTurnID != turns.Data[0].ID {
		t.Fatalf("turns of the session %+v", turns.Data)
	}
}

// TestScheduleOfADeletedAgentPauses: once its agent is deleted, a run is
// recorded failed with the reason and the schedule is paused.
func TestScheduleOfADeletedAgentPauses(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest")
	var sc forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(map[string]any{"every": "1s"}), 201, &sc)
	s.call("DELETE", "/v1/agents/digest", nil, 204, nil)
	s.startScheduler()
	runs := s.waitRuns(sc.ID, func(r []forge.ScheduleRun) bool { return len(r) > 0 && r[0].Status != forge.RunPending })
	if runs[0].Status != forge.RunFailed || !strings.Contains(runs[0].Error, "digest") || runs[0].TurnID != nil {
		t.Fatalf("run %+v", runs[0])
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got forge.Schedule
		s.call("GET", "/v1/schedules/"+sc.ID, nil, 200, &got)
		if got.Paused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the schedule of a deleted agent was not paused")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestScheduleOnABusySessionEnqueues: a run on a session whose turn still
// runs is enqueued behind it (if_busy: enqueue) and starts once it ends.
func TestScheduleOnABusySessionEnqueues(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest", scripted.Step{Hang: true})
	ses := s.createSession("digest")
	base := "/v1/sessions/" + ses.ID
	var running forge.Turn
	s.call("POST", base+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "one"}}, "background": true}, 202, &running)
	s.startScheduler()
	var sc forge.Schedule
	s.call("POST", "/v1/schedules", digestBody(map[string]any{"every": "1s", "session_id": ses.ID}), 201, &sc)
	runs := s.waitRuns(sc.ID, func(r []forge.ScheduleRun) bool { return len(r) > 0 && r[0].Status != forge.RunPending })
	if runs[0].Status != forge.RunStarted || runs[0].TurnID == nil || runs[0].TurnStatus != forge.TurnQueued {
		t.Fatalf("run on a busy session %+v", runs[0])
	}
	s.call("POST", base+"/cancel", map[string]any{"turn_id": running.ID}, 200, nil)
	runs = s.waitRuns(sc.ID, func(r []forge.ScheduleRun) bool { return len(r) > 0 && r[0].TurnStatus == forge.TurnRunning })
	var turn forge.Turn
	s.call("GET", base+"/turns/"+*runs[0].TurnID, nil, 200, &turn)
	if turn.PreviousTurnID == nil || *turn.PreviousTurnID != running.ID || turn.Trigger == nil || turn.Trigger.ScheduleID != sc.ID {
		t.Fatalf("the run's turn %+v", turn)
	}
	s.call("POST", base+"/cancel", map[string]any{"turn_id": turn.ID}, 200, nil)
}

// TestRunLeftPendingIsFiredOnce: a replica that claimed a slot and
// stopped before recording the turn leaves its run pending; the scheduler
// fires it again, once: a run whose turn had not started gets one (in the
// session named after the run), and a run whose turn had started finds
// that turn rather than starting a second.
func TestRunLeftPendingIsFiredOnce(t *testing.T) {
	s := newStack(t)
	s.createAgent("digest")
	ss := s.store.(forge.ScheduleStore)
	ctx := context.Background()
	ids := forge.NewULIDGen(nil)
	runner := &scheduler.EngineRunner{Store: s.store, Engine: s.eng, Clock: forge.SystemClock{}, IDs: ids}
	abandoned := func() (*forge.Schedule, *forge.ScheduleRun) {
		var sc forge.Schedule
		s.call("POST", "/v1/schedules", digestBody(map[string]any{"every": "1h"}), 201, &sc)
		run := &forge.ScheduleRun{ID: ids.New(forge.PrefixScheduleRun), Tenant: forge.DefaultTenant, ScheduleID: sc.ID,
			Slot: sc.NextRunAt, FiredAt: time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond), Status: forge.RunPending}
		ok, err := ss.ClaimScheduleSlot(ctx, &forge.ScheduleClaim{Tenant: forge.DefaultTenant, ScheduleID: sc.ID, Slot: sc.NextRunAt,
			Next: sc.NextRunAt.Add(time.Hour), Run: run})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		return &sc, run
	}
	// Stopped before anything started.
	before, beforeRun := abandoned()
	// Stopped after the turn started, before it was recorded.
	after, afterRun := abandoned()
	sid, err := runner.NewSession(ctx, forge.DefaultTenant, "digest", after.ID, afterRun.ID)
	if err != nil {
		t.Fatal(err)
	}
	started, err := runner.StartTurn(ctx, forge.DefaultTenant, sid, after.ID, afterRun.ID, after.Input)
	if err != nil {
		t.Fatal(err)
	}

	s.startScheduler()
	done := func(r []forge.ScheduleRun) bool { return len(r) == 1 && r[0].Status == forge.RunStarted }
	b := s.waitRuns(before.ID, done)[0]
	if b.ID != beforeRun.ID || b.TurnID == nil || b.SessionID == nil ||
		*b.SessionID != forge.PrefixSession+strings.TrimPrefix(beforeRun.ID, forge.PrefixScheduleRun) {
		t.Fatalf("the run left before its turn %+v", b)
	}
	a := s.waitRuns(after.ID, done)[0]
	if a.TurnID == nil || *a.TurnID != started.ID || a.SessionID == nil || *a.SessionID != sid {
		t.Fatalf("the run left after its turn %+v, want turn %s", a, started.ID)
	}
	var turns struct{ Data []forge.Turn }
	s.call("GET", "/v1/sessions/"+sid+"/turns", nil, 200, &turns)
	if len(turns.Data) != 1 {
		t.Fatalf("%d turns in the run's session, want 1", len(turns.Data))
	}
	var sessions struct{ Data []forge.Session }
	s.call("GET", "/v1/sessions?metadata.schedule_id="+after.ID, nil, 200, &sessions)
	if len(sessions.Data) != 1 {
		t.Fatalf("%d sessions for the run, want 1", len(sessions.Data))
	}
}
