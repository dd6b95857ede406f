// Package redis is the forge.Bus of several replicas, on Redis Streams
// (go-redis/v9): each session's live events, deltas included, are appended
// to a stream whose entry ids are their seqs, and published on the
// session's channel for the replicas that have subscribers. It also
// implements forge.WriterFence (one writer per session at a time, across
// replicas) and carries cancel signals between replicas.
//
// Retention (docs/distributed.md): while a turn runs, a session's stream
// keeps its newest events, at most Options.MaxLen (the oldest half is
// dropped when it is reached; the deltas of parts still streaming are
// covered by the "text so far" rows the event log publishes with its
// events, which the stream's session keeps, one per part); once no turn runs (after
// turn.done, or an event published outside any turn), the stream lives
// Options.Retention more, then Redis expires it. A reader never depends on
// it for what is stored: the event log merges the store with the stream.
//
// Subscribers: one Pub/Sub connection per Bus (per server, sharded)
// receives the events of the sessions it has subscribers for, and hands them to those subscribers;
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
	"strconv"
	"strings"
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
	DefaultGroupWait  = 5 * time.Millisecond
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
	// GroupWait is how long the leader of a group of unheld publishes
	// (groups.go) waits for other sessions' deltas to join it, when the
	// last group had company: up to this much added to a delta's way to
	// the readers, for fewer and larger script calls. Negative: never
	// wait (a group is what queued while the last one was on the wire).
	GroupWait time.Duration
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
	if o.GroupWait == 0 {
		o.GroupWait = DefaultGroupWait
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

// Bus is a forge.Bus on Redis: on one server, or sharded over several
// (Open with a comma-separated list of URLs). Build it with Open (or New),
// Close it.
//
// Sharding (docs/distributed.md "Sharding Redis"): every key and channel
// of a session lives on the node its id hashes to (rendezvous hashing over
// the nodes' addresses), so each session's scripts stay atomic on one
// server; a named lock lives on the node its name hashes to; a cancel
// signal goes out on the node of its session, and every replica listens
// on every node. Each node has its own pool and its own Pub/Sub
// connection: a node that is down stops only its own sessions.
type Bus struct {
	nodes  []*node
	owned  bool // Close closes the nodes' clients
	opts   Options
	log    *slog.Logger
	cancel string // the cancel signals' channel (on every node)
	holds  atomic.Uint64
	wg     sync.WaitGroup
	closed chan struct{}

	mu       sync.Mutex // guards the following
	onCancel []func(forge.CancelSignal)
}

// node is one Redis server of the Bus, with the sessions this process
// subscribes to there.
type node struct {
	rdb *goredis.Client
	// id is what the hash ranks: the server's address and database
	// (host:port/db), not its URL's password or pool settings.
	id   string
	ps   *goredis.PubSub
	hash uint64 // of id, the rendezvous seed
	// unheld sends the sessions' unheld publishes in groups (groups.go).
	unheld publishGroups

	mu       sync.Mutex // guards the following; never held across another node's
	sessions map[string]map[*subscription]struct{}
	done     bool
}

// Open connects to the Redis at rawURL (redis://[user:password@]host:port/db,
// or rediss:// for TLS) with the pool defaults above, checks that it
// answers, and returns a Bus owning the connection. rawURL may list
// several servers separated by commas: sessions are then sharded over
// them (see Bus), and every one of them must answer now.
func Open(ctx context.Context, rawURL string, opts Options) (*Bus, error) {
	cfgs, err := parseURLs(rawURL)
	if err != nil {
		return nil, err
	}
	rdbs := make([]*goredis.Client, 0, len(cfgs))
	closeAll := func() {
		for _, c := range rdbs {
			_ = c.Close()
		}
	}
	for _, cfg := range cfgs {
		rdbs = append(rdbs, goredis.NewClient(cfg.opts))
	}
	for i, c := range rdbs {
		if err := c.Ping(ctx).Err(); err != nil {
			closeAll()
			return nil, fmt.Errorf("redis: %s: %w", Redacted(cfgs[i].url), err)
		}
	}
	b, err := NewSharded(ctx, rdbs, opts)
	if err != nil {
		closeAll()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// nodeURL is one element of a list of Redis URLs, parsed.
type nodeURL struct {
	url  string
	opts *goredis.Options
}

// CheckURLs reports what is wrong with a --redis value (one URL, or a
// comma-separated list of shards) without connecting to anything.
func CheckURLs(raw string) error {
	_, err := parseURLs(raw)
	return err
}

// parseURLs parses a comma-separated list of redis:// URLs (one, or the
// shards of a sharded Bus): an empty element, a URL that does not parse
// and two URLs naming one server (address and database) are errors.
func parseURLs(raw string) ([]nodeURL, error) {
	parts := strings.Split(raw, ",")
	out := make([]nodeURL, 0, len(parts))
	seen := map[string]int{}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			if len(parts) == 1 {
				return nil, fmt.Errorf("redis: no URL given")
			}
			return nil, fmt.Errorf("redis: URL %d of %d in the list is empty", i+1, len(parts))
		}
		cfg, err := ClientOptions(p)
		if err != nil {
			if len(parts) > 1 {
				return nil, fmt.Errorf("redis: URL %d of %d: %w", i+1, len(parts), err)
			}
			return nil, err
		}
		id := nodeID(cfg)
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("redis: URLs %d and %d name the same server (%s): list each server once", j+1, i+1, id)
		}
		seen[id] = i
		out = append(out, nodeURL{url: p, opts: cfg})
	}
	return out, nil
}

func nodeID(cfg *goredis.Options) string { return cfg.Addr + "/" + strconv.Itoa(cfg.DB) }

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

// Redacted is rawURL (or a comma-separated list of URLs) with passwords
// hidden, for logs and errors.
func Redacted(rawURL string) string {
	if strings.Contains(rawURL, ",") {
		parts := strings.Split(rawURL, ",")
		for i, p := range parts {
			parts[i] = Redacted(strings.TrimSpace(p))
		}
		return strings.Join(parts, ",")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "redis://(unparsable URL)"
	}
	return u.Redacted()
}

// New returns a Bus on rdb, which the caller keeps owning.
func New(ctx context.Context, rdb *goredis.Client, opts Options) (*Bus, error) {
	return NewSharded(ctx, []*goredis.Client{rdb}, opts)
}

// NewSharded returns a Bus sharding sessions over rdbs (at least one, each
// a different server), which the caller keeps owning. The order of rdbs
// does not matter; the set does (see Bus).
func NewSharded(ctx context.Context, rdbs []*goredis.Client, opts Options) (*Bus, error) {
	if len(rdbs) == 0 {
		return nil, forge.Errorf(forge.ErrInvalid, "redis: no server")
	}
	opts.defaults()
	b := &Bus{
		opts:   opts,
		log:    opts.Logger,
		cancel: opts.Prefix + ":cancel",
		closed: make(chan struct{}),
	}
	seen := map[string]bool{}
	for _, rdb := range rdbs {
		id := nodeID(rdb.Options())
		if seen[id] {
			return nil, forge.Errorf(forge.ErrInvalid, "redis: server %s given twice", id)
		}
		seen[id] = true
		b.nodes = append(b.nodes, &node{rdb: rdb, id: id, hash: hashString(fnvOffset, id),
			sessions: map[string]map[*subscription]struct{}{}})
	}
	for _, n := range b.nodes {
		n.ps = n.rdb.Subscribe(ctx, b.cancel)
		b.wg.Add(1)
		go b.receive(n)
	}
	return b, nil
}

// Nodes is how many Redis servers the Bus shards sessions over.
func (b *Bus) Nodes() int { return len(b.nodes) }

// NodeOf is the index (in the list the Bus was opened with) of the server
// that holds the session's keys.
func (b *Bus) NodeOf(sessionID string) int {
	n := b.pick(sessionID)
	for i, m := range b.nodes {
		if m == n {
			return i
		}
	}
	return 0
}

// pick is the node of key (a session id, or a lock's name): rendezvous
// hashing, the node whose hash of (node, key) is highest. Adding or
// removing a node moves only the keys that land on it (about 1/N of them),
// and the order of the list does not matter.
func (b *Bus) pick(key string) *node {
	if len(b.nodes) == 1 {
		return b.nodes[0]
	}
	var best *node
	var top uint64
	for _, n := range b.nodes {
		if s := mix64(hashString(n.hash, key)); best == nil || s > top {
			best, top = n, s
		}
	}
	return best
}

// FNV-1a, 64 bits, continued from h; then a finalizer (SplitMix64's), so
// that keys differing in their last bytes spread over all the nodes.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// WriterID is this process's id as a session writer.
func (b *Bus) WriterID() string { return b.opts.WriterID }

// Ping checks that Redis answers (readiness). Sharded, it fails only when
// no server answers: every replica sees the same servers, so failing
// readiness for one would take every replica out of the balancer, and the
// sessions on the servers that answer would stop too. A server that does
// not answer is logged; its sessions answer 503 (store_error, Retry-After)
// until it is back.
func (b *Bus) Ping(ctx context.Context) error {
	if len(b.nodes) == 1 {
		if err := b.nodes[0].rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
	errs := make([]error, len(b.nodes))
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		wg.Go(func() { errs[i] = n.rdb.Ping(ctx).Err() })
	}
	wg.Wait()
	var down []string
	for i, err := range errs {
		if err != nil {
			down = append(down, b.nodes[i].id)
		}
	}
	if len(down) == len(b.nodes) {
		return fmt.Errorf("redis: no server answers: %w", errors.Join(errs...))
	}
	if len(down) > 0 {
		b.log.Warn("redis: servers down; their sessions are unavailable until they are back", "down", down,
			"of", len(b.nodes), "err", errors.Join(errs...))
	}
	return nil
}

// Close stops the subscriptions' connections and waits for their
// goroutines; owned clients are closed too. Open subscriptions return
// forge.ErrSubscriptionClosed. It may be called more than once.
func (b *Bus) Close() error {
	select {
	case <-b.closed:
		return nil
	default:
	}
	b.mu.Lock()
	select {
	case <-b.closed:
		b.mu.Unlock()
		return nil
	default:
	}
	close(b.closed)
	b.mu.Unlock()
	var errs []error
	for _, n := range b.nodes {
		n.mu.Lock()
		n.done = true
		subs := n.sessions
		n.sessions = map[string]map[*subscription]struct{}{}
		n.mu.Unlock()
		for _, set := range subs {
			for s := range set {
				s.shut()
			}
		}
		errs = append(errs, n.ps.Close())
	}
	b.wg.Wait()
	if b.owned {
		for _, n := range b.nodes {
			errs = append(errs, n.rdb.Close())
		}
	}
	var out []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, goredis.ErrClosed) {
			out = append(out, err)
		}
	}
	return errors.Join(out...)
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
