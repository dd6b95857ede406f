package mcp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	forge "github.com/forge-runtime/forge"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	r := newRedactor(map[string]string{"SERVICE_CRED": "plain-value-123", "SHORT": "on"})
	for _, c := range []struct{ in, want string }{
		{"value plain-value-123 printed", "value [redacted] printed"},
		{"OPENAI_API_KEY=abc123xyz", "OPENAI_API_KEY=[redacted]"},
		{`{"client_secret": "s3cr3t", "n": 1}`, `{"client_secret": "[redacted]", "n": 1}`},
		{"password: hunter2", "password: [redacted]"},
		{"Authorization: Bearer abcdefghijkl0123", "Authorization: Bearer [redacted]"},
		{"key sk-proj-AAAAbbbbCCCCdddd1234 used", "key [redacted] used"},
		{"sk-ant-api03-abcdefghijklmnop", "[redacted]"},
		{"gh token ghp_0123456789abcdefghijABCDEFGHIJ", "gh token [redacted]"},
		{"aws AKIAABCDEFGHIJKLMNOP here", "aws [redacted] here"},
		{"postgres://forge:pa55word@db:5432/x", "postgres://forge:[redacted]@db:5432/x"},
		// Not secrets: short env values, numbers and flags in named fields.
		{"mode on, max_tokens=100, has_key: true", "mode on, max_tokens=100, has_key: true"},
		{"listening on 127.0.0.1:3000", "listening on 127.0.0.1:3000"},
	} {
		if got := r.apply(c.in); got != c.want {
			t.Errorf("apply(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The rate limit: stderrBurst lines per window are logged, the others are
// counted and reported once the window is over (or at flush).
func TestStderrLogRateLimit(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := newStderrLog(slog.New(slog.NewTextHandler(&logs, nil)), newRedactor(nil))
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	for i := range 50 {
		fmt.Fprintf(s, "line %d\n", i)
	}
	if n := strings.Count(logs.String(), `msg="mcp: server stderr"`); n != stderrBurst {
		t.Fatalf("%d lines logged in the first window, want %d", n, stderrBurst)
	}
	now = now.Add(stderrWindow)
	// A line split across writes is one line.
	fmt.Fprint(s, "next ")
	fmt.Fprint(s, "window\npartial")
	out := logs.String()
	if !strings.Contains(out, `msg="mcp: server stderr: lines not logged (rate limit)" lines=30`) || !strings.Contains(out, `line="next window"`) {
		t.Fatalf("log:\n%s", out)
	}
	s.flush()
	if !strings.Contains(logs.String(), `line=partial`) {
		t.Fatalf("unfinished line not flushed:\n%s", logs.String())
	}
	if got := s.lastLines(2); got != "next window | partial" {
		t.Fatalf("lastLines = %q", got)
	}
}

// A real stdio server printing secrets, a huge line and a flood on its
// stderr: the log holds none of the secrets, no line over the cap, and at
// most stderrBurst lines (with the count of the others).
func TestStdioStderrCappedAndRedacted(t *testing.T) {
	t.Parallel()
	const cred = "given-credential-4f9a2c"
	spec := everything(t)
	script := `printf 'OPENAI_API_KEY=%s\n' "$FORGE_TEST_CRED" >&2
echo "raw value: $FORGE_TEST_CRED" >&2
echo "Authorization: Bearer abcdefghijklmnop123456" >&2
echo "using key sk-proj-AAAAbbbbCCCCdddd1234" >&2
echo '{"client_secret": "s3cr3t-value-xyz"}' >&2
head -c 100000 /dev/zero | tr '\0' 'x' >&2; echo >&2
i=0; while [ $i -lt 300 ]; do echo "flood $i" >&2; i=$((i+1)); done
exec "$0" stdio`
	spec.Command = []string{"sh", "-c", script, spec.Command[0]}
	spec.Env = map[string]string{"FORGE_TEST_CRED": cred}
	var logs syncBuffer
	m := NewManager(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Launcher: sandboxes(t)})
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, find(t, tools, "everything_echo"), `{"message":"hi"}`); res.Output != "Echo: hi" {
		t.Fatalf("echo: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, secret := range []string{cred, "abcdefghijklmnop123456", "sk-proj-AAAAbbbbCCCCdddd1234", "s3cr3t-value-xyz"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q", secret)
		}
	}
	for _, want := range []string{
		`line="OPENAI_API_KEY=[redacted]"`, `line="raw value: [redacted]"`, `line="Authorization: Bearer [redacted]"`,
		`line="using key [redacted]"`, `"client_secret\": \"[redacted]\"`, "bytes cut]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > stderrMaxLine+300 {
			t.Errorf("a log line of %d bytes: %.200s...", len(l), l)
		}
	}
	if n := strings.Count(out, `msg="mcp: server stderr"`); n > stderrBurst {
		t.Errorf("%d stderr lines logged, more than %d", n, stderrBurst)
	}
	// 306 lines from the script, and what the server itself prints.
	m2 := regexp.MustCompile(`lines not logged \(rate limit\)".* lines=(\d+) `).FindStringSubmatch(out)
	if m2 == nil {
		t.Fatalf("no count of the lines not logged:\n%s", out)
	}
	if n, _ := strconv.Atoi(m2[1]); n < 306-stderrBurst {
		t.Fatalf("%d lines not logged, want at least %d", n, 306-stderrBurst)
	}
}

// The error of a server that fails to start quotes its stderr redacted.
func TestFailedServerErrorRedacted(t *testing.T) {
	t.Parallel()
	const cred = "given-credential-77aa01"
	var logs syncBuffer
	m := sandboxed(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{{
		Name:    "leaky",
		Command: []string{"sh", "-c", `echo "db password=hunter2-secret" >&2; echo "token is $LEAKY_CRED" >&2; echo "Bearer abcdefghijklmnop" >&2; exit 3`},
		Env:     map[string]string{"LEAKY_CRED": cred},
	}})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, secret := range []string{cred, "hunter2-secret", "abcdefghijklmnop"} {
		if strings.Contains(msg, secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("%q in the error or the log:\n%s\n%s", secret, msg, logs.String())
		}
	}
	if !strings.Contains(msg, `MCP server "leaky" is not running`) || !strings.Contains(msg, "password=[redacted]") ||
		!strings.Contains(msg, "token is [redacted]") {
		t.Errorf("error %q", msg)
	}
}
