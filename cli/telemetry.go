package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"time"
)

// Log formats (--log-format).
const (
	logText = "text"
	logJSON = "json"
)

// newLogger builds the server's logger and makes it the process's: the
// standard log package and slog's default write through it, so every line
// on out has the one format (with json, every line is a JSON object).
func newLogger(format, level string, out io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format {
	case logText, "":
		h = slog.NewTextHandler(out, opts)
	case logJSON:
		h = slog.NewJSONHandler(out, opts)
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
	}
	logger := slog.New(h)
	// SetDefault also routes the log package (log.Printf) to h.
	slog.SetDefault(logger)
	log.SetFlags(0)
	return logger, nil
}

// reportedError is an error serve has already logged: Main exits 1
// without printing it again (which would break a JSON log).
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

// announce writes to stdout the line that tells where a listener is (the
// harnesses that start forge serve read it): as plain text, or, with
// --log-format json, as one JSON object like every other line (stdout and
// stderr are one log under a container runtime).
func announce(w io.Writer, format, msg, url string) {
	if format != logJSON {
		fmt.Fprintf(w, "%s %s\n", msg, url)
		return
	}
	line, _ := json.Marshal(struct {
		Time  string `json:"time"`
		Level string `json:"level"`
		Msg   string `json:"msg"`
		URL   string `json:"url"`
	}{time.Now().Format(time.RFC3339Nano), "INFO", msg + " " + url, url})
	fmt.Fprintf(w, "%s\n", line)
}
