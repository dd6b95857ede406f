package cli

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"
)

// TestJSONLoggerTakesOverTheLogPackage: with --log-format json, lines the
// standard log package writes (as libraries do) come out as JSON objects
// too. Not parallel: it sets the process's default logger.
func TestJSONLoggerTakesOverTheLogPackage(t *testing.T) {
	prev, flags := slog.Default(), log.Flags()
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetFlags(flags)
	})
	var out bytes.Buffer
	logger, err := newLogger(logJSON, "info", &out)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("from slog", "session_id", "ses_1")
	log.Printf("from the log package: %d", 42)
	slog.Warn("from the default slog logger")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines: %q", lines)
	}
	for i, want := range []string{"from slog", "from the log package: 42", "from the default slog logger"} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("line %q is not JSON: %v", lines[i], err)
		}
		if rec["msg"] != want {
			t.Fatalf("line %d: %v, want msg %q", i, rec, want)
		}
	}
	for _, c := range []struct{ format, level string }{{"yaml", "info"}, {"json", "loud"}} {
		if _, err := newLogger(c.format, c.level, &out); err == nil {
			t.Errorf("newLogger(%q, %q) accepted", c.format, c.level)
		}
	}
}
