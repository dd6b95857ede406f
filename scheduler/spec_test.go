package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// TestSpecNext: next slots in UTC of cron expressions in their zone,
// across both DST changes (a wall time in the spring gap has no slot that
// day; one in the repeated hour in autumn has one slot), and of intervals.
func TestSpecNext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cron, every, tz string
		from                  string
		want                  []string
	}{
		{"weekdays 8:00 Paris, winter then summer", "0 8 * * 1-5", "", "Europe/Paris", "2026-03-26T12:00:00Z",
			// Fri 27 at 8:00 CET; Mon 30 (after the change of the 29th) at 8:00 CEST.
			[]string{"2026-03-27T07:00:00Z", "2026-03-30T06:00:00Z", "2026-03-31T06:00:00Z"}},
		{"weekdays 8:00 Paris, summer then winter", "0 8 * * 1-5", "", "Europe/Paris", "2026-10-22T12:00:00Z",
			[]string{"2026-10-23T06:00:00Z", "2026-10-26T07:00:00Z"}},
		{"2:30 Paris skips the spring gap", "30 2 * * *", "", "Europe/Paris", "2026-03-28T12:00:00Z",
			[]string{"2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		{"2:30 Paris fires once in the repeated hour", "30 2 * * *", "", "Europe/Paris", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"from inside the repeated hour, its repeat is not a slot", "30 2 * * *", "", "Europe/Paris", "2026-10-25T01:00:00Z",
			[]string{"2026-10-26T01:30:00Z"}},
		{"New York 9:00, DST starts on March 8", "0 9 * * *", "", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z"}},
		{"UTC by default", "*/15 * * * *", "", "", "2026-01-01T00:07:30.5Z",
			[]string{"2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z"}},
		{"descriptor", "@daily", "", "Asia/Tokyo", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T15:00:00Z", "2026-01-02T15:00:00Z"}},
		{"interval, millisecond precision", "", "1.5s", "", "2026-01-01T00:00:00.1234Z",
			[]string{"2026-01-01T00:00:01.623Z", "2026-01-01T00:00:03.123Z"}},
		{"interval ignores DST", "", "1h", "Europe/Paris", "2026-10-25T00:00:00Z",
			[]string{"2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp, err := Parse(c.cron, c.every, c.tz)
			if err != nil {
				t.Fatal(err)
			}
			at := mustTime(t, c.from)
			for i, w := range c.want {
				at = sp.Next(at)
				if !at.Equal(mustTime(t, w)) {
					t.Fatalf("slot %d = %s, want %s", i, at.Format(time.RFC3339Nano), w)
				}
				if at.Location() != time.UTC {
					t.Fatalf("slot %d is in %s, want UTC", i, at.Location())
				}
			}
		})
	}
}

// TestSpecDue: the latest slot at or before now, and the first after it.
func TestSpecDue(t *testing.T) {
	t.Parallel()
	every, _ := Parse("", "10s", "")
	last, next, capped := every.Due(mustTime(t, "2026-01-01T00:00:00Z"), mustTime(t, "2026-01-01T01:00:05Z"))
	if !last.Equal(mustTime(t, "2026-01-01T01:00:00Z")) || !next.Equal(mustTime(t, "2026-01-01T01:00:10Z")) || capped {
		t.Fatalf("every: last %s next %s capped %v", last, next, capped)
	}
	cron, _ := Parse("0 8 * * *", "", "Europe/Paris")
	last, next, capped = cron.Due(mustTime(t, "2026-01-01T07:00:00Z"), mustTime(t, "2026-01-03T12:00:00Z"))
	if !last.Equal(mustTime(t, "2026-01-03T07:00:00Z")) || !next.Equal(mustTime(t, "2026-01-04T07:00:00Z")) || capped {
		t.Fatalf("cron: last %s next %s capped %v", last, next, capped)
	}
	minutely, _ := Parse("* * * * *", "", "")
	slot := mustTime(t, "2000-01-01T00:00:00Z")
	last, next, capped = minutely.Due(slot, mustTime(t, "2026-01-01T00:00:30Z"))
	if !capped || !last.Equal(slot) || !next.Equal(mustTime(t, "2026-01-01T00:01:00Z")) {
		t.Fatalf("long missed cron: last %s next %s capped %v", last, next, capped)
	}
}

// TestParseRefuses: every refusal is invalid_request with a sentence that
// names the problem.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cron, every, tz, says string }{
		{"", "", "", "needs cron"},
		{"* * * * *", "1m", "", "exclude each other"},
		{"61 * * * *", "", "", "not a five-field cron"},
		{"* * * *", "", "", "not a five-field cron"},
		{"* * * * * *", "", "", "not a five-field cron"},
		{"0 0 30 2 *", "", "", "never fires"},
		{"TZ=Europe/Paris 0 8 * * *", "", "", "set timezone instead"},
		{"0 8 * * *", "", "Mars/Olympus", "not an IANA zone"},
		{"0 8 * * *", "", "Local", "not an IANA zone"},
		{"", "999ms", "", "at least 1s"},
		{"", "-5s", "", "at least 1s"},
		{"", "soon", "", "not a duration"},
		{"", "1.0000001s", "", "whole number of milliseconds"},
	} {
		_, err := Parse(c.cron, c.every, c.tz)
		if !errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Parse(%q, %q, %q) = %v, want invalid saying %q", c.cron, c.every, c.tz, err, c.says)
		}
	}
}
