package cli

import "testing"

func TestTuneGC(t *testing.T) {
	env := func(vals map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	}
	var set []int
	setter := func(p int) int { set = append(set, p); return 100 }

	if got := tuneGC(env(nil), setter); got != serveGCPercent || len(set) != 1 || set[0] != serveGCPercent {
		t.Fatalf("GOGC unset: got %d, set %v; want %d", got, set, serveGCPercent)
	}
	set = nil
	for _, v := range []string{"100", "off", ""} {
		if got := tuneGC(env(map[string]string{"GOGC": v}), setter); got != -1 || len(set) != 0 {
			t.Fatalf("GOGC=%q: got %d, set %v; want the runtime's own", v, got, set)
		}
	}
}
