// Package providertest holds checks that every provider's tests make of
// its forge.Model against the provider's fake server.
package providertest

import (
	"context"
	"errors"
	"reflect"
	"sync"
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

// Pool is a fake server that counts the connections it accepts and can
// hold requests (openaitest.Server, anthropictest.Server).
type Pool interface {
	Connections() int64
	SetGate(func())
}

// ReusesConnections checks that m keeps enough idle connections for the
// concurrency it serves: waves of calls (Waves) open calls connections for
// the first wave and reuse them for the next. The fake behind m must
// answer req with a short stream.
func ReusesConnections(t *testing.T, m forge.Model, fake Pool, req *forge.ModelRequest, calls, waves int) {
	t.Helper()
	Waves(t, m, fake, req, calls, waves)
	// A few may be dialed again when a call starts before the
	// connection of a call of the last wave is back in the pool.
	if n := fake.Connections(); n > int64(calls+calls/10) {
		t.Fatalf("%d waves of %d calls at once opened %d connections: idle ones were closed instead of reused", waves, calls, n)
	}
}

// Waves makes waves of calls through m, each with calls requests in flight
// at once (the fake holds each until all have arrived), one wave after the
// other.
func Waves(t *testing.T, m forge.Model, fake Pool, req *forge.ModelRequest, calls, waves int) {
	t.Helper()
	defer fake.SetGate(nil)
	for wave := range waves {
		var arrived sync.WaitGroup
		arrived.Add(calls)
		fake.SetGate(func() {
			arrived.Done()
			arrived.Wait()
		})
		var done sync.WaitGroup
		errs := make(chan error, calls)
		for range calls {
			done.Add(1)
			go func() {
				defer done.Done()
				for _, err := range m.Stream(t.Context(), req) {
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		done.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("wave %d: %v", wave, err)
		}
		// A connection goes back to the pool just after its body's end
		// is read.
		time.Sleep(100 * time.Millisecond)
		t.Logf("after wave %d: %d connections", wave, fake.Connections())
	}
}
