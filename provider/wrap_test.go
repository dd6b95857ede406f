package provider_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
)

// funcModel is a forge.Model made of a function; calls counts its calls.
type funcModel struct {
	calls atomic.Int32
	f     func(ctx context.Context, call int, yield func(forge.ModelEvent, error) bool)
}

func (m *funcModel) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		m.f(ctx, int(m.calls.Add(1)), yield)
	}
}

func text(s string) forge.ModelEvent { return forge.ModelEvent{Type: forge.TextDelta, Delta: s} }

// block waits for ctx and reports its error, as providers do.
func block(ctx context.Context, yield func(forge.ModelEvent, error) bool) {
	<-ctx.Done()
	yield(forge.ModelEvent{}, ctx.Err())
}

func drain(ctx context.Context, m forge.Model) (string, error) {
	var b strings.Builder
	for ev, err := range m.Stream(ctx, &forge.ModelRequest{}) {
		if err != nil {
			return b.String(), err
		}
		b.WriteString(ev.Delta)
	}
	return b.String(), nil
}

func zero() float64 { return 0 }

func TestWrapFirstByteTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fm := &funcModel{f: func(ctx context.Context, _ int, yield func(forge.ModelEvent, error) bool) { block(ctx, yield) }}
		m := provider.Wrap(fm, provider.WrapOptions{Provider: "p", Rand: zero})
		start := time.Now()
		_, err := drain(t.Context(), m)
		var me *forge.ModelError
		if !errors.As(err, &me) || !me.Retryable || me.Message != "no response within 1m0s (gave up after 4 attempts)" {
			t.Fatalf("err = %#v", err)
		}
		if d := time.Since(start); d != 4*time.Minute || fm.calls.Load() != 4 {
			t.Errorf("took %v over %d calls, want 4m over 4", d, fm.calls.Load())
		}
	})
}

func TestWrapIdleTimeoutAfterOutput(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fm := &funcModel{f: func(ctx context.Context, _ int, yield func(forge.ModelEvent, error) bool) {
			time.Sleep(10 * time.Second)
			if yield(text("a"), nil) {
				block(ctx, yield)
			}
		}}
		m := provider.Wrap(fm, provider.WrapOptions{Provider: "p", Policy: provider.RetryPolicy{IdleTimeout: 30 * time.Second}})
		start := time.Now()
		out, err := drain(t.Context(), m)
		var me *forge.ModelError
		if !errors.As(err, &me) || me.Retryable || out != "a" {
			t.Fatalf("out %q, err = %#v", out, err)
		}
		if d := time.Since(start); d != 40*time.Second || fm.calls.Load() != 1 {
			t.Errorf("took %v over %d calls, want 40s over 1", d, fm.calls.Load())
		}
	})
}

// The consumer's own time (writing an event to the store, a slow
// subscriber) is not the provider's silence.
func TestWrapConsumerTimeDoesNotCount(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fm := &funcModel{f: func(ctx context.Context, _ int, yield func(forge.ModelEvent, error) bool) {
			for i := range 5 {
				time.Sleep(50 * time.Second)
				if ctx.Err() != nil {
					yield(forge.ModelEvent{}, ctx.Err())
					return
				}
				if !yield(text(fmt.Sprint(i)), nil) {
					return
				}
			}
		}}
		m := provider.Wrap(fm, provider.WrapOptions{Provider: "p"})
		var out strings.Builder
		for ev, err := range m.Stream(t.Context(), &forge.ModelRequest{}) {
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString(ev.Delta)
			time.Sleep(5 * time.Minute)
		}
		if out.String() != "01234" {
			t.Errorf("out %q", out.String())
		}
	})
}

func TestWrapBackoff(t *testing.T) {
	t.Parallel()
	fm := &funcModel{f: func(ctx context.Context, _ int, yield func(forge.ModelEvent, error) bool) {
		yield(forge.ModelEvent{}, &forge.ModelError{Provider: "p", StatusCode: 529, Message: "overloaded", Retryable: true})
	}}
	var s sleeps
	m := provider.Wrap(fm, provider.WrapOptions{Provider: "p", Sleep: s.sleep, Rand: func() float64 { return 0.5 },
		Policy: provider.RetryPolicy{MaxAttempts: 7, BaseDelay: time.Second, MaxDelay: 10 * time.Second}})
	_, err := drain(t.Context(), m)
	var me *forge.ModelError
	if !errors.As(err, &me) || me.StatusCode != 529 || me.Message != "overloaded (gave up after 7 attempts)" {
		t.Fatalf("err = %v", err)
	}
	if got := fmt.Sprint(s.get()); got != "[500ms 1s 2s 4s 5s 5s]" {
		t.Errorf("waits %s", got)
	}
}

func TestWrapRetryAfterAndCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fm := &funcModel{f: func(ctx context.Context, call int, yield func(forge.ModelEvent, error) bool) {
			if call == 1 {
				yield(forge.ModelEvent{}, &forge.ModelError{Provider: "p", StatusCode: 429, Retryable: true, RetryAfter: 7 * time.Second})
				return
			}
			yield(text("ok"), nil)
		}}
		m := provider.Wrap(fm, provider.WrapOptions{Provider: "p"})
		start := time.Now()
		if out, err := drain(t.Context(), m); err != nil || out != "ok" {
			t.Fatalf("%q, %v", out, err)
		}
		if d := time.Since(start); d != 7*time.Second {
			t.Errorf("waited %v, want the 7s Retry-After", d)
		}

		// Cancelled 5s into a capped 10-minute Retry-After.
		fm.calls.Store(0)
		fm.f = func(ctx context.Context, call int, yield func(forge.ModelEvent, error) bool) {
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: "p", StatusCode: 429, Retryable: true, RetryAfter: 10 * time.Minute})
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(5*time.Second, cancel)
		start = time.Now()
		if _, err := drain(ctx, m); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if d := time.Since(start); d != 5*time.Second || fm.calls.Load() != 1 {
			t.Errorf("took %v over %d calls", d, fm.calls.Load())
		}
	})
}

func TestWrapPassThrough(t *testing.T) {
	t.Parallel()
	plain := errors.New("not a model error")
	fm := &funcModel{f: func(ctx context.Context, call int, yield func(forge.ModelEvent, error) bool) {
		switch call {
		case 1:
			yield(forge.ModelEvent{}, plain)
		case 2: // nothing at all
		case 3:
			for _, s := range []string{"a", "b", "c"} {
				if !yield(text(s), nil) {
					return
				}
			}
			t.Error("the consumer's stop was not passed on")
		}
	}}
	var s sleeps
	m := provider.Wrap(fm, provider.WrapOptions{Provider: "p", Sleep: s.sleep})
	if _, err := drain(t.Context(), m); err != plain {
		t.Errorf("err = %v", err)
	}
	if out, err := drain(t.Context(), m); out != "" || err != nil {
		t.Errorf("empty stream: %q %v", out, err)
	}
	for ev := range m.Stream(t.Context(), &forge.ModelRequest{}) {
		if ev.Delta == "b" {
			break
		}
	}
	if fm.calls.Load() != 3 || len(s.get()) != 0 {
		t.Errorf("%d calls, waits %v", fm.calls.Load(), s.get())
	}
}

func TestWrapScrubsSecrets(t *testing.T) {
	t.Parallel()
	fm := &funcModel{f: func(ctx context.Context, call int, yield func(forge.ModelEvent, error) bool) {
		yield(forge.ModelEvent{}, &forge.ModelError{Provider: "p", StatusCode: 401, Message: "bad key sk-ant-secret-value, header tok-123456"})
	}}
	m := provider.Wrap(fm, provider.WrapOptions{Provider: "p", Secrets: []string{"sk-ant-secret-value", "tok-123456", "", "x"}})
	_, err := drain(t.Context(), m)
	if err == nil || err.Error() != "p: status 401: bad key [redacted], header [redacted]" {
		t.Errorf("err = %v", err)
	}
}

func TestWrapCost(t *testing.T) {
	t.Parallel()
	finish := &forge.Finish{Reason: forge.FinishStop,
		Usage: forge.Usage{InputTokens: 1000, CacheReadTokens: 8000, CacheWriteTokens: 1000, OutputTokens: 500}}
	fm := &funcModel{f: func(ctx context.Context, call int, yield func(forge.ModelEvent, error) bool) {
		yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: finish}, nil)
	}}
	prices := &provider.Prices{Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75}
	for _, tc := range []struct {
		want float64
	}{
		// A 1000-token prompt that includes its cache reads and writes:
		// nothing is left uncached, so 8000 x 0.3 + 1000 x 3.75 + 500 x 15
		// per million.
		{0.01365},
	} {
		m := provider.Wrap(fm, provider.WrapOptions{Provider: "p", Prices: prices})
		for ev, err := range m.Stream(t.Context(), &forge.ModelRequest{}) {
			if err != nil || ev.Finish.Usage.Cost != tc.want {
				t.Errorf("cost %v, %v; want %v", ev.Finish.Usage.Cost, err, tc.want)
			}
			if u := ev.Finish.Usage; u.InputTokens != 1000 || u.CacheReadTokens != 8000 {
				t.Errorf("usage changed: %+v", u)
			}
		}
	}
	if finish.Usage.Cost != 0 {
		t.Errorf("the provider's Finish was modified")
	}
}

func TestPricesCost(t *testing.T) {
	t.Parallel()
	p := &provider.Prices{Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75}
	u := forge.Usage{InputTokens: 10000, CacheReadTokens: 6000, CacheWriteTokens: 2000, OutputTokens: 1000, ReasoningTokens: 400}
	// 2000 x 3 + 6000 x 0.3 + 2000 x 3.75 + 1000 x 15 = 30300 per million.
	if c := p.Cost(u); c != 0.0303 {
		t.Errorf("cost %v", c)
	}
	p.CacheWrite = 0 // cache writes at the input price
	if c := p.Cost(u); c != 0.0288 {
		t.Errorf("cost %v", c)
	}
	if c := (*provider.Prices)(nil).Cost(u); c != 0 {
		t.Errorf("nil prices cost %v", c)
	}
	// Inconsistent figures never give a negative cost.
	if c := p.Cost(forge.Usage{InputTokens: 10, CacheReadTokens: 50}); c < 0 {
		t.Errorf("cost %v", c)
	}
}
