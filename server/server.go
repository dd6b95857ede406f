// Package server assembles a Forge server from its parts — the store, the
// model registry, sandboxes, MCP servers, the engine, forums, telemetry and
// the HTTP API — and owns their lifetimes: New opens and recovers, Start
// listens, Stop drains and closes, in that order. `forge serve` is this
// package behind flags; a Go program embeds Forge the same way:
//
//	srv, err := server.New(ctx, server.Config{DB: "./forge.db"})
//	if err != nil {
//		return err
//	}
//	if err := srv.Start(ctx, "127.0.0.1:8080"); err != nil {
//		return err
//	}
//	<-ctx.Done()
//	return srv.Stop(context.Background())
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/forum"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/mcp"
	"github.com/forge-runtime/forge/protocol/a2a"
	"github.com/forge-runtime/forge/protocol/aisdk"
	"github.com/forge-runtime/forge/protocol/mcpserver"
	"github.com/forge-runtime/forge/protocol/openaichat"
	"github.com/forge-runtime/forge/protocol/openairesp"
	"github.com/forge-runtime/forge/provider"
	redisbus "github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/retention"
	"github.com/forge-runtime/forge/sandbox"
	"github.com/forge-runtime/forge/scheduler"
	"github.com/forge-runtime/forge/schemas"
	"github.com/forge-runtime/forge/tools"
	"github.com/forge-runtime/forge/webhook"
)

// DefaultRedisGroupWait is Config.RedisGroupWait's default.
const DefaultRedisGroupWait = redisbus.DefaultGroupWait

// Config configures a Server. Zero values take the defaults.
type Config struct {
	// DB is a SQLite file (DefaultDB when empty) or a postgres:// URL.
	DB string
	// Redis, a redis:// URL, makes the server one replica of several
	// sharing a PostgreSQL DB. A comma-separated list of URLs shards the
	// sessions over those servers (every replica must list the same set).
	Redis string
	// RedisGroupWait is redis.Options.GroupWait (0: its default; negative:
	// never wait).
	RedisGroupWait time.Duration
	// Lease is a running turn's ownership lease (PostgreSQL); 0 means
	// engine.DefaultLeaseTTL.
	Lease time.Duration
	// APIKeys maps keys to tenants (besides those kept in the store).
	// Without any key the server is single-tenant and listens only on
	// loopback addresses.
	APIKeys map[string]string
	// OperatorKey, when set, reads every series of GET /metrics.
	OperatorKey string
	// AllowedOrigins are browser origins a keyless server answers besides
	// its own (httpapi.Config.AllowedOrigins).
	AllowedOrigins []string

	// File is the parsed forge.yaml (nil: none): providers, models, MCP
	// policy, sandbox paths.
	File *provider.Config
	// Models is the model registry; nil builds it from File and the
	// environment.
	Models *provider.Registry
	// Getenv reads the environment (nil: os.Getenv).
	Getenv func(string) string
	// Logger is where the server logs (nil: slog.Default()).
	Logger *slog.Logger
	// Version is reported by traces and the startup line.
	Version string

	// NoMetrics turns GET /metrics off.
	NoMetrics bool
	// SandboxRoot holds the sessions' sandboxes (default: <DB>.sandboxes,
	// ./forge.sandboxes with PostgreSQL).
	SandboxRoot string
	// Sandbox are the sandboxes' options (isolation, limits, uids); their
	// Logger and ReadOnlyPaths (from File) are filled in.
	Sandbox sandbox.Options
	// AllowPrivateMCPURLs and AllowLinkLocalMCPURLs, when set, say whether
	// agents' MCP url servers may reach those addresses (nil: File, else
	// the default: private ones while the server has no API key).
	AllowPrivateMCPURLs, AllowLinkLocalMCPURLs *bool
	// AllowPrivateWebhooks lets webhook endpoints be loopback, private and
	// link-local addresses (--allow-private-webhooks).
	AllowPrivateWebhooks bool
	// WebhookPoll is how often the webhook outbox is read (0: 500 ms).
	WebhookPoll time.Duration

	// SubagentDepth bounds nested delegations (0: 1).
	SubagentDepth int
	// MaxParallelTools bounds a step's tool calls running at once (0: the
	// engine's default).
	MaxParallelTools int
	// TurnTimeout bounds a turn (0: 10 minutes).
	TurnTimeout time.Duration
	// ShutdownGrace is how long Stop lets running turns finish before it
	// cancels them (0: 10 s).
	ShutdownGrace time.Duration
	// Output limits of one turn (0: the engine's defaults; negative: none).
	MaxTurnOutputBytes, MaxTurnOutputTokens int64
	// Caps on the event streams open at once (0: the API's defaults;
	// negative: none).
	MaxStreamsPerSession, MaxStreamsPerTenant int
	// MaxFileBytes is the most bytes one file may have (0: 20 MiB).
	MaxFileBytes int64
	// ScriptedQuota limits per tenant the turns of scripted models (they
	// need no key and cost the operator CPU). Nil: DefaultScriptedQuota
	// when the server has API keys, none otherwise.
	ScriptedQuota *ScriptedQuota

	// Protocols are the client protocols served beside the API (nil: the
	// OpenAI Responses and AI SDK ones).
	Protocols []httpapi.Protocol

	// Clock and IDs are injected by tests (nil: the system clock, ULIDs).
	Clock forge.Clock
	IDs   forge.IDGen
	// Tune, when set, adjusts the engine's configuration before the
	// engine is built (tests: shorter waits).
	Tune func(*engine.Config)
	// ScheduleInterval is how often the scheduler polls for due
	// schedules (0: scheduler.DefaultInterval, 1 s).
	ScheduleInterval time.Duration
	// SessionTTL is the tenant-wide default retention of direct sessions
	// whose agent sets none (--session-ttl; 0: kept). PurgeAfter is how
	// long a deleted session's rows stay before the sweeper purges them
	// (0: retention.DefaultPurgeAfter; negative: at once); RetentionInterval the pause
	// between sweeps (0: retention.DefaultInterval).
	SessionTTL        time.Duration
	PurgeAfter        time.Duration
	RetentionInterval time.Duration
}

// ScriptedQuota is the per-tenant quota of scripted models' turns.
type ScriptedQuota struct {
	// Running bounds the turns running at once, PerMinute those started
	// per minute (0: no bound).
	Running, PerMinute int
	// Keyless applies the quota on a server without API keys too.
	Keyless bool
}

// DefaultScriptedQuota is the quota of a server with API keys.
var DefaultScriptedQuota = ScriptedQuota{Running: 64, PerMinute: 6000}

// Server is an assembled Forge server.
type Server struct {
	cfg Config
	log *slog.Logger

	store     Store
	sandboxes *sandbox.Manager
	mcp       *mcp.Manager
	tel       *telemetry
	redis     *redisbus.Bus
	eng       *engine.Engine
	forums    *forum.Service
	webhooks  *webhook.Dispatcher
	schedules *scheduler.Scheduler
	sweeper   *retention.Sweeper
	api       *httpapi.Server
	handler   http.Handler

	mu            sync.Mutex // guards the following
	http          *http.Server
	ln            net.Listener
	serveErr      chan error
	cancelStreams context.CancelFunc
	stopped       bool
}

// New opens the store, builds every part, recovers the turns and forums a
// crash left behind, and returns the server ready to Start. On an error
// everything it opened is closed.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.IDs == nil {
		cfg.IDs = forge.NewULIDGen(cfg.Clock)
	}
	if cfg.Lease == 0 {
		cfg.Lease = engine.DefaultLeaseTTL
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	log := cfg.Logger
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.closeParts(context.Background())
		}
	}()
	models := cfg.Models
	if models == nil {
		if models, err = BuildModels(cfg.File, cfg.Getenv, log); err != nil {
			return nil, err
		}
	}
	if s.store, err = OpenStore(ctx, cfg.DB); err != nil {
		return nil, err
	}
	keyed := len(cfg.APIKeys) > 0
	if !keyed {
		if keyed, err = s.store.HasKeys(ctx); err != nil {
			return nil, err
		}
	}
	sandboxRoot := cfg.SandboxRoot
	if sandboxRoot == "" {
		sandboxRoot = cfg.DB + ".sandboxes"
		if IsPostgres(cfg.DB) {
			sandboxRoot = "./forge.sandboxes"
		}
	}
	sbOpts := cfg.Sandbox
	sbOpts.Logger = log
	if cfg.File != nil {
		sbOpts.ReadOnlyPaths = append(sbOpts.ReadOnlyPaths, cfg.File.Sandbox.ReadOnlyPaths...)
	}
	if err := checkReadOnlyPaths(sbOpts.ReadOnlyPaths, cfg.DB, sandboxRoot); err != nil {
		return nil, err
	}
	if s.sandboxes, err = sandbox.NewManager(sandboxRoot, sbOpts); err != nil {
		return nil, fmt.Errorf("sandboxes: %w", err)
	}
	keyless := &keylessCheck{static: len(cfg.APIKeys) > 0, keys: s.store, clock: cfg.Clock, log: log}
	mcpOpts, err := mcpOptions(cfg.File, cfg, s.sandboxes, keyless.keyless, cfg.Getenv, log)
	if err != nil {
		return nil, err
	}
	s.mcp = mcp.NewManager(mcpOpts)
	if s.tel, err = setupTelemetry(ctx, !cfg.NoMetrics, s.store, models, cfg.Version, log); err != nil {
		return nil, err
	}
	ecfg := engine.Config{
		Store: s.store, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0), Schemas: schemas.Compiler{},
		Sandboxes: s.sandboxes, MCP: s.mcp, Capabilities: tools.Capabilities(), SubagentDepth: cfg.SubagentDepth,
		Clock: cfg.Clock, IDs: cfg.IDs, Logger: log, TurnTimeout: cfg.TurnTimeout, Observer: s.tel.observer(), LeaseTTL: cfg.Lease,
		MaxParallelTools:   cfg.MaxParallelTools,
		MaxTurnOutputBytes: cfg.MaxTurnOutputBytes, MaxTurnOutputTokens: cfg.MaxTurnOutputTokens,
		Quota: scriptedQuota(cfg.ScriptedQuota, keyed, models, log),
		Kinds: forum.Kinds(), MaxFileBytes: cfg.MaxFileBytes,
	}
	ready := readiness(s.store)
	if leases, ok := s.store.(forge.LeaseStore); ok {
		// PostgreSQL: turns are owned by leases, so that replicas (or a
		// restarted server) end only the turns whose owner is gone.
		ecfg.Leases = leases
	}
	var locks forum.Locks
	if cfg.Redis != "" {
		if s.redis, err = redisbus.Open(ctx, cfg.Redis, redisbus.Options{Logger: log, GroupWait: cfg.RedisGroupWait}); err != nil {
			return nil, err
		}
		ecfg.Bus, ecfg.Fence, ecfg.Peers, ecfg.ReplicaID = s.redis, s.redis, s.redis, s.redis.WriterID()
		locks = s.redis
		ready = append(ready, httpapi.ReadyCheck{Name: "redis", Check: s.redis.Ping})
	}
	if cfg.Tune != nil {
		cfg.Tune(&ecfg)
	}
	// Every replica delivers webhooks; a delivery is one replica's at a
	// time (its claim in the store). A write that queued a delivery wakes
	// the dispatcher, so it goes out without waiting for the next poll:
	// the store says which writes did when it can (PostgreSQL, where a
	// claim of the outbox is a round trip and ~0.25 ms of the server's
	// CPU that a turn without webhooks should not pay); otherwise every
	// turn's end wakes it.
	s.webhooks = webhook.New(s.store, webhook.Config{Owner: "webhooks-" + cfg.IDs.New(""), AllowPrivate: cfg.AllowPrivateWebhooks,
		Poll: cfg.WebhookPoll, Clock: cfg.Clock, Log: log.With("component", "webhooks")})
	if n, ok := s.store.(deliveryNotifier); ok {
		n.NotifyDeliveries(s.webhooks.Wake)
	} else {
		ecfg.Observer = engine.Observers(ecfg.Observer, wakeOnTurnEnd{s.webhooks})
	}
	s.eng = engine.New(ecfg)
	// A stint's worker moves to another replica once its holder has been
	// silent this long (it renews every second).
	s.forums = forum.New(forum.Config{Store: s.store, Engine: s.eng, Models: models, Clock: cfg.Clock, IDs: cfg.IDs, Logger: log,
		Locks: locks, LockTTL: max(cfg.Lease, 3*time.Second)})
	if err := s.eng.Recover(ctx); err != nil {
		return nil, err
	}
	// After Recover: the forum layer reruns triggered turns a crash
	// abandoned and publishes replies a crash left unpublished.
	if err := s.forums.Open(ctx); err != nil {
		return nil, err
	}
	s.webhooks.Start()
	// Every replica polls; the store's claim makes each slot fire once.
	s.schedules = scheduler.New(scheduler.Config{Store: s.store, Clock: cfg.Clock, IDs: cfg.IDs, Logger: log,
		Interval: cfg.ScheduleInterval,
		Runner:   &scheduler.EngineRunner{Store: s.store, Engine: s.eng, Clock: cfg.Clock, IDs: cfg.IDs}})
	s.schedules.Start()
	// Every replica runs one; the store's lock lets one sweep at a time.
	purgeAfter := cfg.PurgeAfter
	if purgeAfter == 0 {
		purgeAfter = retention.DefaultPurgeAfter
	}
	s.sweeper = retention.New(retention.Config{Store: s.store, Expirer: s.eng, Clock: cfg.Clock, Logger: log,
		DefaultTTL: cfg.SessionTTL, PurgeAfter: purgeAfter, Interval: cfg.RetentionInterval})
	s.sweeper.Start()
	protocols := cfg.Protocols
	if protocols == nil {
		// Chat Completions first: its prefix lies inside the Responses
		// API's, and a request's protocol is the first whose prefix matches.
		protocols = []httpapi.Protocol{openaichat.Protocol{}, openairesp.Protocol{}, aisdk.Protocol{}, mcpserver.Protocol{}, a2a.Protocol{}}
	}
	s.api = httpapi.New(httpapi.Config{Store: s.store, Engine: s.eng, Forums: s.forums, Keys: cfg.APIKeys, KeyResolver: httpapi.StoredKeys(s.store),
		MCP: s.mcp, Logger: log, Clock: cfg.Clock, IDs: cfg.IDs, Models: models,
		Protocols: protocols,
		Metrics:   s.tel.metricsHandler(), TenantMetrics: s.tel.tenantMetrics(), OperatorKey: cfg.OperatorKey, AllowedOrigins: cfg.AllowedOrigins, Ready: ready,
		MaxStreamsPerSession: cfg.MaxStreamsPerSession, MaxStreamsPerTenant: cfg.MaxStreamsPerTenant,
		Files: s.store, MaxFileBytes: cfg.MaxFileBytes, Cadences: scheduler.Cadences{},
		WebhookURLs: webhook.URLChecker{AllowPrivate: cfg.AllowPrivateWebhooks}})
	s.handler = s.tel.serving(s.api)
	return s, nil
}

// MinOperatorKey is the shortest operator key accepted.
const MinOperatorKey = 16

func checkConfig(cfg Config) error {
	for _, o := range cfg.AllowedOrigins {
		if err := httpapi.CheckOrigin(o); err != nil {
			return fmt.Errorf("--allowed-origins: %w", err)
		}
	}
	if k := cfg.OperatorKey; k != "" {
		if len(k) < MinOperatorKey || strings.ContainsAny(k, " \t\r\n") {
			return fmt.Errorf("the operator key must be at least %d characters, without spaces", MinOperatorKey)
		}
		if _, ok := cfg.APIKeys[k]; ok {
			return fmt.Errorf("the operator key is also a tenant's API key: give the operator a key of its own")
		}
	}
	if cfg.Redis != "" && !IsPostgres(cfg.DB) {
		return fmt.Errorf("--redis needs a PostgreSQL --db (postgres://...): replicas share the database, and a SQLite file belongs to one process")
	}
	if cfg.Redis != "" {
		if err := redisbus.CheckURLs(cfg.Redis); err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
	}
	if cfg.Lease < 300*time.Millisecond {
		return fmt.Errorf("--lease must be at least 300ms")
	}
	return nil
}

// Handler is the server's HTTP handler (the API, the protocols, the
// inspector, /metrics), for a caller that serves it itself.
func (s *Server) Handler() http.Handler { return s.handler }

// Engine is the server's engine.
func (s *Server) Engine() *engine.Engine { return s.eng }

// Store is the server's store.
func (s *Server) Store() Store { return s.store }

// Start listens on addr and serves until Stop (or until serving fails:
// Wait reports it). Without API keys (none given, none stored) only a
// loopback address is accepted.
func (s *Server) Start(ctx context.Context, addr string) error {
	if len(s.cfg.APIKeys) == 0 && !IsLoopback(addr) {
		stored, err := s.store.HasKeys(ctx)
		if err != nil {
			return err
		}
		if !stored {
			return fmt.Errorf("refusing to listen on %s without API keys: create one (forge keys create), set FORGE_API_KEYS or use a loopback address", addr)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.Serve(ln)
	return nil
}

// Serve serves on ln, which it owns from now on, until Stop.
func (s *Server) Serve(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Streams are tied to baseCtx so they end when the engine has stopped.
	baseCtx, cancel := context.WithCancel(context.Background())
	s.http = &http.Server{
		Handler:           s.handler,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		// Room above the API's documented header limit, so that the API
		// answers oversized headers itself, in JSON.
		MaxHeaderBytes: httpapi.ServerMaxHeaderBytes,
	}
	s.ln, s.cancelStreams, s.serveErr = ln, cancel, make(chan error, 1)
	srv := s.http
	// httpapi.Serve also turns net/http's own plain-text refusals (headers
	// above MaxHeaderBytes, malformed requests) into JSON errors.
	go func() { s.serveErr <- httpapi.Serve(srv, ln) }()
	s.log.Info("forge listening", "addr", ln.Addr().String(), "db", DisplayDB(s.cfg.DB), "redis", redisbus.Redacted(s.cfg.Redis),
		"replica", s.eng.ReplicaID(), "version", s.cfg.Version)
}

// Addr is the address the server listens on (nil before Start).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Wait returns when serving fails, with its error, or when ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	s.mu.Lock()
	ch := s.serveErr
	s.mu.Unlock()
	if ch == nil {
		<-ctx.Done()
		return nil
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return nil
	}
}

// Stop drains and closes the server: readiness fails at once (load
// balancers stop sending work) while it keeps answering; new turns are
// refused (503), running ones get Config.ShutdownGrace (bounded by ctx),
// then end cancelled (reason shutdown); then the listener closes, the
// streams still open end, and every part is closed.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	s.api.Drain()
	s.log.Info("shutting down: draining", "grace", s.cfg.ShutdownGrace)
	gctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownGrace)
	defer cancel()
	// The scheduler first: it starts no run the engine would refuse.
	if err := s.schedules.Close(gctx); err != nil {
		s.log.Error("scheduler close", "err", err)
	}
	if err := s.sweeper.Close(gctx); err != nil {
		s.log.Error("retention sweeper close", "err", err)
	}
	if err := s.forums.Close(gctx); err != nil {
		s.log.Error("forums close", "err", err)
	}
	if err := s.eng.Close(gctx); err != nil {
		s.log.Error("engine close", "err", err)
	}
	// After the engine: the last turns' deliveries are in the outbox, and
	// what is not sent in the grace is sent after a restart.
	if err := s.webhooks.Close(gctx); err != nil {
		s.log.Error("webhooks close", "err", err)
	}
	s.mu.Lock()
	srv, cancelStreams := s.http, s.cancelStreams
	s.mu.Unlock()
	if srv != nil {
		cancelStreams()
		sctx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancelShutdown()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}
	err := s.closeParts(context.WithoutCancel(ctx))
	s.log.Info("stopped")
	return err
}

// closeParts closes what New opened, last opened first.
func (s *Server) closeParts(ctx context.Context) error {
	var errs []error
	if s.api == nil {
		// New failed after these were built: they run nothing yet.
		if s.schedules != nil {
			errs = append(errs, s.schedules.Close(ctx))
		}
		if s.sweeper != nil {
			errs = append(errs, s.sweeper.Close(ctx))
		}
		if s.forums != nil {
			errs = append(errs, s.forums.Close(ctx))
		}
		if s.eng != nil {
			errs = append(errs, s.eng.Close(ctx))
		}
		if s.webhooks != nil {
			errs = append(errs, s.webhooks.Close(ctx))
		}
	}
	if s.redis != nil {
		errs = append(errs, s.redis.Close())
	}
	if s.tel != nil {
		s.tel.close(ctx, s.log)
	}
	if s.mcp != nil {
		errs = append(errs, s.mcp.Close(ctx))
	}
	if s.sandboxes != nil {
		errs = append(errs, s.sandboxes.Close(ctx))
	}
	if s.store != nil {
		errs = append(errs, s.store.Close(ctx))
	}
	return errors.Join(errs...)
}

// IsLoopback reports whether addr (host:port) is a loopback address.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// BuildModels builds the model registry from forge.yaml (nil: none) and
// the environment, and logs what it holds: names, kinds, base URLs and key
// variables, never a key.
func BuildModels(file *provider.Config, getenv func(string) string, log *slog.Logger) (*provider.Registry, error) {
	models, err := provider.Build(file, provider.Options{Getenv: getenv, Logger: log})
	if err != nil {
		return nil, err
	}
	real := false
	for _, p := range models.Providers() {
		if p.Problem != "" {
			log.Warn("model provider not usable", "provider", p.Name, "kind", p.Kind, "problem", p.Problem)
			continue
		}
		if p.Kind != provider.KindScripted {
			real = true
		}
		log.Info("model provider", "provider", p.Name, "kind", p.Kind, "base_url", p.BaseURL,
			"api_key_env", p.APIKeyEnv, "source", p.Source)
	}
	if !real {
		log.Warn("no model provider configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server) to use openai/<model>, or declare providers in a config file (--config); scripted/echo works without a key")
	}
	return models, nil
}

// scriptedQuota is the per-tenant quota of the scripted providers' turns
// (every provider of kind scripted): they need no key, and cost the
// operator CPU and storage. It applies to a server with API keys (a
// keyless one listens on loopback only: its one user is the operator), or
// when q says so; nil when it limits nothing.
func scriptedQuota(q *ScriptedQuota, keyed bool, models *provider.Registry, log *slog.Logger) *engine.TurnQuota {
	if q == nil {
		if !keyed {
			return nil
		}
		q = &DefaultScriptedQuota
	}
	if !keyed && !q.Keyless {
		return nil
	}
	tq := &engine.TurnQuota{Running: max(q.Running, 0), PerMinute: max(q.PerMinute, 0)}
	for _, p := range models.Providers() {
		if p.Kind == provider.KindScripted {
			tq.Providers = append(tq.Providers, p.Name)
		}
	}
	if len(tq.Providers) == 0 || (tq.Running == 0 && tq.PerMinute == 0) {
		return nil
	}
	log.Info("scripted provider quota per tenant", "providers", tq.Providers, "running", tq.Running, "per_minute", tq.PerMinute)
	return tq
}

// deliveryNotifier is a store that calls a func after each write of its
// that queued a webhook delivery.
type deliveryNotifier interface {
	NotifyDeliveries(func())
}

// wakeOnTurnEnd wakes the webhook dispatcher when a turn ends (its
// terminal write, with the deliveries of its events, has committed).
type wakeOnTurnEnd struct{ d *webhook.Dispatcher }

func (w wakeOnTurnEnd) TurnStarted(ctx context.Context, _ engine.TurnStart) context.Context {
	return ctx
}
func (w wakeOnTurnEnd) TurnEnded(context.Context, engine.TurnEnd) { w.d.Wake() }
func (w wakeOnTurnEnd) ModelCallStarted(ctx context.Context, _ engine.ModelCallStart) context.Context {
	return ctx
}
func (w wakeOnTurnEnd) ModelCallEnded(context.Context, engine.ModelCallEnd) {}
func (w wakeOnTurnEnd) ToolCallStarted(ctx context.Context, _ engine.ToolCallStart) context.Context {
	return ctx
}
func (w wakeOnTurnEnd) ToolCallEnded(context.Context, engine.ToolCallEnd) {}
