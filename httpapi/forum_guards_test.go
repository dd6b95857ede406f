package httpapi_test

import (
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

// TestForumGuardsAreBounded: a forum's guards can be tightened, never
// switched off or raised past their bounds (max_agent_streak and
// pair_window.max at most 100, pair_window.seconds at most a day): beyond
// them the create is 400 invalid_request naming the bound, and no forum
// is stored.
func TestForumGuardsAreBounded(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	bad := []struct {
		name   string
		guards map[string]any
		msg    string
	}{
		{"streak above the bound", map[string]any{"max_agent_streak": forge.MaxAgentStreakLimit + 1}, "guards.max_agent_streak must be between 1 and 100"},
		{"streak of the probe", map[string]any{"max_agent_streak": 10000}, "guards.max_agent_streak must be between 1 and 100"},
		{"streak off", map[string]any{"max_agent_streak": 0}, "guards.max_agent_streak"},
		{"pair max above the bound", map[string]any{"pair_window": map[string]any{"max": forge.PairWindowMaxLimit + 1}}, "guards.pair_window.max must be between 1 and 100"},
		{"pair max off", map[string]any{"pair_window": map[string]any{"max": 0, "seconds": 60}}, "guards.pair_window.max"},
		{"pair seconds above the bound", map[string]any{"pair_window": map[string]any{"max": 6, "seconds": forge.PairWindowSecondsLimit + 1}}, "guards.pair_window.seconds must be between 1 and 86400"},
		{"pair seconds off", map[string]any{"pair_window": map[string]any{"max": 6, "seconds": 0}}, "guards.pair_window.seconds"},
	}
	before := s.state()
	for _, c := range bad {
		a := s.do(req{method: "POST", path: "/v1/forums", body: map[string]any{"title": "x", "guards": c.guards}})
		if a.status != 400 || a.errCode() != "invalid_request" || !strings.Contains(string(a.body), c.msg) {
			t.Errorf("%s: %s, want 400 invalid_request saying %q", c.name, a, c.msg)
		}
	}
	if after := s.state(); after != before {
		t.Fatalf("refused forums changed the store:\n%s\nthen\n%s", before, after)
	}
	var f struct{ Guards forge.ForumGuards }
	s.call("POST", "/v1/forums", map[string]any{"title": "loose", "guards": map[string]any{"max_agent_streak": forge.MaxAgentStreakLimit,
		"pair_window": map[string]any{"max": forge.PairWindowMaxLimit, "seconds": forge.PairWindowSecondsLimit}}}, 201, &f)
	want := forge.ForumGuards{MaxAgentStreak: 100, PairWindow: forge.PairWindow{Max: 100, Seconds: 86400}}
	if f.Guards != want {
		t.Fatalf("guards at the bounds stored as %+v, want %+v", f.Guards, want)
	}
}
