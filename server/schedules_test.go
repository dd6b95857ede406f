package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
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
	srv, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	call := func(method, path, body string, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
	}
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
