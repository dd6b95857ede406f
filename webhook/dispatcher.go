// Package webhook delivers the events tenants subscribe to (API.md,
// "Webhooks") from the store's durable outbox: every replica runs a
// Dispatcher; each claims due deliveries (a claim is one replica's, for a
// while), sends them signed as Standard Webhooks prescribes, and records
// each attempt's outcome, with the next retry, on the delivery's row.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// Store is what the dispatcher needs of the store.
type Store interface {
	ClaimDeliveries(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*forge.DueDelivery, error)
	RecordDelivery(ctx context.Context, d *forge.WebhookDelivery, owner string, r forge.DeliveryResult) error
}

// Config configures a Dispatcher. Zero fields take the defaults.
type Config struct {
	// Owner names this replica in its claims (required).
	Owner string
	// AllowPrivate lets deliveries reach loopback and private addresses
	// (--allow-private-webhooks).
	AllowPrivate bool
	// Poll is how often the outbox is read for due deliveries (500 ms).
	Poll time.Duration
	// Timeout bounds one attempt, answer included (10 s).
	Timeout time.Duration
	// Concurrency bounds the attempts in flight (32), PerEndpoint those
	// to one endpoint (4): a slow endpoint holds at most that many.
	Concurrency, PerEndpoint int
	// Backoff is the delay before each retry, the last repeated (nil:
	// DefaultBackoff). A delivery is retried for 24 h from its event.
	Backoff []time.Duration
	Clock   forge.Clock
	Log     *slog.Logger
	// Transport, when set, replaces the guarded transport (tests only).
	Transport http.RoundTripper
}

// DefaultBackoff: the first retry within about 5 s, then slower, every
// 4 h at most, so that a day's retries number about a dozen.
var DefaultBackoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
	30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour}

// Dispatcher sends deliveries. Start starts its loop; Close stops it and
// waits for the attempts in flight.
type Dispatcher struct {
	cfg    Config
	store  Store
	client *http.Client
	wake   chan struct{}

	stop context.CancelFunc
	ctx  context.Context
	wg   sync.WaitGroup // the loop and the attempts
	slot chan struct{}  // one token per attempt in flight

	mu        sync.Mutex // guards the following
	endpoints map[string]chan struct{}
}

// New returns a dispatcher of store's outbox.
func New(store Store, cfg Config) *Dispatcher {
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = 4
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	rt := cfg.Transport
	if rt == nil {
		dialer := &net.Dialer{Timeout: cfg.Timeout, Control: control(cfg.AllowPrivate)}
		rt = &http.Transport{
			Proxy:                 nil, // a proxy would dial for us, past the guard
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConnsPerHost:   cfg.PerEndpoint,
			IdleConnTimeout:       90 * time.Second,
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Dispatcher{
		cfg:   cfg,
		store: store,
		client: &http.Client{Transport: rt, Timeout: cfg.Timeout,
			// A redirect is an answer like any other: not 2xx, so a
			// failure; following it could lead past the guard's intent
			// (to another path of a refused host, or to a public host
			// the tenant did not name).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		wake:      make(chan struct{}, 1),
		ctx:       ctx,
		stop:      stop,
		slot:      make(chan struct{}, cfg.Concurrency),
		endpoints: map[string]chan struct{}{},
	}
}

// Start starts the loop.
func (d *Dispatcher) Start() {
	d.wg.Add(1)
	go d.run()
}

// Wake asks for a read of the outbox now (a write that queued deliveries
// on this replica).
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Close stops claiming and waits, until ctx ends, for the attempts in
// flight; those cut short are retried once their claim expires.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.stop()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimTTL is how long a claim keeps other replicas off a delivery: an
// attempt's timeout and the wait for its endpoint's turn, with margin.
func (d *Dispatcher) claimTTL() time.Duration { return 6*d.cfg.Timeout + time.Minute }

func (d *Dispatcher) run() {
	defer d.wg.Done()
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		for d.dispatch() {
		}
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

// dispatch claims what it has room for and starts the attempts; it
// reports whether it filled its room (more may be due).
func (d *Dispatcher) dispatch() bool {
	room := cap(d.slot) - len(d.slot)
	if room == 0 || d.ctx.Err() != nil {
		return false
	}
	due, err := d.store.ClaimDeliveries(d.ctx, d.cfg.Owner, d.claimTTL(), room)
	if err != nil {
		if d.ctx.Err() == nil {
			d.cfg.Log.Warn("webhook outbox: claim failed", "err", err)
		}
		return false
	}
	for _, dd := range due {
		d.slot <- struct{}{}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { <-d.slot }()
			d.attempt(dd)
		}()
	}
	return len(due) == room
}

// endpoint is the semaphore of one endpoint's attempts.
func (d *Dispatcher) endpoint(id string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	sem, ok := d.endpoints[id]
	if !ok {
		sem = make(chan struct{}, d.cfg.PerEndpoint)
		d.endpoints[id] = sem
	}
	return sem
}

func (d *Dispatcher) attempt(dd *forge.DueDelivery) {
	sem := d.endpoint(dd.WebhookID)
	select {
	case sem <- struct{}{}:
	case <-d.ctx.Done():
		return // the claim expires; another attempt follows
	}
	defer func() { <-sem }()
	r := d.send(dd)
	if !r.Delivered {
		r.RetryIn = d.retryIn(dd.Attempts)
	}
	// The outcome is recorded even while closing: it happened.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), d.cfg.Timeout)
	defer cancel()
	if err := d.store.RecordDelivery(ctx, &dd.WebhookDelivery, d.cfg.Owner, r); err != nil && !errors.Is(err, forge.ErrNotFound) {
		d.cfg.Log.Warn("webhook outbox: recording an attempt failed", "delivery", dd.ID, "webhook", dd.WebhookID, "err", err)
	}
}

// retryIn is the delay after the attempts+1'th attempt failed, with a
// tenth of jitter so that endpoints failing together do not retry
// together.
func (d *Dispatcher) retryIn(attempts int) time.Duration {
	b := d.cfg.Backoff[min(attempts, len(d.cfg.Backoff)-1)]
	return b - b/10 + rand.N(b/5+1)
}

// Body is what an endpoint receives: the Standard Webhooks payload.
type Body struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// maxErrorBytes bounds what of an answer's body an error keeps.
const maxErrorBytes = 256

func (d *Dispatcher) send(dd *forge.DueDelivery) forge.DeliveryResult {
	if dd.URL == "" {
		return forge.DeliveryResult{Error: "the webhook was deleted"}
	}
	var ev struct {
		CreatedAt time.Time `json:"created_at"`
	}
	if err := json.Unmarshal(dd.Payload, &ev); err != nil {
		return forge.DeliveryResult{Error: "the stored event is not JSON: " + err.Error()}
	}
	body, err := json.Marshal(Body{Type: dd.EventType, Timestamp: ev.CreatedAt, Data: dd.Payload})
	if err != nil {
		return forge.DeliveryResult{Error: err.Error()}
	}
	ts := d.cfg.Clock.Now().Unix()
	sig, err := Sign(dd.Secret, dd.ID, ts, body)
	if err != nil {
		return forge.DeliveryResult{Error: err.Error()}
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dd.URL, bytes.NewReader(body))
	if err != nil {
		return forge.DeliveryResult{Error: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Forge-Webhooks/1")
	req.Header.Set("webhook-id", dd.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := d.client.Do(req)
	if err != nil {
		return forge.DeliveryResult{Error: attemptError(err)}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	r := forge.DeliveryResult{ResponseCode: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r.Delivered = true
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		r.Error = fmt.Sprintf("%s: redirects are not followed", resp.Status)
	default:
		r.Error = resp.Status
		if s := bytes.TrimSpace(snippet); len(s) > 0 {
			r.Error += ": " + string(bytes.ToValidUTF8(s, []byte("?")))
		}
	}
	return r
}

// attemptError is what an attempt that got no answer records.
func attemptError(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrAddressRefused):
		return "refused: " + err.Error()
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout: " + err.Error()
	}
	return err.Error()
}
