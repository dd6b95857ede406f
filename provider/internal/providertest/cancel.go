package providertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// cancelTests: a call ends as soon as its context does or its consumer
// stops, the HTTP request is aborted (the server sees it go) and no
// goroutine of the call is left behind.
var cancelTests = []test{
	{"MidStream", func(f *fixture) {
		f.respond(fakeapi.Text("a").HangAt(fakeapi.AfterDeltas(1)))
		ctx, cancel := context.WithCancel(f.Context())
		defer cancel()
		cancelled := make(chan time.Time, 1)
		r := f.tracked(ctx, hello(), func(ev forge.ModelEvent) bool {
			if ev.Type == forge.TextDelta {
				// The stream now stalls; cancel from outside shortly
				// after.
				time.AfterFunc(50*time.Millisecond, func() { cancelled <- time.Now(); cancel() })
			}
			return true
		})
		if !errors.Is(r.err, context.Canceled) {
			f.Fatalf("err = %v, want context.Canceled", r.err)
		}
		f.within(r.ended.Sub(<-cancelled), time.Second, "returning after the cancel")
		f.same(r.deltas(), []string{"a"}, "deltas")
	}},
	{"BeforeHeaders", func(f *fixture) {
		// The server answered its headers, then nothing.
		f.respond(fakeapi.Text("a").HangAt(fakeapi.AfterDeltas(0)))
		f.deadline(100 * time.Millisecond)
	}},
	{"Silent", func(f *fixture) {
		// The server accepted the request and answers nothing at all.
		f.respond(fakeapi.Text("a").HangAt(fakeapi.BeforeHeaders()))
		f.deadline(100 * time.Millisecond)
	}},
	{"BeforeStart", func(f *fixture) {
		ctx, cancel := context.WithCancel(f.Context())
		cancel()
		r := stream(ctx, f.model(), hello())
		if !errors.Is(r.err, context.Canceled) || len(r.got) != 0 {
			f.Fatalf("events %q, err %v: want context.Canceled and nothing else", r.got, r.err)
		}
		f.received(0)
	}},
	{"ConsumerBreak", func(f *fixture) {
		f.respond(fakeapi.Text("a ", "b ", "c").Delay(10 * time.Millisecond))
		n := 0
		r := f.tracked(f.Context(), hello(), func(ev forge.ModelEvent) bool {
			n++
			return ev.Type != forge.TextDelta
		})
		if r.err != nil || n != 2 {
			f.Errorf("%d events before the break, err %v; want 2", n, r.err)
		}
		// The provider stays usable.
		r = f.call(hello())
		if r.err != nil || r.finish() == nil {
			f.Fatalf("second call: %q %v", r.got, r.err)
		}
	}},
	{"ReportsWaits", func(f *fixture) {
		f.respond(fakeapi.Text("a", "b", "c").HangAt(fakeapi.AfterDeltas(1)))
		reportsWaits(f, f.model(), hello())
	}},
}

// deadline checks a call to a stalled server ends with the deadline, at
// once, and is aborted.
func (f *fixture) deadline(d time.Duration) {
	f.Helper()
	ctx, cancel := context.WithTimeout(f.Context(), d)
	defer cancel()
	start := time.Now()
	r := f.tracked(ctx, hello(), nil)
	if !errors.Is(r.err, context.DeadlineExceeded) {
		f.Fatalf("err = %v, want context.DeadlineExceeded", r.err)
	}
	f.within(r.ended.Sub(start), d+2*time.Second, "the call")
}

// labelKey is the pprof label that marks the goroutines of a tracked call.
const labelKey = "providertest-call"

var calls atomic.Int64

// tracked streams req from a model of its own transport, passing each
// event to each (false stops the stream), with the goroutines it starts
// labelled; then checks the fake saw the request end and none of those
// goroutines is left once the transport's idle connections are closed.
func (f *fixture) tracked(ctx context.Context, req *forge.ModelRequest, each func(forge.ModelEvent) bool) reply {
	f.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	c := f.config()
	c.HTTPClient = &http.Client{Transport: tr}
	m := f.p.Model(c)
	label := fmt.Sprintf("%s-%d", f.Name(), calls.Add(1))
	var r reply
	pprof.Do(ctx, pprof.Labels(labelKey, label), func(ctx context.Context) {
		for ev, err := range m.Stream(ctx, req) {
			if err != nil {
				r.err = err
				return
			}
			r.got = append(r.got, Render(ev))
			r.events = append(r.events, ev)
			if each != nil && !each(ev) {
				return
			}
		}
	})
	r.ended = time.Now()
	tr.CloseIdleConnections()
	f.waitFor("the server to see the request end", func() bool { return f.fake.InFlight() == 0 })
	f.waitFor("the call's goroutines to end", func() bool { return labelled(label) == 0 })
	return r
}

// waitFor polls cond for up to 5 seconds.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			f.Errorf("timed out waiting for %s", what)
			return
		}
	}
}

// labelled counts the goroutines carrying the label.
func labelled(label string) int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	mark := fmt.Sprintf("%q:%q", labelKey, label)
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "# labels: ") && strings.Contains(line, mark) {
			n++
		}
	}
	return n
}

// reportsWaits checks that m reports its waits (forge.ReportWaits): one
// before the request, and one before a read of a stream that stalls,
// once every event of what was read has been passed on. The fake must
// answer with the text "a", "b", "c" and stall after "a". The check
// cancels at the wait after "text:a": without that wait it would time
// out.
func reportsWaits(f *fixture, m forge.Model, req *forge.ModelRequest) {
	f.Helper()
	ctx, cancel := context.WithTimeout(f.Context(), 10*time.Second)
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
		got = append(got, Render(ev))
	}
	if !w.Reported() {
		f.Fatal("the provider did not report its waits")
	}
	if len(waits) == 0 || waits[0] != 0 {
		f.Fatalf("waits at %v: none before the request", waits)
	}
	if !errors.Is(err, context.Canceled) || strings.Join(got, " ") != "text+ text:a" {
		f.Fatalf("no wait before the stalled read: events %q, err %v, waits at %v", got, err, waits)
	}
}
