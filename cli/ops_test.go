package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// waitUntil polls cond until it holds (20 s at most).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// cliOK runs forge with args against url with key k1 and fails on an error.
func cliOK(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, err := runCLICombined(t, append(args, "--server", url, "--api-key", "k1")...)
	if err != nil {
		t.Fatalf("forge %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestWebhooksCommands: create (the secret printed once), list, the
// deliveries of a receiver that answers 503 (status, code, error, next
// retry), delete; another tenant's webhook and a wrong id are refused.
func TestWebhooksCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(receiver.Close)
	url := startServer(t, func(o *serveOptions) { o.apiKeys = "k1=acme,k2=globex"; o.allowPrivateWebhooks = true })

	out := cliOK(t, url, "webhooks", "create", receiver.URL+"/hook", "--event", "turn.done", "--description", "ops\x1b[31m bot")
	m := regexp.MustCompile(`^created webhook (wh_\S+) for ` + regexp.QuoteMeta(receiver.URL) + `/hook \(turn.done\)\nsecret \(shown only now\): (whsec_\S+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create printed %q", out)
	}
	id := m[1]
	out = cliOK(t, url, "webhooks", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], id) ||
		!strings.Contains(lines[1], receiver.URL+"/hook") || strings.Contains(out, "\x1b") || strings.Contains(out, m[2]) {
		t.Fatalf("list printed %q", out)
	}
	var listed []forge.Webhook
	if err := json.Unmarshal([]byte(cliOK(t, url, "webhooks", "list", "--json")), &listed); err != nil || len(listed) != 1 || listed[0].ID != id {
		t.Fatalf("list --json: %v %+v", err, listed)
	}
	if out := cliOK(t, url, "webhooks", "deliveries", id); out != "no deliveries\n" {
		t.Fatalf("deliveries before any event: %q", out)
	}

	// A turn's end is delivered; the receiver refuses it.
	c, err := client.New(url, client.WithAPIKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CreateAgent(ctx, &forge.Agent{Name: "echo", Model: "scripted/echo"}); err != nil {
		t.Fatal(err)
	}
	ses, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTurn(ctx, ses.ID, client.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "an attempt", func() bool {
		p, err := c.ListWebhookDeliveries(ctx, id, client.ListOptions{})
		return err == nil && len(p.Data) == 1 && p.Data[0].Attempts > 0
	})
	out = cliOK(t, url, "webhooks", "deliveries", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("deliveries printed %q", out)
	}
	f := strings.Fields(lines[1])
	// ID STATUS EVENT SESSION ATTEMPTS CODE LAST(2 fields) NEXT(2 fields) ERROR...
	if len(f) < 11 || f[1] != "pending" || f[2] != "turn.done" || f[3] != ses.ID || f[5] != "503" || f[8] == "-" || !strings.Contains(lines[1], "503") {
		t.Fatalf("delivery line %q", lines[1])
	}

	// Another tenant does not see it, nor delete it.
	if out, err := runCLICombined(t, "webhooks", "list", "--server", url, "--api-key", "k2"); err != nil || out != "no webhooks\n" {
		t.Fatalf("another tenant lists %q %v", out, err)
	}
	for _, args := range [][]string{{"webhooks", "delete", id}, {"webhooks", "deliveries", id}, {"webhooks", "delete", "wh_nope"}} {
		key := "k2"
		if args[2] == "wh_nope" {
			key = "k1"
		}
		if _, err := runCLICombined(t, append(args, "--server", url, "--api-key", key)...); err == nil || !strings.Contains(err.Error(), "not_found") {
			t.Errorf("%v with %s: %v", args, key, err)
		}
	}
	if _, err := runCLICombined(t, "webhooks", "create", receiver.URL, "--event", "turn.nope", "--server", url, "--api-key", "k1"); err == nil ||
		!strings.Contains(err.Error(), "invalid_request") {
		t.Errorf("an unknown event: %v", err)
	}
	if _, err := runCLICombined(t, "webhooks", "create", "--server", url); err == nil {
		t.Error("create without a URL")
	}
	if out := cliOK(t, url, "webhooks", "delete", id); out != "deleted webhook "+id+"\n" {
		t.Fatalf("delete printed %q", out)
	}
	if out := cliOK(t, url, "webhooks", "list"); out != "no webhooks\n" {
		t.Fatalf("after delete: %q", out)
	}
}

// TestSchedulesCommands: create (cron in a time zone, and every), list,
// pause and resume (the API agrees), runs with their turns, delete; bad
// flags and another tenant's schedule are refused.
func TestSchedulesCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	t.Parallel()
	url := startServer(t, func(o *serveOptions) { o.apiKeys = "k1=acme,k2=globex" })
	c, err := client.New(url, client.WithAPIKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CreateAgent(ctx, &forge.Agent{Name: "echo", Model: "scripted/echo"}); err != nil {
		t.Fatal(err)
	}
	idOf := func(out string) string {
		m := regexp.MustCompile(`^created schedule (\S+) of echo: `).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("create printed %q", out)
		}
		return m[1]
	}
	out := cliOK(t, url, "schedules", "create", "echo", "--cron", "0 8 * * 1-5", "--timezone", "Europe/Paris", "--message", "digest", "--paused")
	if !strings.Contains(out, "cron 0 8 * * 1-5 (Europe/Paris), paused, next run -") {
		t.Fatalf("create printed %q", out)
	}
	cronID := idOf(out)
	out = cliOK(t, url, "schedules", "create", "echo", "--every", "1s", "--message", "tick")
	if !strings.Contains(out, "every 1s, active, next run 2") {
		t.Fatalf("create printed %q", out)
	}
	everyID := idOf(out)

	out = cliOK(t, url, "schedules", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(out, cronID) || !strings.Contains(out, everyID) ||
		!strings.Contains(out, "new each run") {
		t.Fatalf("list printed %q", out)
	}
	var listed []forge.Schedule
	if err := json.Unmarshal([]byte(cliOK(t, url, "schedules", "list", "--json")), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("list --json: %v %+v", err, listed)
	}

	// Runs, each with its turn.
	waitUntil(t, "a run with its turn", func() bool {
		p, err := c.ListScheduleRuns(ctx, everyID, client.ListOptions{})
		return err == nil && len(p.Data) > 0 && p.Data[0].TurnID != nil
	})
	out = cliOK(t, url, "schedules", "pause", everyID)
	if out != "schedule "+everyID+" is paused (next run -)\n" {
		t.Fatalf("pause printed %q", out)
	}
	if s, err := c.GetSchedule(ctx, everyID); err != nil || !s.Paused {
		t.Fatalf("after pause: %v %+v", err, s)
	}
	runs, err := c.ListScheduleRuns(ctx, everyID, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out = cliOK(t, url, "schedules", "runs", everyID, "--limit", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// A slot claimed as the pause landed may add a run after the read.
	if len(lines) < len(runs.Data)+1 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("runs printed %q (%d runs)", out, len(runs.Data))
	}
	r := runs.Data[0]
	if !strings.Contains(out, r.ID) || !strings.Contains(out, *r.TurnID) || !strings.Contains(out, *r.SessionID) || !strings.Contains(out, "started") {
		t.Fatalf("runs printed %q, want %+v", out, r)
	}
	if out := cliOK(t, url, "schedules", "runs", cronID); out != "no runs\n" {
		t.Fatalf("a paused cron's runs: %q", out)
	}
	out = cliOK(t, url, "schedules", "resume", cronID)
	if !strings.HasPrefix(out, "schedule "+cronID+" is active (next run 2") {
		t.Fatalf("resume printed %q", out)
	}
	if s, err := c.GetSchedule(ctx, cronID); err != nil || s.Paused {
		t.Fatalf("after resume: %v %+v", err, s)
	}

	// Refused.
	for _, tc := range []struct {
		args []string
		key  string
		want string
	}{
		{[]string{"schedules", "create", "echo", "--message", "x"}, "k1", "give one of --cron"},
		{[]string{"schedules", "create", "echo", "--every", "1s", "--cron", "* * * * *", "--message", "x"}, "k1", "give one of --cron"},
		{[]string{"schedules", "create", "echo", "--every", "1s"}, "k1", "--message is required"},
		{[]string{"schedules", "create", "echo", "--every", "10ms", "--message", "x"}, "k1", "invalid_request"},
		{[]string{"schedules", "create", "echo", "--cron", "nope", "--message", "x"}, "k1", "invalid_request"},
		{[]string{"schedules", "create", "echo", "--cron", "* * * * *", "--timezone", "Mars/Olympus", "--message", "x"}, "k1", "invalid_request"},
		{[]string{"schedules", "create", "nobody", "--every", "1s", "--message", "x"}, "k1", "not_found"},
		{[]string{"schedules", "pause", everyID}, "k2", "not_found"},
		{[]string{"schedules", "runs", everyID}, "k2", "not_found"},
		{[]string{"schedules", "delete", everyID}, "k2", "not_found"},
		{[]string{"schedules", "resume", "sch_nope"}, "k1", "not_found"},
	} {
		if _, err := runCLICombined(t, append(tc.args, "--server", url, "--api-key", tc.key)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v (%s): %v, want %q", tc.args, tc.key, err, tc.want)
		}
	}
	for _, id := range []string{cronID, everyID} {
		if out := cliOK(t, url, "schedules", "delete", id); out != "deleted schedule "+id+"\n" {
			t.Fatalf("delete printed %q", out)
		}
	}
	if out := cliOK(t, url, "schedules", "list"); out != "no schedules\n" {
		t.Fatalf("after delete: %q", out)
	}
}

// TestOpsCommandsServerDown: the same message as the other client commands.
func TestOpsCommandsServerDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	for _, args := range [][]string{{"webhooks", "list"}, {"webhooks", "deliveries", "wh_1"}, {"schedules", "list"}, {"schedules", "pause", "sch_1"}} {
		_, err := runCLICombined(t, append(args, "--server", url)...)
		if want := "cannot reach the Forge server at " + url; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%v: err = %v, want %s...", args, err, want)
		}
	}
}
