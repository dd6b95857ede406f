package providertest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// connectionTests: how a provider uses its HTTP connections.
var connectionTests = []test{
	{"Concurrent", func(f *fixture) {
		f.fake.RecordRequests(false)
		f.fake.SetDefaultReply(fakeapi.Text("a ", "b ", "c"))
		m := f.model()
		errs := make(chan error, 16)
		for range 16 {
			go func() {
				r := stream(f.Context(), m, hello())
				if r.err == nil && len(r.got) != 6 {
					r.err = fmt.Errorf("events %q", r.got)
				}
				errs <- r.err
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				f.Error(err)
			}
		}
		f.received(0) // recording is off
	}},
	{"ConcurrentCallsReuseConnections", func(f *fixture) {
		// The provider's default client keeps an idle connection for
		// each of 200 calls made at once (Go's transport keeps 2 per
		// host, Forge's kept 64), so later waves dial nothing. A few may
		// be dialed again when a call starts before the connection of a
		// call of the last wave is back in the pool.
		const calls, waves = 200, 3
		f.fake.RecordRequests(false)
		Waves(f.T, f.model(), f.fake, hello(), calls, waves)
		if n := f.fake.Connections(); n > int64(calls+calls/10) {
			f.Fatalf("%d waves of %d calls at once opened %d connections: idle ones were closed instead of reused", waves, calls, n)
		}
	}},
	{"ConnectionReused", func(f *fixture) {
		// A finished stream leaves its connection to the next call: no
		// new TCP (or TLS) handshake per model call. A transport of its
		// own: parallel tests closing their servers close the idle
		// connections of http.DefaultTransport.
		//
		// One later call may dial again: Go's transport drops a
		// connection when its write loop has not reported the request
		// written within 50 ms of the response (maxWriteWaitBeforeConnReuse),
		// which a loaded machine sometimes takes. A provider that closes
		// its bodies unread reuses none.
		const calls = 5
		var mu sync.Mutex
		var reused []bool
		tr := http.DefaultTransport.(*http.Transport).Clone()
		f.Cleanup(tr.CloseIdleConnections)
		c := f.config()
		c.HTTPClient = &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				mu.Lock()
				reused = append(reused, info.Reused)
				mu.Unlock()
			}}
			return tr.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
		})}
		m := f.p.Model(c)
		for range calls {
			if r := stream(f.Context(), m, hello()); r.err != nil {
				f.Fatal(r.err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reused) != calls || reused[0] {
			f.Fatalf("connections reused: %v, want %d calls, the first on a new connection", reused, calls)
		}
		if n := countTrue(reused[1:]); n < calls-2 {
			f.Errorf("connections reused: %v, want every call after the first but at most one", reused)
		}
	}},
	{"ConnectionRefused", func(f *fixture) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		c := f.config()
		u, err := url.Parse(c.BaseURL)
		if err != nil {
			f.Fatal(err)
		}
		u.Host = addr
		c.BaseURL = u.String()
		me := f.modelError(stream(f.Context(), f.p.Model(c), hello()).err)
		if !me.Retryable || me.StatusCode != 0 {
			f.Errorf("error %+v, want retryable without a status", *me)
		}
	}},
	{"NotAnEventStream", func(f *fixture) {
		// A server that answers a streamed request with an empty JSON
		// body (a JSON body with content is taken as an error object).
		c := f.config()
		c.HTTPClient = &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Body != nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			return &http.Response{StatusCode: 200, Request: r, Header: http.Header{"Content-Type": {"application/json"}},
				Body: http.NoBody}, nil
		})}
		me := f.modelError(stream(f.Context(), f.p.Model(c), hello()).err)
		if me.Retryable {
			f.Errorf("error %+v is retryable", *me)
		}
		f.contains(me.Message, "expected an event stream")
	}},
}

// environmentTests set the process environment: they run one at a time.
var environmentTests = []test{
	{"ConfigWinsOverEnvironment", func(f *fixture) {
		// The SDKs read keys, base URLs and headers from the
		// environment; what the configuration says wins, and what it
		// leaves empty stays empty.
		for k, v := range f.p.Env {
			f.Setenv(k, v)
		}
		f.fake.SetAPIKey("sk-config-key")
		c := f.config()
		c.APIKey = "sk-config-key"
		if r := stream(f.Context(), f.p.Model(c), hello()); r.err != nil {
			f.Fatal(r.err)
		}
		other := newFixture(f.T, f.p) // keyless
		if r := other.call(hello()); r.err != nil {
			f.Fatal(r.err)
		}
		got := other.received(1)[0]
		if h := got.Header.Get("Authorization") + got.Header.Get("X-Api-Key"); h != "" {
			f.Errorf("credential %q sent without a configured key", h)
		}
		for k, vs := range got.Header {
			for _, v := range vs {
				for ek, ev := range f.p.Env {
					if strings.Contains(v, ev) || strings.Contains(ev, k+":") {
						f.Errorf("header %s: %s comes from %s", k, v, ek)
					}
				}
			}
		}
		// A wrong key is a final 401.
		c.APIKey = "sk-wrong"
		me := f.modelError(stream(f.Context(), f.p.Model(c), hello()).err)
		if me.StatusCode != 401 || me.Retryable {
			f.Errorf("error %+v, want a final 401", *me)
		}
	}},
}

// Pool is a fake server that counts the connections it accepts and can
// hold requests (openaitest.Server, anthropictest.Server).
type Pool interface {
	Connections() int64
	SetGate(func())
}

// Waves makes waves of calls through m, each with calls requests in flight
// at once (the fake holds each until all have arrived), one wave after the
// other. The fake behind m must answer req with a short stream.
func Waves(t testing.TB, m forge.Model, fake Pool, req *forge.ModelRequest, calls, waves int) {
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

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
