package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
	"github.com/forge-runtime/forge/httpapi"
)

// TestReadyz: /readyz runs every check, needs no key, answers 503 naming
// the failing check (never its error text) and 200 once all pass.
func TestReadyz(t *testing.T) {
	t.Parallel()
	var redisDown, draining atomic.Bool
	s := newStack(t, func(c *httpapi.Config) {
		c.Keys = map[string]string{"k": "t"}
		c.Ready = []httpapi.ReadyCheck{
			{Name: "store", Check: func(context.Context) error { return nil }},
			{Name: "redis", Check: func(context.Context) error {
				if redisDown.Load() {
					return errors.New("dial tcp 10.0.0.7:6379: connection refused")
				}
				return nil
			}},
			{Name: "shutdown", Check: func(context.Context) error {
				if draining.Load() {
					return errors.New("draining")
				}
				return nil
			}},
		}
	})
	s.key = ""
	check := func(wantStatus int, want map[string]string) {
		t.Helper()
		a := s.do(req{method: "GET", path: "/readyz"})
		var body struct {
			Status string            `json:"status"`
			Checks map[string]string `json:"checks"`
		}
		if a.status != wantStatus || json.Unmarshal(a.body, &body) != nil {
			t.Fatalf("readyz: %s", a)
		}
		if strings.Contains(string(a.body), "10.0.0.7") {
			t.Fatalf("readyz shows a check's error: %s", a.body)
		}
		for name, v := range want {
			if body.Checks[name] != v {
				t.Fatalf("readyz checks %v, want %s %s", body.Checks, name, v)
			}
		}
	}
	check(200, map[string]string{"store": "ok", "redis": "ok", "shutdown": "ok"})
	redisDown.Store(true)
	check(503, map[string]string{"store": "ok", "redis": "failing"})
	redisDown.Store(false)
	draining.Store(true)
	check(503, map[string]string{"redis": "ok", "shutdown": "failing"})
}

// TestEphemeralEventHasNoID: an event without a seq (a forum's
// forum.typing) reaches a live session stream as a frame with the whole
// envelope and no id line, so a client's Last-Event-ID stays on the log.
func TestEphemeralEventHasNoID(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.call("POST", "/v1/agents", map[string]any{"name": "a", "model": "scripted/echo"}, 201, nil)
	var ses forge.Session
	s.call("POST", "/v1/sessions", map[string]any{"agent": "a"}, 201, &ses)
	resp := s.stream(req{method: "GET", path: "/v1/sessions/" + ses.ID + "/events", header: map[string]string{"Accept": "text/event-stream"}})
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The stream subscribes when its handler runs: publish until it shows.
	var frame []string
	for frame == nil {
		err := s.eng.PublishEphemeral(context.Background(), ses.ID, eventlog.Draft{Type: "forum.typing", ID: "par_1",
			Data: map[string]any{"participant_id": "par_1", "typing": true}})
		if err != nil {
			t.Fatal(err)
		}
		var cur []string
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("stream ended")
				}
				if l == "" {
					if len(cur) > 0 && !strings.HasPrefix(cur[0], ":") {
						frame = cur
						break read
					}
					cur = nil
					continue
				}
				cur = append(cur, l)
			case <-time.After(20 * time.Millisecond):
				break read
			}
		}
	}
	if len(frame) != 2 || frame[0] != "event: forum.typing" || !strings.HasPrefix(frame[1], "data: ") {
		t.Fatalf("ephemeral frame %q", frame)
	}
	var ev forge.Event
	if err := json.Unmarshal([]byte(strings.TrimPrefix(frame[1], "data: ")), &ev); err != nil || ev.SessionID != ses.ID || ev.Type != "forum.typing" || ev.Seq != 0 {
		t.Fatalf("envelope %s: %v", frame[1], err)
	}
}
