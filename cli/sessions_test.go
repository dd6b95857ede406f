package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// runCLI runs the forge command line with args and returns its output and
// error.
// runCLICombined runs forge with args and returns stdout and stderr as
// one stream, in the order they were written.
func runCLICombined(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// showFixture is a server with three sessions: one whose turn called a tool
// (reasoning, a long tool output, hostile text), one paused for an approval
// and then resumed, and one whose model failed.
type showFixture struct {
	url                          string
	toolSes, approvalSes, errSes string
}

func newShowFixture(t *testing.T, opts ...func(*serveOptions)) *showFixture {
	t.Helper()
	url := startServer(t, opts...)
	c := testClient(t, url)
	if len(opts) > 0 {
		var err error
		c, err = client.New(url, client.WithAPIKey("k1"))
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	var lines []string
	for i := 1; i <= 20; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	long, _ := json.Marshal(strings.Join(lines, "\n"))
	agents := []forge.Agent{
		{
			Name: "shower", Model: "scripted/shower", Tools: []forge.ToolSpec{{Name: "echo", BuiltIn: true}},
			ModelParams: forge.ModelParams{Script: json.RawMessage(`[
				{"reasoning": "The user wants an echo.\nOf twenty lines.", "text": "Let me echo.",
				 "tool_calls": [{"name": "echo", "arguments": {"text": ` + string(long) + `}}],
				 "usage": {"input_tokens": 100, "output_tokens": 10}},
				{"text": "All done. \u001b[31mred\u001b[0m\rgone", "usage": {"input_tokens": 150, "output_tokens": 5}}]`)},
		},
		{
			Name: "asker", Model: "scripted/asker", Tools: []forge.ToolSpec{{Name: "echo", BuiltIn: true}},
			Approval: map[string]string{"echo": forge.PolicyAsk},
			ModelParams: forge.ModelParams{Script: json.RawMessage(`[
				{"tool_calls": [{"name": "echo", "arguments": {"text": "approved!"}}]},
				{"text": "The tool has answered."}]`)},
		},
		{
			Name: "failer", Model: "scripted/failer",
			ModelParams: forge.ModelParams{Script: json.RawMessage(`[{"text": "partial", "error": "model exploded", "status": 400}]`)},
		},
	}
	for i := range agents {
		if _, err := c.CreateAgent(ctx, &agents[i]); err != nil {
			t.Fatal(err)
		}
	}
	f := &showFixture{url: url}
	turn := func(agent, text string) (string, *forge.Turn) {
		s, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := c.CreateTurn(ctx, s.ID, client.TurnRequest{Input: client.Message(text)})
		if err != nil {
			t.Fatal(err)
		}
		return s.ID, tr
	}
	f.toolSes, _ = turn("shower", "please echo")
	var paused *forge.Turn
	f.approvalSes, paused = turn("asker", "echo, with my blessing")
	if len(paused.RequiredActions) != 1 {
		t.Fatalf("the asker's turn does not wait for an approval: %+v", paused)
	}
	if _, err := c.CreateTurn(ctx, f.approvalSes, client.TurnRequest{Input: []forge.Input{
		client.Approve(paused.RequiredActions[0].CallID, true, "looks fine"),
	}}); err != nil {
		t.Fatal(err)
	}
	f.errSes, _ = turn("failer", "try")
	return f
}

// Output lines that vary from run to run.
var (
	reTime = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)
	reDur  = regexp.MustCompile(`, [0-9.]+(µs|ms|s)\)`)
	reID   = regexp.MustCompile(`\b(ses|turn|call|thr)_[0-9A-Za-z]+`)
)

func normalize(s string) string {
	s = reTime.ReplaceAllString(s, "TIME")
	s = reDur.ReplaceAllString(s, ", DUR)")
	return reID.ReplaceAllString(s, "${1}_ID")
}

func TestShowAndSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	t.Parallel()
	f := newShowFixture(t)

	t.Run("show a tool call", func(t *testing.T) {
		t.Parallel()
		out, err := runCLICombined(t, "show", f.toolSes, "--server", f.url)
		if err != nil {
			t.Fatal(err)
		}
		want := `session ses_ID  agent shower  (direct)
created TIME, updated TIME; 1 turn; usage 250 in / 15 out tokens

turn turn_ID  TIME  (done, 2 model calls, 250 in / 15 out tokens, DUR)
  user:
    please echo
  assistant (scripted/shower):
    thinking: The user wants an echo.
              Of twenty lines.
    Let me echo.
    [tool echo {"text":"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20"}]
      -> line 1
         line 2
         line 3
         line 4
         line 5
         line 6
         line 7
         line 8
         ... (12 more lines; --full shows all)
  assistant (scripted/shower):
    All done. \x1b[31mred\x1b[0m\x0dgone
`
		if got := normalize(out); got != want {
			t.Errorf("forge show printed:\n%s\nwant:\n%s", got, want)
		}
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("control characters reached the terminal: %q", out)
		}
		full, err := runCLICombined(t, "show", f.toolSes, "--server", f.url, "--full")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(full, "         line 20\n") || strings.Contains(full, "more lines") {
			t.Errorf("--full did not print the whole output:\n%s", full)
		}
	})

	t.Run("show an approval", func(t *testing.T) {
		t.Parallel()
		out, err := runCLICombined(t, "show", f.approvalSes, "--server", f.url)
		if err != nil {
			t.Fatal(err)
		}
		want := `session ses_ID  agent asker  (direct)
created TIME, updated TIME; 2 turns; usage `
		got := normalize(out)
		if !strings.HasPrefix(got, want) {
			t.Errorf("forge show printed:\n%s\nwant it to start with:\n%s", got, want)
		}
		for _, want := range []string{
			"  user:\n    echo, with my blessing\n  assistant (scripted/asker):\n    [tool echo {\"text\":\"approved!\"}] [pending]\n" +
				"  waiting for approval of echo {\"text\":\"approved!\"} (call call_ID)\n",
			"  input: call_ID approved: looks fine\n  tool:\n    [tool echo {\"text\":\"approved!\"}]\n      -> approved!\n" +
				"  assistant (scripted/asker):\n    The tool has answered.\n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("forge show printed:\n%s\nwant it to contain:\n%s", got, want)
			}
		}
	})

	t.Run("show an error", func(t *testing.T) {
		t.Parallel()
		out, err := runCLICombined(t, "show", f.errSes, "--server", f.url)
		if err != nil {
			t.Fatal(err)
		}
		got := normalize(out)
		for _, want := range []string{"(errored, 1 model call, ", "  assistant (scripted/failer):\n    partial\n  error: model_error: ", "model exploded"} {
			if !strings.Contains(got, want) {
				t.Errorf("forge show printed:\n%s\nwant it to contain %q", got, want)
			}
		}
	})

	t.Run("show json", func(t *testing.T) {
		t.Parallel()
		out, err := runCLICombined(t, "show", f.toolSes, "--server", f.url, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Session  forge.Session
			Turns    []forge.Turn
			Messages []forge.Message
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if v.Session.ID != f.toolSes || len(v.Turns) != 1 || len(v.Messages) != 3 {
			t.Errorf("session %s, %d turns, %d messages", v.Session.ID, len(v.Turns), len(v.Messages))
		}
	})

	t.Run("show unknown session", func(t *testing.T) {
		t.Parallel()
		_, err := runCLICombined(t, "show", "ses_nope", "--server", f.url)
		if err == nil || !strings.Contains(err.Error(), "not_found") {
			t.Errorf("err = %v", err)
		}
		// An id is one path segment, whatever it holds.
		for _, id := range []string{"../agents", "ses_1/turns", "ses_1?limit=1", "%2e%2e"} {
			if _, err := runCLICombined(t, "show", id, "--server", f.url); err == nil || !strings.Contains(err.Error(), "not_found") {
				t.Errorf("show %q: err = %v", id, err)
			}
		}
		if _, err := runCLICombined(t, "show", "--server", f.url); err == nil || !strings.Contains(err.Error(), "accepts 1 arg") {
			t.Errorf("show without a session: err = %v", err)
		}
	})

	t.Run("sessions", func(t *testing.T) {
		t.Parallel()
		out, err := runCLICombined(t, "sessions", "--server", f.url)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !regexp.MustCompile(`^ID +AGENT +KIND +UPDATED +USAGE +TITLE$`).MatchString(lines[0]) {
			t.Fatalf("forge sessions printed:\n%s", out)
		}
		// Most recently updated first.
		for i, id := range []string{f.errSes, f.approvalSes, f.toolSes} {
			if !strings.HasPrefix(lines[i+1], id+" ") {
				t.Errorf("line %d is not session %s:\n%s", i+1, id, out)
			}
		}
		if !strings.Contains(lines[3], " shower ") || !strings.Contains(lines[3], "250 in / 15 out tokens") {
			t.Errorf("the shower's line: %q", lines[3])
		}
		// Filtered by the server.
		out, err = runCLICombined(t, "sessions", "--server", f.url, "--agent", "asker", "--status", "idle")
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], f.approvalSes+" ") {
			t.Errorf("forge sessions --agent asker printed:\n%s", out)
		}
		if out, err := runCLICombined(t, "sessions", "--server", f.url, "--status", "running"); err != nil || strings.TrimSpace(out) != "no sessions" {
			t.Errorf("forge sessions --status running printed %q (%v)", out, err)
		}
		if _, err := runCLICombined(t, "sessions", "--server", f.url, "--status", "busy"); err == nil || !strings.Contains(err.Error(), "running or idle") {
			t.Errorf("forge sessions --status busy: %v", err)
		}
		out, err = runCLICombined(t, "sessions", "--server", f.url, "--limit", "1")
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], f.errSes) ||
			lines[2] != "(2 older sessions not shown; --limit 0 lists all)" {
			t.Errorf("forge sessions --limit 1 printed:\n%s", out)
		}
		out, err = runCLICombined(t, "sessions", "--server", f.url, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var list []forge.Session
		if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 3 {
			t.Errorf("forge sessions --json: %v, %d sessions:\n%s", err, len(list), out)
		}
	})
}

func TestSessionsWithAPIKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	t.Parallel()
	f := newShowFixture(t, func(o *serveOptions) { o.apiKeys = "k1=acme" })
	if _, err := runCLICombined(t, "sessions", "--server", f.url); err == nil || !strings.Contains(err.Error(), "(unauthorized)") {
		t.Errorf("without a key: err = %v", err)
	}
	out, err := runCLICombined(t, "sessions", "--server", f.url, "--api-key", "k1")
	if err != nil || strings.Count(out, "\nses_") != 3 {
		t.Errorf("with --api-key: err %v, output:\n%s", err, out)
	}
	if _, err := runCLICombined(t, "show", f.toolSes, "--server", f.url, "--api-key", "k1"); err != nil {
		t.Errorf("show with --api-key: %v", err)
	}
}

// TestSessionsAPIKeyFromEnv: FORGE_API_KEY is the key's default, as for chat.
func TestSessionsAPIKeyFromEnv(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	url := startServer(t, func(o *serveOptions) { o.apiKeys = "k1=acme" })
	t.Setenv("FORGE_API_KEY", "k1")
	out, err := runCLICombined(t, "sessions", "--server", url)
	if err != nil || out != "no sessions\n" {
		t.Errorf("err %v, output %q", err, out)
	}
}

func TestSessionsServerDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	for _, args := range [][]string{{"sessions"}, {"show", "ses_1"}} {
		_, err := runCLICombined(t, append(args, "--server", url)...)
		want := "cannot reach the Forge server at " + url
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%v: err = %v, want %s...", args, err, want)
		}
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{
		{"plain text\twith tab\nand newline", "plain text\twith tab\nand newline"},
		{"\x1b[2J\x1b]0;title\x07", `\x1b[2J\x1b]0;title\x07`},
		{"carriage\rreturn\x7f", `carriage\x0dreturn\x7f`},
		{"c1 \u009b control", `c1 \u{9b} control`},
		{"bad \xff\xfe utf8", "bad \uFFFD\uFFFD utf8"},
		{"émoji ✓ 日本", "émoji ✓ 日本"},
	} {
		if got := sanitize(c[0]); got != c[1] {
			t.Errorf("sanitize(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3 (go1.26.8)"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201120809-eecc38303833+dirty"},
			Settings: settings("vcs.revision", "eecc38303833a95756f471716e9e821d3561608e", "vcs.modified", "true")},
			"v0.0.0-20261201120809-eecc38303833+dirty (go1.26.8)"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "eecc38303833a95756f471716e9e821d3561608e", "vcs.time", "2026-12-01T12:08:09Z", "vcs.modified", "true")},
			"devel (commit eecc38303833 of 2026-12-01T12:08:09Z, modified, go1.26.8)"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "devel (go1.26.8)"},
	} {
		if got := versionOf(&c.bi); got != c.want {
			t.Errorf("versionOf(%+v) = %q, want %q", c.bi.Main, got, c.want)
		}
	}
	// The command prints the build's version, never a constant.
	out, err := runCLICombined(t, "version")
	bi, _ := debug.ReadBuildInfo()
	if err != nil || out != "forge "+versionOf(bi)+"\n" {
		t.Errorf("forge version printed %q (%v)", out, err)
	}
}

func TestPrinterClips(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 1000)
	huge := strings.Repeat("x\n", 10000)
	for _, full := range []bool{false, true} {
		var b strings.Builder
		p := &printer{w: &b, full: full}
		p.part(&forge.Part{Type: forge.PartTool, Tool: "t", Arguments: json.RawMessage(`{"a":"` + long + `"}`), Output: &huge})
		p.part(&forge.Part{Type: forge.PartText, Text: long})
		out := b.String()
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if full {
			if len(lines) != 1+10000+1 || !strings.Contains(out, long) {
				t.Errorf("--full: %d lines", len(lines))
			}
			continue
		}
		want := []string{
			`    [tool t {"a":"` + strings.Repeat("é", maxArgRunes-6) + `...]`,
			"      -> x",
		}
		if lines[0] != want[0] || lines[1] != want[1] || len(lines) != 1+maxOutputLines+1+1 ||
			lines[maxOutputLines+1] != "         ... (9992 more lines; --full shows all)" ||
			lines[len(lines)-1] != "    "+strings.Repeat("é", maxLineRunes)+"..." {
			t.Errorf("clipped output:\n%s", out)
		}
	}
}

func TestPrinterShowsOverrides(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	p := &printer{w: &b}
	temp, maxOut := 0.3, 77
	p.turn(&forge.Turn{ID: "turn_1", Status: forge.TurnDone, Overrides: &forge.TurnOverrides{
		Instructions: "Answer in French.\n\x1b[31mBe brief.", Temperature: &temp, MaxOutputTokens: &maxOut,
		Tools: []forge.TurnTool{{Name: "get_weather"}, {Name: "ticket"}}, OutputSchema: &forge.OutputSchema{Name: "answer"},
	}}, nil)
	p.turn(&forge.Turn{ID: "turn_2", Status: forge.TurnDone}, nil)
	out := b.String()
	want := "  overrides: temperature 0.3; max_output_tokens 77; client tools get_weather, ticket; output_schema answer\n" +
		"  instructions: Answer in French.\n" +
		"                \\x1b[31mBe brief.\n"
	if !strings.Contains(out, want) || strings.Count(out, "overrides:") != 1 {
		t.Errorf("printed:\n%s\nwant it to hold:\n%s", out, want)
	}
}

func TestPrinterShowsDelegationParts(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	p := &printer{w: &b}
	p.part(&forge.Part{Type: forge.PartAgent, Data: json.RawMessage(`{"name":"writer","start":4,"end":11}`)})
	p.part(&forge.Part{Type: forge.PartAgent, Text: "bob"}) // a forum copy's
	p.part(&forge.Part{Type: forge.PartSubtask, Data: json.RawMessage(`{"agent":"writer","thread_id":"thr_1","call_id":"c1","prompt":"Draft the\nreply \u001b[31m","status":"running"}`)})
	want := "    [@writer]\n    [@bob]\n    [subtask writer running: Draft the reply \\x1b[31m]\n"
	if got := b.String(); got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}
