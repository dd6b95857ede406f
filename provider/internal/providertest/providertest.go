// Package providertest holds checks that every provider's tests make of
// its forge.Model against the provider's fake server.
package providertest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// ReportsWaits checks that m reports its waits (forge.ReportWaits): one
// before the request, and one before a read of a stream that stalls, once
// every event of what was read has been passed on. The fake behind m must
// answer req with the text "a", "b", "c" and stall after "a"; render names
// a text start "text+" and a delta "text:<delta>". The check cancels at
// the wait after "text:a": without that wait it would time out.
func ReportsWaits(t *testing.T, m forge.Model, req *forge.ModelRequest, render func(forge.ModelEvent) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	var waits []int // len(got) at each wait
	w := &forge.StreamWaits{Wait: func() {
		waits = append(waits, len(got))
		if len(got) > 0 && got[len(got)-1] == "text:a" {
			cancel() // the stream stalls here
		}
	}}
	var err error
	for ev, e := range m.Stream(forge.WithStreamWaits(ctx, w), req) {
		if e != nil {
			err = e
			break
		}
		got = append(got, render(ev))
	}
	if !w.Reported() {
		t.Fatal("the provider did not report its waits")
	}
	if len(waits) == 0 || waits[0] != 0 {
		t.Fatalf("waits at %v: none before the request", waits)
	}
	if !errors.Is(err, context.Canceled) || !reflect.DeepEqual(got, []string{"text+", "text:a"}) {
		t.Fatalf("no wait before the stalled read: events %q, err %v, waits at %v", got, err, waits)
	}
}
