package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

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
