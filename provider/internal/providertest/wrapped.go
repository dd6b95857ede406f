package providertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// reliabilityTests: the registry's wrapper around the provider retries
// with backoff what failed before any output, honouring Retry-After
// (capped), never once output was passed on; times out silent servers
// and stalled streams; ends at once on cancel; and prices the usage.
var reliabilityTests = []test{
	{"RetryAfterThenSuccess", func(f *fixture) {
		f.respond(fakeapi.Failure(429, "slow down").Header("Retry-After", "2"), fakeapi.Text("hi ", "there").Usage(usage(10, 2)))
		w := f.wrapped("")
		f.events(w.call(f.Context()), "text+", "text:hi ", "text:there", "text-", "finish:stop in=10 out=2 read=0 write=0 think=0")
		w.waited("[2s]") // the Retry-After
		for _, r := range f.received(2) {
			if r.Header.Get("X-Extra") != "yes" {
				f.Errorf("headers %v: the configured header is missing", r.Header)
			}
		}
	}},
	{"RetryAfterMsAndCap", func(f *fixture) {
		f.respond(fakeapi.Failure(503, "busy").Header("Retry-After", "3600"),
			fakeapi.Failure(429, "slow down").Header("Retry-After-Ms", "250"), fakeapi.Text("ok"))
		w := f.wrapped("max_retry_after: 45s")
		if r := w.call(f.Context()); r.err != nil {
			f.Fatal(r.err)
		}
		w.waited("[45s 250ms]")
	}},
	{"ServerErrorsGiveUp", func(f *fixture) {
		f.respond(fakeapi.Failure(500, "first"), fakeapi.Failure(502, "second"), fakeapi.Failure(500, "third time unlucky"),
			fakeapi.Text("never served"))
		w := f.wrapped("max_attempts: 3, base_delay: 1s")
		r := w.call(f.Context())
		if len(r.got) != 0 {
			f.Errorf("events %q before the error", r.got)
		}
		me := f.modelError(r.err)
		if me.StatusCode != 500 {
			f.Errorf("error %+v, want the last one", *me)
		}
		f.contains(me.Message, "third time unlucky", "gave up after 3 attempts")
		w.waited("[500ms 1s]") // full jitter at 0.5 of 1s, then 2s
		f.received(3)
		if f.fake.Pending() != 1 {
			f.Errorf("%d replies pending, want 1", f.fake.Pending())
		}
	}},
	{"NotRetryable", func(f *fixture) {
		f.respond(fakeapi.Failure(400, "bad request"), fakeapi.Text("never served"))
		w := f.wrapped("")
		me := f.modelError(w.call(f.Context()).err)
		if me.StatusCode != 400 || me.Retryable {
			f.Errorf("error %+v", *me)
		}
		if len(w.sleeps.Waits()) != 0 || len(f.fake.Received()) != 1 {
			f.Error("retried a 400")
		}
	}},
	{"NoRetryAfterOutput", func(f *fixture) {
		f.respond(fakeapi.Text("a ", "b ", "c ", "d").CutAt(fakeapi.AfterDeltas(2)), fakeapi.Text("never served"))
		w := f.wrapped("")
		r := w.call(f.Context())
		f.contains(f.modelError(r.err).Message, "interrupted")
		f.same(r.got, []string{"text+", "text:a ", "text:b "}, "events")
		if len(w.sleeps.Waits()) != 0 || len(f.fake.Received()) != 1 {
			f.Error("retried after output")
		}
	}},
	{"ErrorEventBeforeOutputIsRetried", func(f *fixture) {
		f.respond(fakeapi.Text("a").FailAt(fakeapi.AfterDeltas(0), "overloaded"), fakeapi.Text("b").Usage(usage(1, 1)))
		w := f.wrapped("")
		f.events(w.call(f.Context()), "text+", "text:b", "text-", "finish:stop in=1 out=1 read=0 write=0 think=0")
		f.received(2)
	}},
	{"StallAfterOutput", func(f *fixture) {
		f.respond(fakeapi.Text("a ", "b ", "c").HangAt(fakeapi.AfterDeltas(1)), fakeapi.Text("never served"))
		w := f.wrapped("idle_timeout: 250ms")
		start := time.Now()
		r := w.call(f.Context())
		me := f.modelError(r.err)
		if me.Retryable {
			f.Errorf("error %+v is retryable after output", *me)
		}
		f.contains(me.Message, "stalled: nothing received for 250ms")
		f.same(r.got, []string{"text+", "text:a "}, "events")
		if d := time.Since(start); d < 250*time.Millisecond {
			f.Errorf("gave up after %v, before the idle timeout", d)
		}
		f.received(1)
	}},
	{"StallBeforeOutputIsRetried", func(f *fixture) {
		// The headers come, then nothing.
		f.respond(fakeapi.Text("a").HangAt(fakeapi.AfterDeltas(0)), fakeapi.Text("b").Usage(usage(1, 1)))
		w := f.wrapped("idle_timeout: 250ms")
		f.events(w.call(f.Context()), "text+", "text:b", "text-", "finish:stop in=1 out=1 read=0 write=0 think=0")
		f.received(2)
		if len(w.sleeps.Waits()) != 1 {
			f.Errorf("waits %v, want one backoff", w.sleeps.Waits())
		}
	}},
	{"NoFirstByte", func(f *fixture) {
		// A server that accepts the request and never answers.
		f.fake.SetDefaultReply(fakeapi.Text("a").HangAt(fakeapi.BeforeHeaders()))
		w := f.wrapped("first_byte_timeout: 250ms, max_attempts: 2")
		start := time.Now()
		me := f.modelError(w.call(f.Context()).err)
		if !me.Retryable || me.Provider != "up" || me.Message != "no response within 250ms (gave up after 2 attempts)" {
			f.Errorf("error %+v", *me)
		}
		if d := time.Since(start); d < 500*time.Millisecond {
			f.Errorf("gave up after %v, want 2 x 250ms", d)
		}
	}},
	{"CancelDuringBackoff", func(f *fixture) {
		f.respond(fakeapi.Failure(429, "slow down").Header("Retry-After", "30"))
		w := f.wrappedWith("", provider.Options{}) // the real sleep
		ctx, cancel := context.WithCancel(f.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		if r := w.call(ctx); !errors.Is(r.err, context.Canceled) {
			f.Fatalf("err = %v, want context.Canceled", r.err)
		}
		f.within(time.Since(start), 5*time.Second, "the cancelled call")
	}},
	{"CancelDuringStream", func(f *fixture) {
		f.respond(fakeapi.Text("a ", "b").HangAt(fakeapi.AfterDeltas(1)))
		w := f.wrappedWith("", provider.Options{})
		ctx, cancel := context.WithCancel(f.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		r := w.call(ctx)
		if !errors.Is(r.err, context.Canceled) {
			f.Fatalf("err = %v, want context.Canceled", r.err)
		}
		f.same(r.got, []string{"text+", "text:a "}, "events")
	}},
	{"Cost", func(f *fixture) {
		testCost(f, []costRow{
			// 1000 x $2 + 200 x $8 per million.
			{"no cache", fakeapi.Usage{Input: 1000, Output: 200}, 0.0036},
			// 600 x $2 + 400 x $0.50 + 200 x $8.
			{"cache read", fakeapi.Usage{Input: 1000, CacheRead: 400, Output: 200, Reasoning: 50}, 0.003},
		})
	}},
	{"CostCacheWrite", func(f *fixture) {
		testCost(f, []costRow{
			// 1000 x $2 + 8000 x $0.50 + 1000 x $3.75 + 500 x $8.
			{"read and write", fakeapi.Usage{Input: 10000, CacheRead: 8000, CacheWrite: 1000, Output: 500}, 0.01375},
			// 50 x $2 + 4000 x $3.75 + 200 x $8.
			{"write only", fakeapi.Usage{Input: 4050, CacheWrite: 4000, Output: 200}, 0.0167},
		})
	}},
}

type costRow struct {
	name string
	u    fakeapi.Usage
	cost float64
}

func testCost(f *fixture, rows []costRow) {
	for _, row := range rows {
		f.sub(row.name, func(f *fixture) {
			f.respond(fakeapi.Text("ok").Usage(row.u))
			r := f.wrapped("").call(f.Context())
			if r.err != nil || r.finish() == nil {
				f.Fatalf("events %q, %v", r.got, r.err)
			}
			got := r.finish().Usage
			want := forge.Usage{InputTokens: int64(row.u.Input), OutputTokens: int64(row.u.Output), CacheReadTokens: int64(row.u.CacheRead),
				CacheWriteTokens: int64(row.u.CacheWrite), ReasoningTokens: int64(row.u.Reasoning), Cost: got.Cost}
			f.same(got, want, "usage")
			if math.Abs(got.Cost-row.cost) > 1e-12 {
				f.Errorf("cost %v, want %v", got.Cost, row.cost)
			}
		})
	}
}

// wrappedModel is the provider as the registry builds it from a
// forge.yaml, with the backoff's waits recorded instead of slept.
type wrappedModel struct {
	f      *fixture
	m      forge.Model
	id     string
	sleeps *Sleeps
}

// wrapped builds the provider "up" of kind p.Kind against the fake, with
// the retry settings given, a configured header, a key and prices.
func (f *fixture) wrapped(retry string) *wrappedModel {
	s := &Sleeps{}
	w := f.wrappedWith(retry, provider.Options{Sleep: s.Sleep, Rand: func() float64 { return 0.5 }})
	w.sleeps = s
	return w
}

func (f *fixture) wrappedWith(retry string, o provider.Options) *wrappedModel {
	f.Helper()
	f.fake.SetAPIKey("sk-test-key")
	cfg, err := provider.ParseConfig("forge.yaml", fmt.Appendf(nil, `
providers:
  - name: up
    kind: %s
    base_url: %q
    api_key_env: FORGE_TEST_KEY
    headers: {X-Extra: "yes"}
retry: {%s}
models:
  - id: up/%s
    prices: {input: 2, output: 8, cached_input: 0.5, cache_write: 3.75}
`, f.p.Kind, f.fake.URL(), retry, f.p.ModelID))
	if err != nil {
		f.Fatal(err)
	}
	o.Getenv = func(k string) string { return map[string]string{"FORGE_TEST_KEY": "sk-test-key"}[k] }
	r, err := provider.Build(cfg, o)
	if err != nil {
		f.Fatal(err)
	}
	m, id, err := r.Resolve("up/" + f.p.ModelID)
	if err != nil {
		f.Fatal(err)
	}
	return &wrappedModel{f: f, m: m, id: id, sleeps: &Sleeps{}}
}

func (w *wrappedModel) call(ctx context.Context) reply {
	req := hello()
	req.Model = w.id
	return stream(ctx, w.m, req)
}

// waited fails unless the backoff waited want ("[2s 500ms]").
func (w *wrappedModel) waited(want string) {
	w.f.Helper()
	if got := fmt.Sprint(w.sleeps.Waits()); got != want {
		w.f.Errorf("waits %s, want %s", got, want)
	}
}
