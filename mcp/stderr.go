package mcp

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// What a stdio server's stderr may put in the log and in error messages.
const (
	// stderrMaxLine bounds a logged line (bytes, after redaction).
	stderrMaxLine = 512
	// stderrBurst lines are logged per stderrWindow; the others are
	// counted and reported in one line.
	stderrBurst  = 20
	stderrWindow = 10 * time.Second
	// stderrTail lines are kept for error messages.
	stderrTail = 5
)

// stderrLog receives a stdio server's stderr. Servers print what they
// like there, secrets included (their own environment, a token in a
// request they log), so every line is redacted (see redactor) before it
// is logged or kept, cut to stderrMaxLine bytes, and logged at most
// stderrBurst lines per stderrWindow. The last lines are kept, redacted,
// for the error message of a server that fails.
type stderrLog struct {
	log    *slog.Logger
	redact *redactor
	now    func() time.Time

	mu          sync.Mutex // guards the following
	partial     []byte     // the line being written (at most 4*stderrMaxLine bytes kept)
	partialCut  int        // bytes of it not kept
	windowStart time.Time
	logged      int // lines logged in the window
	suppressed  int // lines not logged in the window
	tail        []string
}

func newStderrLog(log *slog.Logger, r *redactor) *stderrLog {
	return &stderrLog{log: log, redact: r, now: time.Now}
}

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		// Keep more than a line's worth, so a secret at the cut is still
		// recognized before the line is shortened.
		if room := 4*stderrMaxLine - len(s.partial); room > 0 {
			s.partial = append(s.partial, chunk[:min(room, len(chunk))]...)
			s.partialCut += len(chunk) - min(room, len(chunk))
		} else {
			s.partialCut += len(chunk)
		}
		if i < 0 {
			break
		}
		s.line()
		p = p[i+1:]
	}
	return n, nil
}

// line ends the current line. s.mu is held.
func (s *stderrLog) line() {
	raw := strings.TrimRight(string(s.partial), "\r")
	cut := s.partialCut
	s.partial, s.partialCut = s.partial[:0], 0
	text := s.redact.apply(raw)
	if len(text) > stderrMaxLine {
		k := stderrMaxLine
		for k > 0 && !utf8.RuneStart(text[k]) {
			k--
		}
		cut += len(text) - k
		text = text[:k]
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if cut > 0 {
		text += fmt.Sprintf(" [%d bytes cut]", cut)
	}
	if strings.TrimSpace(text) == "" {
		return
	}
	s.tail = append(s.tail, text)
	if len(s.tail) > stderrTail {
		s.tail = slices.Delete(s.tail, 0, len(s.tail)-stderrTail)
	}
	now := s.now()
	if now.Sub(s.windowStart) >= stderrWindow {
		s.reportSuppressed()
		s.windowStart, s.logged = now, 0
	}
	if s.logged >= stderrBurst {
		s.suppressed++
		return
	}
	s.logged++
	s.log.Info("mcp: server stderr", "line", text)
}

// reportSuppressed logs how many lines the window did not log. s.mu is held.
func (s *stderrLog) reportSuppressed() {
	if s.suppressed > 0 {
		s.log.Warn("mcp: server stderr: lines not logged (rate limit)", "lines", s.suppressed,
			"limit", fmt.Sprintf("%d lines per %s", stderrBurst, stderrWindow))
		s.suppressed = 0
	}
}

// flush logs a last unfinished line and the count of lines not logged;
// called when the server's connection has ended.
func (s *stderrLog) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 || s.partialCut > 0 {
		s.line()
	}
	s.reportSuppressed()
}

// lastLines joins the last n lines (already redacted).
func (s *stderrLog) lastLines(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.tail
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, " | "))
}

// redactor removes what looks like a secret from text a server produced:
// the values of the environment variables it was given, bearer tokens,
// well-known key formats (sk-..., ghp_..., AKIA...), credentials in URLs,
// and the value of any NAME=value or "name": "value" whose name contains
// key, token, secret or password.
type redactor struct {
	values []string // longest first
}

const redacted = "[redacted]"

// newRedactor redacts the values of env (those of at least 6 bytes: shorter
// ones would blank ordinary words) besides the patterns.
func newRedactor(env map[string]string) *redactor {
	r := &redactor{}
	for _, v := range env {
		if len(strings.TrimSpace(v)) >= 6 {
			r.values = append(r.values, v)
		}
	}
	slices.SortFunc(r.values, func(a, b string) int { return len(b) - len(a) })
	return r
}

var (
	bearerRE = regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}`)
	keyRE    = regexp.MustCompile(`\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}|\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{12,}|` +
		`\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[abprs]-[A-Za-z0-9-]{10,}|` +
		`\bAKIA[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_-]{35}|\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`)
	urlCredRE = regexp.MustCompile(`(://[^/\s:@]+:)[^/\s@]+@`)
	namedRE   = regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:key|token|secret|passw(?:or)?d|credential)[A-Za-z0-9_.-]*["']?\s*[:=]\s*["']?)([^\s"',;&}]+)`)
	// notSecretRE are values a named field holds that are no secret
	// (max_tokens=100, has_key: true).
	notSecretRE = regexp.MustCompile(`(?i)^(?:\[redacted\].*|\d{1,7}|true|false|null|none|yes|no|)$`)
)

// apply returns s without its secrets.
func (r *redactor) apply(s string) string {
	if r != nil {
		for _, v := range r.values {
			s = strings.ReplaceAll(s, v, redacted)
		}
	}
	s = bearerRE.ReplaceAllString(s, "${1}${2}"+redacted)
	s = keyRE.ReplaceAllString(s, redacted)
	s = urlCredRE.ReplaceAllString(s, "${1}"+redacted+"@")
	s = namedRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := namedRE.FindStringSubmatch(m)
		if notSecretRE.MatchString(sub[2]) {
			return m
		}
		return sub[1] + redacted
	})
	return s
}
