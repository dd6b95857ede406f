// Package redis is the forge.Bus of several replicas, on Redis Streams
// (go-redis/v9): each session's live events, deltas included, are appended
// to a stream whose entry ids are their seqs, and published on the
// session's channel for the replicas that have subscribers. It also
// implements forge.WriterFence (one writer per session at a time, across
// replicas) and carries cancel signals between replicas.
//
// Retention (docs/distributed.md): while a turn runs, a session's stream
// keeps its newest events, at most Options.MaxLen (the oldest half is
// dropped when it is reached; the text of dropped deltas of parts still
// streaming is kept as their "text so far"); once no turn runs (after
// turn.done, or an event published outside any turn), the stream lives
// Options.Retention more, then Redis expires it. A reader never depends on
// it for what is stored: the event log merges the store with the stream.
//
// Subscribers: one Pub/Sub connection per Bus receives the events of the
// sessions it has subscribers for, and hands them to those subscribers;
// a subscriber that misses one (its buffer overflowed, the connection was
// re-established) reads the stream from its own position, which each
// entry's link to the one before it makes exact. A subscriber whose
// position was trimmed from the stream is cut off (forge.ErrLagged).
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/forge-runtime/forge"
)

var (
	_ forge.Bus         = (*Bus)(nil)
	_ forge.WriterFence = (*Bus)(nil)
)

// Defaults of Options.
const (
	DefaultPrefix     = "forge"
	DefaultBuffer     = 1024
	DefaultMaxLen     = 10_000
	DefaultRetention  = 30 * time.Second
	DefaultRunningTTL = 24 * time.Hour
	DefaultHoldTTL    = 10 * time.Second
)

// Connection pool defaults, applied unless the URL sets them
// (pool_size=..., min_idle_conns=..., and go-redis's other parameters).
const (
	DefaultPoolSize        = 32
	DefaultMinIdleConns    = 2
	DefaultConnMaxIdleTime = 5 * time.Minute
	DefaultDialTimeout     = 5 * time.Second
	DefaultReadTimeout     = 3 * time.Second
	DefaultWriteTimeout    = 3 * time.Second
)

// Options configure a Bus. Zero values take the defaults.
type Options struct {
	// Prefix starts every key and channel name, so that several Forge
	// deployments (or tests) can share one Redis.
	Prefix string
	// Buffer is how many events a subscriber may leave unread before it
	// reads the stream itself instead of being handed them.
	Buffer int
	// MaxLen bounds the events kept per session.
	MaxLen int
	// Retention is how long a session's events are kept once no turn runs.
	Retention time.Duration
	// RunningTTL bounds how long the events of a running turn are kept
	// without any publish (a safety net for turns nobody ends; recovery
	// normally ends them within three lease periods).
	RunningTTL time.Duration
	// HoldTTL bounds a writer hold: a process that dies holding a session
	// blocks its other writers at most this long.
	HoldTTL time.Duration
	// WriterID identifies this process as a writer (default: host name,
	// pid and random bytes; unique per process).
	WriterID string
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.MaxLen <= 0 {
		o.MaxLen = DefaultMaxLen
	}
	o.MaxLen = max(o.MaxLen, 2)
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.RunningTTL <= 0 {
		o.RunningTTL = DefaultRunningTTL
	}
	if o.HoldTTL <= 0 {
		o.HoldTTL = DefaultHoldTTL
	}
	if o.WriterID == "" {
		o.WriterID = NewWriterID()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// NewWriterID returns an id unique to this process: host name, pid and
// random bytes.
func NewWriterID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Bus is a forge.Bus on Redis. Build it with Open (or New), Close it.
type Bus struct {
	rdb    *goredis.Client
	owned  bool // Close closes rdb
	opts   Options
	log    *slog.Logger
	ps     *goredis.PubSub
	cancel string // the cancel signals' channel
	holds  atomic.Uint64
	wg     sync.WaitGroup
	closed chan struct{}

	mu       sync.Mutex // guards the following
	sessions map[string]map[*subscription]struct{}
	onCancel []func(forge.CancelSignal)
	done     bool
}

// Open connects to the Redis at rawURL (redis://[user:password@]host:port/db,
// or rediss:// for TLS) with the pool defaults above, checks that it
// answers, and returns a Bus owning the connection.
func Open(ctx context.Context, rawURL string, opts Options) (*Bus, error) {
	cfg, err := ClientOptions(rawURL)
	if err != nil {
		return nil, err
	}
	rdb := goredis.NewClient(cfg)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis: %s: %w", Redacted(rawURL), err)
	}
	b, err := New(ctx, rdb, opts)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// ClientOptions parses a redis:// URL and applies the pool defaults to
// what the URL does not set.
func ClientOptions(rawURL string) (*goredis.Options, error) {
	cfg, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: bad URL %s: %w", Redacted(rawURL), err)
	}
	given := map[string]bool{}
	if u, err := url.Parse(rawURL); err == nil {
		for k := range u.Query() {
			given[k] = true
		}
	}
	set := func(name string, apply func()) {
		if !given[name] {
			apply()
		}
	}
	set("pool_size", func() { cfg.PoolSize = DefaultPoolSize })
	set("min_idle_conns", func() { cfg.MinIdleConns = DefaultMinIdleConns })
	set("conn_max_idle_time", func() { cfg.ConnMaxIdleTime = DefaultConnMaxIdleTime })
	set("dial_timeout", func() { cfg.DialTimeout = DefaultDialTimeout })
	set("read_timeout", func() { cfg.ReadTimeout = DefaultReadTimeout })
	set("write_timeout", func() { cfg.WriteTimeout = DefaultWriteTimeout })
	if cfg.ClientName == "" {
		cfg.ClientName = "forge"
	}
	return cfg, nil
}

// Redacted is rawURL with its password hidden, for logs and errors.
func Redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "redis://(unparsable URL)"
	}
	return u.Redacted()
}

// New returns a Bus on rdb, which the caller keeps owning.
func New(ctx context.Context, rdb *goredis.Client, opts Options) (*Bus, error) {
	opts.defaults()
	b := &Bus{
		rdb:      rdb,
		opts:     opts,
		log:      opts.Logger,
		cancel:   opts.Prefix + ":cancel",
		closed:   make(chan struct{}),
		sessions: map[string]map[*subscription]struct{}{},
	}
	b.ps = rdb.Subscribe(ctx, b.cancel)
	b.wg.Add(1)
	go b.receive()
	return b, nil
}

// WriterID is this process's id as a session writer.
func (b *Bus) WriterID() string { return b.opts.WriterID }

// Ping checks that Redis answers (readiness).
func (b *Bus) Ping(ctx context.Context) error {
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Close stops the subscriptions' connection and waits for its goroutine;
// an owned client is closed too. Open subscriptions return
// forge.ErrSubscriptionClosed. It may be called more than once.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return nil
	}
	b.done = true
	subs := b.sessions
	b.sessions = map[string]map[*subscription]struct{}{}
	b.mu.Unlock()
	close(b.closed)
	for _, set := range subs {
		for s := range set {
			s.shut()
		}
	}
	err := b.ps.Close()
	b.wg.Wait()
	if b.owned {
		if cerr := b.rdb.Close(); err == nil {
			err = cerr
		}
	}
	if errors.Is(err, goredis.ErrClosed) {
		err = nil
	}
	return err
}

// keys of one session: they share a hash slot ({session}).
type keys struct {
	stream, open, meta, hold, channel string
}

func (b *Bus) keys(session string) keys {
	p := b.opts.Prefix + ":{" + session + "}:"
	return keys{stream: p + "s", open: p + "o", meta: p + "m", hold: p + "w", channel: p + "c"}
}

// sessionOf is the session of a session channel, "" for another channel.
func (b *Bus) sessionOf(channel string) string {
	p := b.opts.Prefix + ":{"
	if len(channel) < len(p)+4 || channel[:len(p)] != p || channel[len(channel)-3:] != "}:c" {
		return ""
	}
	return channel[len(p) : len(channel)-3]
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }
