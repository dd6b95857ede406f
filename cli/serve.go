package cli

import (
	"context"
	"fmt"
	"github.com/forge-runtime/forge"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/sandbox"
	"github.com/forge-runtime/forge/server"
)

type serveOptions struct {
	addr          string
	db            string
	redis         string        // redis:// URL: distributed mode
	lease         time.Duration // turn ownership lease (PostgreSQL)
	groupWait     time.Duration // --redis-group-wait
	apiKeys       string
	turnTimeout   time.Duration
	shutdownGrace time.Duration
	logLevel      string
	logFormat     string // text or json
	metrics       bool   // serve /metrics
	sandboxRoot   string
	subagentDepth int
	config        string    // model providers config file ("" : $FORGE_CONFIG, else none)
	pprofAddr     string    // loopback address of the profiling listener ("": none)
	logOut        io.Writer // where the log goes (nil: stderr)

	// unsafeCommands lets sandbox commands run without bubblewrap.
	unsafeCommands bool
	// allowPrivateMCPURLs and allowLinkLocalMCPURLs are the flags of
	// those names when given (nil: forge.yaml, else the default).
	allowPrivateMCPURLs *bool
	// allowPrivateWebhooks lets webhook endpoints be loopback or private.
	allowPrivateWebhooks  bool
	allowLinkLocalMCPURLs *bool
	// sandbox holds the sandboxes' limits and uids (--sandbox-*).
	sandbox sandboxFlags
	// maxParallelTools bounds a step's tool calls running at once.
	maxParallelTools int

	// Limits (0: the engine's and the API's defaults; negative: none).
	maxTurnOutputBytes, maxTurnOutputTokens   int64
	maxStreamsPerSession, maxStreamsPerTenant int
	maxFileBytes                              int64
	// The scripted provider's per-tenant quota; it applies when the server
	// has API keys, or when a flag sets it (scriptedQuotaSet).
	scriptedRunning, scriptedPerMinute int
	scriptedQuotaSet                   bool
	// operatorKey reads every series of /metrics.
	operatorKey string
	// allowedOrigins are browser origins answered besides the server's.
	allowedOrigins []string
	// Retention: the default session TTL, how long deleted sessions'
	// rows stay, the pause between sweeps.
	sessionTTL, purgeAfter, retentionInterval time.Duration
}

// sandboxFlags are the --sandbox-* limits, as sandbox.Options takes them.
type sandboxFlags struct {
	memory, maxFileSize, tmpSize, workspaceQuota int64
	maxProcs, sessionCommands, maxCommands       int
	maxSnapshots                                 int
	cpuTime                                      time.Duration
	uidBase, uidCount                            uint32
}

func (f sandboxFlags) options(o sandbox.Options) sandbox.Options {
	o.MemoryLimit, o.MaxFileSize, o.TmpSize, o.WorkspaceQuota = f.memory, f.maxFileSize, f.tmpSize, f.workspaceQuota
	o.MaxProcs, o.SessionCommands, o.MaxCommands = f.maxProcs, f.sessionCommands, f.maxCommands
	o.CPUTime, o.UIDBase, o.UIDCount = f.cpuTime, f.uidBase, f.uidCount
	o.MaxSnapshots = f.maxSnapshots
	return o
}

// sizeValue is a flag holding a size in bytes, written with a unit (1GiB,
// 512M); 0 or off turns the limit off (-1 for sandbox.Options).
type sizeValue struct{ n *int64 }

func (v sizeValue) String() string {
	switch {
	case v.n == nil:
		return ""
	case *v.n < 0:
		return "off"
	}
	return sandbox.FormatBytes(*v.n)
}

func (v sizeValue) Set(s string) error {
	n, err := sandbox.ParseBytes(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

func (sizeValue) Type() string { return "size" }

func sizeFlag(f *pflag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	f.Var(sizeValue{p}, name, usage)

}

func newServeCommand() *cobra.Command {
	var o serveOptions
	var allowPrivate, allowLinkLocal bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Forge server",
		Long: `Run the Forge server on an embedded SQLite database (--db ./forge.db), or
on PostgreSQL (--db postgres://user@host/db; pool settings such as
pool_max_conns=20 go in the URL).

Models: set OPENAI_API_KEY (and OPENAI_BASE_URL for OpenAI-compatible
servers) to use openai/<model>, ANTHROPIC_API_KEY (ANTHROPIC_BASE_URL) for
anthropic/<model>. A config file (--config forge.yaml, or FORGE_CONFIG)
declares more providers (kind openai, openai-responses, anthropic or
scripted; base_url; api_key_env, the name of the variable holding the key;
headers), the settings and prices of models, and the retry policy of model
calls. GET /v1/models lists what is configured. The scripted provider
(scripted/echo, or a script in model_params.script) needs no key.

API keys: forge keys create --tenant T --db ... (kept in the database, every
server sharing it accepts them at once), or FORGE_API_KEYS="key1=tenant1,
key2=tenant2" for a single node. Without keys the server runs single-tenant
and only listens on loopback addresses.

Operations: GET /healthz (the process is up), GET /readyz (the store
answers; 503 from the moment SIGTERM starts the drain), GET /metrics
(Prometheus; --metrics=false turns it off): every series to the
--operator-key (FORGE_OPERATOR_KEY), a tenant key its own tenant's only.
OTEL_EXPORTER_OTLP_ENDPOINT turns on OpenTelemetry traces over OTLP/HTTP
(the other OTEL_* variables apply). --log-format json writes one JSON
object per line on stderr. The GC runs with GOGC=400 unless GOGC is set
(GOMEMLIMIT applies as usual).

Limits: a turn streams at most --max-turn-output-bytes and its model calls
produce at most --max-turn-output-tokens (past either it ends errored with
output_limit); a session has at most --max-streams-per-session event
streams open, a tenant --max-streams-per-tenant (429 too_many_subscribers).
With API keys, a tenant runs at most --scripted-max-running turns of
scripted models at once and starts --scripted-turns-per-minute (429
rate_limited with Retry-After).

Several replicas: run identical servers behind a load balancer with
--db postgres://... --redis redis://host:6379/0 (pool settings such as
pool_size=64 go in the URL). Any replica serves any request; a turn's owner
holds a lease (--lease) that another replica takes over when it expires.
To spread the live streams over several Redis servers, give --redis a
comma-separated list (redis://a:6379/0,redis://b:6379/0,redis://c:6379/0):
each session lives on the server its id hashes to; every replica must list
the same servers (in any order), and changing the list moves sessions
(drain the replicas first). GET /readyz checks the database and Redis (with
several servers: that at least one answers; sessions on a server that is
down answer 503 until it is back); on SIGTERM it fails at once,
running turns get --shutdown-grace to finish, then end cancelled. See
docs/distributed.md.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tuneServeGC()
			if cmd.Flags().Changed("allow-private-mcp-urls") {
				o.allowPrivateMCPURLs = &allowPrivate
			}
			if cmd.Flags().Changed("allow-link-local-mcp-urls") {
				o.allowLinkLocalMCPURLs = &allowLinkLocal
			}
			f := cmd.Flags()
			o.scriptedQuotaSet = f.Changed("scripted-max-running") || f.Changed("scripted-turns-per-minute")
			return serve(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address")
	f.StringVar(&o.db, "db", defaultDB, dbFlagHelp)
	f.StringVar(&o.redis, "redis", os.Getenv("FORGE_REDIS_URL"), "Redis URL (redis://host:6379/0) for several replicas sharing a PostgreSQL --db; a comma-separated list (redis://a:6379/0,redis://b:6379/0,...) shards sessions over those servers, and every replica must list the same set: changing it moves sessions (drain first, see docs/distributed.md) (env FORGE_REDIS_URL)")
	f.DurationVar(&o.groupWait, "redis-group-wait", server.DefaultRedisGroupWait, "with --redis: how long a replica lets streamed deltas of its sessions gather into one Redis call while several stream at once (0 or less: never wait; a lone stream never waits); longer costs Redis and the replica less CPU per delta and delays each delta's way to readers by up to this much")
	f.DurationVar(&o.lease, "lease", engine.DefaultLeaseTTL, "turn ownership lease (PostgreSQL): a turn whose replica stops renewing it is ended by another within three lease periods")
	f.StringVar(&o.apiKeys, "api-keys", os.Getenv("FORGE_API_KEYS"), "API keys as key=tenant,... (env FORGE_API_KEYS)")
	f.DurationVar(&o.turnTimeout, "turn-timeout", 10*time.Minute, "longest a turn may run before it is cancelled with reason timeout")
	f.DurationVar(&o.shutdownGrace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long running turns may finish before they are cancelled")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", logText, "log format on stderr: text, or json (one JSON object per line)")
	f.BoolVar(&o.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics (to any valid key; to all on loopback without keys)")
	f.StringVar(&o.sandboxRoot, "sandbox-root", "", "directory for per-session sandboxes (default: <db>.sandboxes; ./forge.sandboxes with PostgreSQL)")
	f.IntVar(&o.subagentDepth, "subagent-depth", 1, "how deep subagent delegations may nest (1: the root agent delegates, its subagents do not)")
	f.BoolVar(&o.unsafeCommands, "unsafe-unsandboxed-commands", false,
		"run the bash tool's commands even when bubblewrap isolation is not available (they can then read the server's environment, keys, database and every session's sandbox); without it such commands are refused. Agents' stdio MCP servers never run unsandboxed (forge.yaml mcp.commands can allow some on the host)")
	f.BoolVar(&allowPrivate, "allow-private-mcp-urls", false,
		"let agents' MCP url servers reach loopback and private addresses (default: allowed while the server has no API key, refused once it has; forge.yaml mcp.allow_private_urls)")
	f.BoolVar(&o.allowPrivateWebhooks, "allow-private-webhooks", false,
		"let webhook endpoints be loopback and private addresses (refused by default, checked at creation and on every connection); link-local ones, the cloud metadata endpoint among them, are always refused")
	f.DurationVar(&o.sessionTTL, "session-ttl", 0,
		"delete direct sessions idle for longer than this, with their turns, events and the files only they reference, unless their agent sets retention.session_ttl (0: keep them)")
	f.DurationVar(&o.purgeAfter, "purge-after", 0,
		"how long a deleted session's rows stay before the retention sweeper removes them (0: 10m; negative: at once)")
	f.DurationVar(&o.retentionInterval, "retention-interval", 0, "pause between retention sweeps (0: 1m)")
	f.BoolVar(&allowLinkLocal, "allow-link-local-mcp-urls", false,
		"let agents' MCP url servers reach link-local addresses, cloud metadata endpoints (169.254.169.254) among them (forge.yaml mcp.allow_link_local_urls)")
	sizeFlag(f, &o.sandbox.memory, "sandbox-memory", sandbox.DefaultMemoryLimit, "memory each process of a sandboxed command may use (RLIMIT_DATA; address space 8 times that; 0: no limit)")
	f.IntVar(&o.sandbox.maxProcs, "sandbox-max-procs", sandbox.DefaultMaxProcs, "processes and threads a sandbox may run at once (-1: no limit; enforced when the server runs as root: each sandbox has a uid of its own)")
	f.DurationVar(&o.sandbox.cpuTime, "sandbox-cpu-time", 0, "CPU time each process of a command may use (0: the command's timeout; -1s: no limit)")
	sizeFlag(f, &o.sandbox.maxFileSize, "sandbox-max-file-size", sandbox.DefaultMaxFileSize, "largest file a sandboxed command may write (0: no limit)")
	sizeFlag(f, &o.sandbox.tmpSize, "sandbox-tmp-size", sandbox.DefaultTmpSize, "size of a sandbox's /tmp, held in memory (0: no limit)")
	sizeFlag(f, &o.sandbox.workspaceQuota, "sandbox-workspace-quota", sandbox.DefaultWorkspaceQuota, "disk space a session's work and home directories may use (0: no limit)")
	f.IntVar(&o.sandbox.sessionCommands, "sandbox-session-commands", sandbox.DefaultSessionCommands, "commands a session runs at once; more wait their turn (-1: no limit)")
	f.IntVar(&o.sandbox.maxCommands, "sandbox-max-commands", sandbox.DefaultMaxCommands, "commands the server runs at once, all sessions together (-1: no limit)")
	f.IntVar(&o.sandbox.maxSnapshots, "sandbox-max-snapshots", sandbox.DefaultMaxSnapshots,
		"restorable workspace snapshots a session keeps, the oldest pruned (their store also stays within --sandbox-workspace-quota; -1: no limit)")
	f.Uint32Var(&o.sandbox.uidBase, "sandbox-uid-base", sandbox.DefaultUIDBase, "first host uid given to sandboxes when the server runs as root (servers sharing a host need disjoint ranges)")
	f.Uint32Var(&o.sandbox.uidCount, "sandbox-uid-count", sandbox.DefaultUIDCount, "how many uids from --sandbox-uid-base sandboxes get, one each (1: all run as --sandbox-uid-base)")
	f.IntVar(&o.maxParallelTools, "max-parallel-tools", engine.DefaultMaxParallelTools, "tool calls of one step that run at once; the others wait their turn")
	f.StringVar(&o.config, "config", "", "model providers config file, e.g. ./forge.yaml (env "+provider.ConfigEnv+")")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "serve net/http/pprof on this loopback address, e.g. 127.0.0.1:6060 (off by default)")
	f.Int64Var(&o.maxTurnOutputBytes, "max-turn-output-bytes", engine.DefaultMaxTurnOutputBytes,
		"most bytes one turn may stream (text, reasoning, tool calls): past it the turn ends errored with output_limit, what was streamed kept (-1: no limit)")
	f.Int64Var(&o.maxTurnOutputTokens, "max-turn-output-tokens", engine.DefaultMaxTurnOutputTokens,
		"most output tokens one turn's model calls may produce: past it the turn ends errored with output_limit (-1: no limit)")
	f.IntVar(&o.maxStreamsPerSession, "max-streams-per-session", httpapi.DefaultMaxStreamsPerSession,
		"most event streams (SSE) open at once on one session: over it a stream is refused with 429 too_many_subscribers (-1: no cap)")
	f.IntVar(&o.maxStreamsPerTenant, "max-streams-per-tenant", httpapi.DefaultMaxStreamsPerTenant,
		"most event streams (SSE) open at once for one tenant (-1: no cap)")
	f.Int64Var(&o.maxFileBytes, "max-file-bytes", httpapi.DefaultMaxFileBytes,
		"most bytes one file may have (POST /v1/files, inline attachments): over it the upload is refused with 413 payload_too_large")
	f.IntVar(&o.scriptedRunning, "scripted-max-running", server.DefaultScriptedQuota.Running,
		"most turns of scripted models (a provider that needs no key) one tenant may run at once: over it a turn is refused with 429 rate_limited (0: no limit; applies when the server has API keys, or when given)")
	f.IntVar(&o.scriptedPerMinute, "scripted-turns-per-minute", server.DefaultScriptedQuota.PerMinute,
		"most turns of scripted models one tenant may start per minute (0: no limit; applies when the server has API keys, or when given)")
	f.StringSliceVar(&o.allowedOrigins, "allowed-origins", nil,
		"browser origins besides the server's own that a keyless server answers (comma-separated, e.g. http://localhost:5173 for a dev server's proxy that forwards the page's Origin); no CORS access is granted")
	f.StringVar(&o.operatorKey, "operator-key", os.Getenv("FORGE_OPERATOR_KEY"),
		"bearer key that reads every series of GET /metrics (tenant keys read their own tenant's only); no tenant's key, at least 16 characters (env FORGE_OPERATOR_KEY)")
	return cmd
}

// defaultDB is the --db of every command that opens the database.
const defaultDB = server.DefaultDB

const dbFlagHelp = "database: a SQLite file, or a postgres:// URL"

func parseKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, tenant, ok := strings.Cut(kv, "=")
		if !ok || k == "" || tenant == "" {
			return nil, fmt.Errorf("api keys must be written key=tenant, separated by commas")
		}
		keys[k] = tenant
	}
	return keys, nil
}

// loadConfig reads the config file (flag, else $FORGE_CONFIG), nil when
// there is none.
func loadConfig(flag string) (*provider.Config, error) {
	path := provider.ConfigPath(flag, os.Getenv)
	if path == "" {
		return nil, nil
	}
	return provider.LoadConfig(path)
}

func serve(ctx context.Context, o serveOptions) error {
	logOut := o.logOut
	if logOut == nil {
		logOut = os.Stderr
	}
	log, err := newLogger(o.logFormat, o.logLevel, logOut)
	if err != nil {
		return err
	}
	if err := run(ctx, o, log); err != nil {
		log.Error("forge serve failed", "err", err)
		return reportedError{err}
	}
	return nil
}

func run(ctx context.Context, o serveOptions, log *slog.Logger) error {
	tuneServeMemory(log)
	cfg, err := o.serverConfig(log)
	if err != nil {
		return err
	}
	if o.pprofAddr != "" && !server.IsLoopback(o.pprofAddr) {
		return fmt.Errorf("--pprof-addr %s: profiles expose the server's internals and have no authentication; use a loopback address", o.pprofAddr)
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx, o.addr); err != nil {
		_ = srv.Stop(context.Background())
		return err
	}
	if o.pprofAddr != "" {
		pln, err := net.Listen("tcp", o.pprofAddr)
		if err != nil {
			_ = srv.Stop(context.Background())
			return fmt.Errorf("--pprof-addr: %w", err)
		}
		defer serveProfiles(pln, log, o.logFormat)()
	}
	announce(os.Stdout, o.logFormat, "forge listening on", "http://"+srv.Addr().String())
	if err := srv.Wait(ctx); err != nil {
		_ = srv.Stop(context.Background())
		return err
	}
	return srv.Stop(context.Background())
}

// serverConfig is the server.Config the flags (and forge.yaml) describe.
func (o serveOptions) serverConfig(log *slog.Logger) (server.Config, error) {
	keys, err := parseKeys(o.apiKeys)
	if err != nil {
		return server.Config{}, err
	}
	file, err := loadConfig(o.config)
	if err != nil {
		return server.Config{}, err
	}
	if err := forge.CheckSessionTTL(o.sessionTTL, "--session-ttl"); err != nil {
		return server.Config{}, err
	}
	cfg := server.Config{
		DB: o.db, Redis: o.redis, RedisGroupWait: groupWait(o.groupWait), Lease: o.lease, APIKeys: keys, OperatorKey: o.operatorKey, AllowedOrigins: o.allowedOrigins,
		File: file, Logger: log, Version: version(), NoMetrics: !o.metrics,
		SandboxRoot:         o.sandboxRoot,
		Sandbox:             o.sandbox.options(sandbox.Options{UnsafeUnsandboxedCommands: o.unsafeCommands}),
		AllowPrivateMCPURLs: o.allowPrivateMCPURLs, AllowLinkLocalMCPURLs: o.allowLinkLocalMCPURLs,
		AllowPrivateWebhooks: o.allowPrivateWebhooks,
		SessionTTL:           o.sessionTTL,
		PurgeAfter:           o.purgeAfter,
		RetentionInterval:    o.retentionInterval,
		SubagentDepth:        o.subagentDepth, MaxParallelTools: o.maxParallelTools,
		TurnTimeout: o.turnTimeout, ShutdownGrace: o.shutdownGrace,
		MaxTurnOutputBytes: o.maxTurnOutputBytes, MaxTurnOutputTokens: o.maxTurnOutputTokens,
		MaxStreamsPerSession: o.maxStreamsPerSession, MaxStreamsPerTenant: o.maxStreamsPerTenant,
		MaxFileBytes: o.maxFileBytes,
	}
	if o.scriptedQuotaSet {
		cfg.ScriptedQuota = &server.ScriptedQuota{Running: o.scriptedRunning, PerMinute: o.scriptedPerMinute, Keyless: true}
	}
	return cfg, nil
}

// groupWait maps --redis-group-wait to server.Config.RedisGroupWait: 0
// or less there means never wait (0 in the Config is the default).
func groupWait(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
