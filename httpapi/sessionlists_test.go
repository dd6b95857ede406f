package httpapi_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

func TestSessionListFiltersOverHTTP(t *testing.T) {
	s := newStack(t)
	s.createAgent("support")
	s.createAgent("billing")
	mk := func(agent, meta string) string {
		var ses forge.Session
		s.call("POST", "/v1/sessions", map[string]any{"agent": agent, "metadata": json.RawMessage(meta)}, 201, &ses)
		return ses.ID
	}
	a := mk("support", `{"team": "red", "tier": 2}`)
	b := mk("billing", `{"team": "blue"}`)
	time.Sleep(2 * time.Millisecond) // distinct update times on coarse clocks
	c := mk("support", `{"team": "blue"}`)
	ids := func(q string) []string {
		var page struct{ Data []forge.Session }
		s.call("GET", "/v1/sessions?"+q, nil, 200, &page)
		var out []string
		for _, ses := range page.Data {
			out = append(out, ses.ID)
		}
		return out
	}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"", []string{c, b, a}},
		{"order=asc", []string{a, b, c}},
		{"agent=support", []string{c, a}},
		{"metadata.team=blue", []string{c, b}},
		{"metadata.team=red&metadata.tier=2", []string{a}},
		{"status=idle&kind=direct", []string{c, b, a}},
		{"status=running", nil},
		{"kind=forum", nil},
		{"updated_after=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), nil},
	} {
		if got := ids(tc.q); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("?%s: %v, want %v", tc.q, got, tc.want)
		}
	}
	for _, q := range []string{"status=busy", "order=sideways", "kind=room", "updated_after=yesterday",
		"metadata." + url.QueryEscape(`x"]`) + "=1", "cursor=garbage"} {
		if a := s.do(req{method: "GET", path: "/v1/sessions?" + q}); a.status != 400 {
			t.Errorf("?%s: %s, want 400", q, a)
		}
	}
}
