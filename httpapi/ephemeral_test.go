package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

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
