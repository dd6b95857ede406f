package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/wire"
)

// RetryPolicy is how a model call is retried and timed out. Zero fields
// take the defaults (DefaultRetryPolicy); a negative timeout disables it.
type RetryPolicy struct {
	// MaxAttempts is the number of tries of one call, the first included
	// (default 4; 1 never retries).
	MaxAttempts int
	// BaseDelay and MaxDelay bound the exponential backoff: before retry n
	// the wait is uniformly random in [0, min(MaxDelay, BaseDelay*2^(n-1)))
	// ("full jitter"; defaults 1 s and 30 s).
	BaseDelay, MaxDelay time.Duration
	// MaxRetryAfter caps a provider's Retry-After hint, which replaces the
	// backoff when present (default 60 s).
	MaxRetryAfter time.Duration
	// FirstByteTimeout is how long a call may go without any response
	// (default 60 s): the call fails retryable.
	FirstByteTimeout time.Duration
	// IdleTimeout is how long a response may go without receiving anything
	// (a byte on the wire, or an event) once it started (default 60 s).
	// Time the consumer spends handling an event does not count. The call
	// fails, retryable only if no event was passed on yet.
	IdleTimeout time.Duration
}

// DefaultRetryPolicy returns the defaults.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 4, BaseDelay: time.Second, MaxDelay: 30 * time.Second,
		MaxRetryAfter: 60 * time.Second, FirstByteTimeout: 60 * time.Second, IdleTimeout: 60 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = d.MaxRetryAfter
	}
	if p.FirstByteTimeout == 0 {
		p.FirstByteTimeout = d.FirstByteTimeout
	}
	if p.IdleTimeout == 0 {
		p.IdleTimeout = d.IdleTimeout
	}
	return p
}

// WrapOptions configures Wrap.
type WrapOptions struct {
	// Provider and Model name the call in logs and in timeout errors.
	Provider, Model string
	Policy          RetryPolicy
	// NoRetry turns retries and timeouts off (the wrapper only computes
	// cost), as for the scripted provider.
	NoRetry bool
	// Prices, when set, give Finish.Usage.Cost (Prices.Cost). Nil keeps
	// whatever the provider reported.
	Prices *Prices
	// Secrets are scrubbed from error messages (API keys, secret headers).
	Secrets []string
	Logger  *slog.Logger
	// Sleep waits d or until ctx ends (tests make it instant); nil waits on
	// a timer. Rand returns a number in [0, 1) for the jitter; nil uses
	// math/rand.
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

// Wrap returns m with the reliability policy of real providers:
//
//   - A call that fails with a *forge.ModelError marked Retryable before it
//     passed on any event is tried again, up to Policy.MaxAttempts tries,
//     after the provider's Retry-After (capped by MaxRetryAfter) or an
//     exponential backoff with full jitter. Once an event was passed on, an
//     error passes through as it is: output is never duplicated.
//   - A call that receives nothing within FirstByteTimeout, or nothing for
//     IdleTimeout once the response started, is aborted with a ModelError
//     (retryable while no event was passed on).
//   - Cancelling ctx ends the call and any wait at once, with ctx's error.
//   - The FinishEvent's Usage.Cost is computed from Prices.
//   - Secrets never appear in the errors it returns or logs.
//
// Retry-After hints and wire activity are seen by the HTTP transport of
// registry-built providers (see newTransport); other models still get the
// ModelError's own RetryAfter and per-event activity.
func Wrap(m forge.Model, o WrapOptions) forge.Model {
	o.Policy = o.Policy.withDefaults()
	if o.NoRetry {
		o.Policy.MaxAttempts = 1
		o.Policy.FirstByteTimeout, o.Policy.IdleTimeout = -1, -1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	secrets := o.Secrets[:0:0]
	for _, s := range o.Secrets {
		// Very short values would scrub ordinary words.
		if len(s) >= 6 {
			secrets = append(secrets, s)
		}
	}
	o.Secrets = secrets
	return &wrapped{m: m, o: o}
}

type wrapped struct {
	m forge.Model
	o WrapOptions
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stream implements forge.Model.
func (w *wrapped) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		p := w.o.Policy
		for attempt := 1; ; attempt++ {
			done, err := w.attempt(ctx, req, yield)
			if done {
				return
			}
			if ctx.Err() != nil {
				yield(forge.ModelEvent{}, ctx.Err())
				return
			}
			var me *forge.ModelError
			if !errors.As(err, &me) || !me.Retryable || attempt >= p.MaxAttempts {
				if me != nil && me.Retryable && attempt > 1 {
					e := *me
					e.Message = fmt.Sprintf("%s (gave up after %d attempts)", e.Message, attempt)
					err = &e
				}
				yield(forge.ModelEvent{}, w.scrub(err))
				return
			}
			wait := w.backoff(attempt, me.RetryAfter)
			w.o.Logger.Warn("model call failed, retrying", "provider", w.o.Provider, "model", w.o.Model,
				"attempt", attempt, "max_attempts", p.MaxAttempts, "wait", wait,
				"status", me.StatusCode, "err", w.scrubString(me.Message))
			if err := w.o.Sleep(ctx, wait); err != nil || ctx.Err() != nil {
				yield(forge.ModelEvent{}, ctx.Err())
				return
			}
		}
	}
}

// backoff is the wait before retry number attempt (1-based).
func (w *wrapped) backoff(attempt int, hint time.Duration) time.Duration {
	p := w.o.Policy
	if hint > 0 {
		return min(hint, p.MaxRetryAfter)
	}
	ceil := p.BaseDelay
	for i := 1; i < attempt && ceil < p.MaxDelay; i++ {
		ceil *= 2
	}
	ceil = min(ceil, p.MaxDelay)
	r := w.o.Rand()
	if r < 0 || r >= 1 {
		r = 0
	}
	return time.Duration(r * float64(ceil))
}

// Causes of an attempt aborted by its watchdog.
var (
	errNoFirstByte = errors.New("no response in time")
	errIdle        = errors.New("response stalled")
)

// attempt makes one call. done reports that the call is over for the
// caller (it finished, the consumer stopped, or an error was passed on
// after output); otherwise err is the failure, nothing having been yielded.
func (w *wrapped) attempt(ctx context.Context, req *forge.ModelRequest, yield func(forge.ModelEvent, error) bool) (done bool, err error) {
	p := w.o.Policy
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := newWatchdog(p.FirstByteTimeout, p.IdleTimeout, cancel)
	defer wd.stop()
	st := &callState{wd: wd}
	actx = context.WithValue(actx, callStateKey{}, st)

	started := false
	for ev, err := range w.m.Stream(actx, req) {
		if err != nil {
			err = w.classify(ctx, actx, err, started, st)
			if started {
				yield(forge.ModelEvent{}, w.scrub(err))
				return true, nil
			}
			return false, err
		}
		wd.touch()
		started = true
		if ev.Type == forge.FinishEvent && ev.Finish != nil && w.o.Prices != nil {
			f := *ev.Finish
			f.Usage.Cost = w.o.Prices.Cost(f.Usage)
			ev.Finish = &f
		}
		wd.pause()
		if !yield(ev, nil) {
			return true, nil
		}
		wd.resume()
	}
	return true, nil
}

// classify turns an attempt's error into what the caller sees: a watchdog
// abort becomes a timeout ModelError, and a Retry-After seen on the wire
// is added to a ModelError without one.
func (w *wrapped) classify(ctx, actx context.Context, err error, started bool, st *callState) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch cause := context.Cause(actx); cause {
	case errNoFirstByte:
		return &forge.ModelError{Provider: w.o.Provider, Retryable: true,
			Message: fmt.Sprintf("no response within %s", w.o.Policy.FirstByteTimeout)}
	case errIdle:
		return &forge.ModelError{Provider: w.o.Provider, Retryable: !started,
			Message: fmt.Sprintf("the response stalled: nothing received for %s", w.o.Policy.IdleTimeout)}
	}
	var me *forge.ModelError
	if errors.As(err, &me) && me.RetryAfter == 0 {
		if d := st.hint(); d > 0 {
			e := *me
			e.RetryAfter = d
			return &e
		}
	}
	return err
}

func (w *wrapped) scrubString(s string) string {
	for _, sec := range w.o.Secrets {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	return s
}

// scrub removes secrets from err's message.
func (w *wrapped) scrub(err error) error {
	if err == nil || len(w.o.Secrets) == 0 {
		return err
	}
	var me *forge.ModelError
	if errors.As(err, &me) {
		if msg := w.scrubString(me.Message); msg != me.Message {
			e := *me
			e.Message = msg
			return &e
		}
		return err
	}
	if msg := w.scrubString(err.Error()); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}

// watchdog aborts an attempt that receives nothing for too long: first
// for FirstByteTimeout from the start, then for IdleTimeout after the last
// activity. It is paused while the consumer handles an event.
type watchdog struct {
	mu         sync.Mutex
	timer      *time.Timer
	first      time.Duration // <0: none
	idle       time.Duration // <0: none
	start      time.Time
	last       time.Time
	active     bool // some activity was seen
	paused     bool
	over       bool
	cancel     context.CancelCauseFunc
	retryAfter time.Duration
}

func newWatchdog(first, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{first: first, idle: idle, cancel: cancel, start: time.Now()}
	w.mu.Lock()
	w.arm(first)
	w.mu.Unlock()
	return w
}

// arm (re)starts the timer for d; d <= 0 stops it.
func (w *watchdog) arm(d time.Duration) {
	switch {
	case d <= 0:
		if w.timer != nil {
			w.timer.Stop()
		}
	case w.timer == nil:
		w.timer = time.AfterFunc(d, w.fire)
	default:
		w.timer.Reset(d)
	}
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over || w.paused {
		return
	}
	limit, from, cause := w.first, w.start, errNoFirstByte
	if w.active {
		limit, from, cause = w.idle, w.last, errIdle
	}
	if limit <= 0 {
		return
	}
	if left := limit - time.Since(from); left > 0 {
		w.timer.Reset(left) // activity since the timer was set
		return
	}
	w.over = true
	w.cancel(cause)
}

// touch records activity (bytes received, an event); cheap enough to be
// called on every read.
func (w *watchdog) touch() {
	w.mu.Lock()
	w.last = time.Now()
	if !w.active {
		w.active = true
		if !w.over && !w.paused {
			w.arm(w.idle)
		}
	}
	w.mu.Unlock()
}

func (w *watchdog) pause() {
	w.mu.Lock()
	w.paused = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

func (w *watchdog) resume() {
	w.mu.Lock()
	w.paused = false
	w.last = time.Now()
	if !w.over {
		w.arm(w.idle)
	}
	w.mu.Unlock()
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.over = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

// callState is what the transport reports to the attempt it serves,
// through the request's context.
type callState struct {
	wd *watchdog
}

type callStateKey struct{}

func (s *callState) setHint(d time.Duration) {
	s.wd.mu.Lock()
	s.wd.retryAfter = d
	s.wd.mu.Unlock()
}

func (s *callState) hint() time.Duration {
	s.wd.mu.Lock()
	defer s.wd.mu.Unlock()
	return s.wd.retryAfter
}

// transport is the HTTP transport of registry-built providers: it adds the
// provider's configured headers, and reports to the wrapper's attempt (via
// the request context) every byte received and the Retry-After of an error
// answer.
type transport struct {
	base   http.RoundTripper
	header http.Header
}

func newTransport(base http.RoundTripper, header http.Header) *transport {
	return &transport{base: base, header: header}
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.header) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.header {
			req.Header[k] = v
		}
	}
	res, err := t.base.RoundTrip(req)
	st, _ := req.Context().Value(callStateKey{}).(*callState)
	if err != nil || res == nil || st == nil {
		return res, err
	}
	st.wd.touch()
	if c := res.StatusCode; c == http.StatusTooManyRequests || c == http.StatusRequestTimeout || c >= 500 {
		if d := wire.RetryAfter(res.Header, time.Now()); d > 0 {
			st.setHint(d)
		}
	}
	if res.Body != nil {
		res.Body = &watchedBody{ReadCloser: res.Body, wd: st.wd}
	}
	return res, nil
}

type watchedBody struct {
	io.ReadCloser
	wd *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.wd.touch()
	}
	return n, err
}
