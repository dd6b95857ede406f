package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/sandbox"
)

// TestServerFiresSchedules: a server runs its scheduler from the start:
// an every-1s schedule on the echo model gets runs whose turns end done,
// and Stop ends the scheduler with the rest.
func TestServerFiresSchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{DB: filepath.Join(t.TempDir(), "forge.db"), Logger: slog.New(slog.DiscardHandler),
		Sandbox: sandbox.Options{UseBwrap: sandbox.BwrapOff}, ScheduleInterval: 100 * time.Millisecond}
	srv, call := startForTest(t, cfg)
	call("POST", "/v1/agents", `{"name":"digest","model":"scripted/echo"}`, nil)
	var sc forge.Schedule
	call("POST", "/v1/schedules", `{"agent":"digest","every":"1s","input":[{"type":"message","text":"tick"}]}`, &sc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var runs struct{ Data []forge.ScheduleRun }
		call("GET", "/v1/schedules/"+sc.ID+"/runs", "", &runs)
		if len(runs.Data) > 0 && runs.Data[0].TurnStatus == forge.TurnDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run done: %+v", runs.Data)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
