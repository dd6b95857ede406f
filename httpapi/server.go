// Package httpapi serves the Forge HTTP API (REST + SSE, see API.md) on
// net/http, with no framework.
package httpapi

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"iter"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/internal/sse"
	"github.com/forge-runtime/forge/web"
)

// Runtime is the part of the engine the HTTP layer calls: exactly these
// methods, so tests and readers see the whole dependency.
type Runtime interface {
	StartTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, error)
	StreamTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error)
	WaitTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
	Cancel(ctx context.Context, tenant, sessionID, reason string) (*forge.Turn, error)
	// CancelTurn cancels one turn: a queued one, or the running one.
	CancelTurn(ctx context.Context, tenant, sessionID, turnID, reason string) (*forge.Turn, error)
	Events(ctx context.Context, tenant, sessionID string, q engine.EventsQuery) iter.Seq2[forge.Event, error]
	OpenEvents(ctx context.Context, tenant, sessionID string, q engine.EventsQuery) (iter.Seq2[forge.Event, error], error)
	DeleteSession(ctx context.Context, tenant, sessionID string) error
	// RestoreWorkspace restores a session's sandbox files to a workspace
	// snapshot.
	RestoreWorkspace(ctx context.Context, tenant, sessionID, snapshotID string) (forge.WorkspaceRestore, error)
	// WorkspaceSnapshots lists a session's workspace snapshots.
	WorkspaceSnapshots(ctx context.Context, tenant, sessionID string) ([]forge.WorkspaceSnapshotInfo, error)
	ModelView(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Message, string, error)
	IsBuiltin(name string) bool
	// CheckOutputSchema validates an agent's output_schema.
	CheckOutputSchema(s *forge.OutputSchema, field string) error
}

var _ Runtime = (*engine.Engine)(nil)

// MCPChecker vets the MCP servers an agent declares before the agent is
// stored: a stdio command this server will not run, a URL naming an address
// it will not reach. *mcp.Manager (the one the engine runs them with)
// implements it.
type MCPChecker interface {
	// CheckServer says why spec cannot run here (an error wrapping
	// forge.ErrInvalid), or nil.
	CheckServer(ctx context.Context, spec forge.MCPServer) error
}

// Config wires a Server.
type Config struct {
	Store forge.Store
	// Engine is normally an *engine.Engine.
	Engine Runtime
	// Keys maps API key to tenant. With no keys here nor through
	// KeyResolver: single tenant (forge.DefaultTenant), no authentication.
	Keys map[string]string
	// KeyResolver, when set, resolves keys Keys does not hold (keys in the
	// store: StoredKeys).
	KeyResolver KeyResolver
	Logger      *slog.Logger
	Clock       forge.Clock
	IDs         forge.IDGen
	// KeepAlive is the interval of SSE ping comments on an idle stream;
	// 0 means 15 s.
	KeepAlive time.Duration
	// Models, when set, is listed by GET /v1/models (normally the
	// *provider.Registry the engine resolves models with).
	Models ModelCatalog
	// Protocols are other wire protocols served beside /v1 (protocols.go).
	Protocols []Protocol
	// Forums, when set, serves /v1/forums (normally a *forum.Service).
	Forums Forums
	// Metrics, when set, is served at GET /metrics: every series, to a
	// request bearing OperatorKey, and to everyone on loopback when the
	// server has no keys.
	Metrics http.Handler
	// TenantMetrics, when set, serves a tenant key's GET /metrics: only
	// that tenant's series. Nil: tenant keys are refused (403).
	TenantMetrics func(tenant string) http.Handler
	// OperatorKey, when set, is the bearer key that reads every series of
	// GET /metrics. It is no tenant's key: the /v1 routes refuse it.
	OperatorKey string
	// AllowedOrigins are browser origins besides the server's own whose
	// requests a keyless server answers ("http://localhost:5173": a dev
	// server's proxy that forwards the page's Origin). They get no CORS
	// grant: a page calling Forge directly from another origin still
	// cannot read the answers.
	AllowedOrigins []string
	// MaxStreamsPerSession and MaxStreamsPerTenant cap the event streams
	// open at once on one session and for one tenant (every SSE route, the
	// protocols' included); over them a stream is refused with 429
	// too_many_subscribers. 0 means DefaultMaxStreamsPerSession and
	// DefaultMaxStreamsPerTenant; negative, no cap.
	MaxStreamsPerSession, MaxStreamsPerTenant int
	// Ready are the dependencies GET /readyz checks.
	Ready []ReadyCheck
	// MCP, when set, vets agents' MCP servers on POST and PUT /v1/agents.
	MCP MCPChecker
	// Files keeps uploaded files (/v1/files, /openai/v1/files); nil: the
	// Store's, when it is a forge.FileStore.
	Files forge.FileStore
	// Webhooks keeps endpoints (/v1/webhooks); nil: the Store's, when it
	// is a forge.WebhookStore.
	Webhooks forge.WebhookStore
	// WebhookURLs vets new endpoints' URLs; nil: webhooks cannot be
	// created (501).
	WebhookURLs WebhookURLChecker
	// MaxFileBytes is the most bytes one file may have (--max-file-bytes);
	// 0 means files.DefaultMaxBytes (20 MiB).
	MaxFileBytes int64
	// Cadences parses schedules' cron and every (normally
	// scheduler.Cadences); nil: /v1/schedules answers not_implemented.
	Cadences forge.CadenceParser
}

// Server is the HTTP API. Build it with New and serve Handler().
type Server struct {
	store     forge.Store
	rt        Runtime
	keys      map[string]string
	log       *slog.Logger
	clock     forge.Clock
	ids       forge.IDGen
	keepAlive time.Duration
	writeWait time.Duration // bound of one write to a streaming client
	handler   http.Handler
	models    ModelCatalog
	protocols []Protocol
	forumSvc  Forums
	metrics   http.Handler
	mcp       MCPChecker
	files     forge.FileStore
	webhooks  forge.WebhookStore
	// webhookURLs vets new endpoints' URLs (nil: none can be created).
	webhookURLs WebhookURLChecker
	// maxFileBytes is the limit of one file.
	maxFileBytes int64
	cadences     forge.CadenceParser
	// tenantMetrics serves a tenant's own series (nil: none).
	tenantMetrics func(tenant string) http.Handler
	operatorKey   string
	origins       map[string]bool // AllowedOrigins, lower-cased
	// streams caps the event streams open at once.
	streams *streamCaps

	readyChecks []ReadyCheck
	draining    atomic.Bool  // Drain was called
	sseOpen     atomic.Int64 // event streams open now

	locks keyedMutex // serializes idempotent requests sharing a key

	resolver KeyResolver
	keyed    atomic.Bool // keys are configured (see keysConfigured)
	// keylessAt is when the store last said it holds no key (unix ns).
	keylessAt atomic.Int64
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	s := &Server{
		store:     cfg.Store,
		rt:        cfg.Engine,
		keys:      make(map[string]string, len(cfg.Keys)),
		log:       cfg.Logger,
		clock:     cfg.Clock,
		ids:       cfg.IDs,
		keepAlive: cfg.KeepAlive,
		writeWait: sse.WriteWait,
		models:    cfg.Models,
		protocols: cfg.Protocols,
		forumSvc:  cfg.Forums,
		metrics:   cfg.Metrics,
		mcp:       cfg.MCP,

		tenantMetrics: cfg.TenantMetrics,
		operatorKey:   cfg.OperatorKey,
		origins:       allowedOrigins(cfg.AllowedOrigins),
		streams:       newStreamCaps(cfg.MaxStreamsPerSession, cfg.MaxStreamsPerTenant),

		readyChecks: cfg.Ready,

		files:        cfg.Files,
		webhooks:     cfg.Webhooks,
		webhookURLs:  cfg.WebhookURLs,
		maxFileBytes: cfg.MaxFileBytes,
		cadences:     cfg.Cadences,
	}
	if s.webhooks == nil {
		s.webhooks, _ = cfg.Store.(forge.WebhookStore)
	}
	if s.files == nil {
		s.files, _ = cfg.Store.(forge.FileStore)
	}
	if s.maxFileBytes <= 0 {
		s.maxFileBytes = files.DefaultMaxBytes
	}
	for k, t := range cfg.Keys {
		s.keys[k] = t
	}
	s.resolver = cfg.KeyResolver
	s.keyed.Store(len(s.keys) > 0)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = forge.SystemClock{}
	}
	if s.ids == nil {
		s.ids = forge.NewULIDGen(s.clock)
	}
	if s.keepAlive <= 0 {
		s.keepAlive = 15 * time.Second
	}
	s.handler = s.logRequests(s.compress(s.guard(s.routes())))
	return s
}

// Handler returns the HTTP handler serving the API.
func (s *Server) Handler() http.Handler { return s.handler }

// apiFunc is a handler that reports failure by returning an error, which
// writeError turns into the API's error answer.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

type route struct {
	method, path string
	h            apiFunc
	public       bool // no authentication
}

func (s *Server) routeTable() []route {
	return []route{
		{"GET", "/healthz", s.health, true},
		{"GET", "/readyz", s.ready, true},
		{"GET", "/metrics", s.serveMetrics, true}, // authenticates itself (operator key)
		{"GET", "/v1/openapi.json", s.openAPI, true},

		{"POST", "/v1/agents", s.createAgent, false},
		{"GET", "/v1/agents", s.listAgents, false},
		{"GET", "/v1/agents/{name}", s.getAgent, false},
		{"PUT", "/v1/agents/{name}", s.putAgent, false},
		{"DELETE", "/v1/agents/{name}", s.deleteAgent, false},

		{"POST", "/v1/sessions", s.createSession, false},
		{"GET", "/v1/sessions", s.listSessions, false},
		{"GET", "/v1/sessions/{sid}", s.getSession, false},
		{"DELETE", "/v1/sessions/{sid}", s.deleteSession, false},
		{"GET", "/v1/sessions/{sid}/messages", s.listMessages, false},
		{"GET", "/v1/sessions/{sid}/capabilities", s.getCapabilities, false},

		{"POST", "/v1/sessions/{sid}/turns", s.createTurn, false},
		{"GET", "/v1/sessions/{sid}/turns", s.listTurns, false},
		{"GET", "/v1/sessions/{sid}/turns/{tid}", s.getTurn, false},
		{"POST", "/v1/sessions/{sid}/cancel", s.cancel, false},
		{"POST", "/v1/sessions/{sid}/compact", s.compact, false},
		{"POST", "/v1/sessions/{sid}/sandbox/restore", s.restoreWorkspace, false},
		{"GET", "/v1/sessions/{sid}/sandbox/snapshots", s.listWorkspaceSnapshots, false},

		{"GET", "/v1/sessions/{sid}/events", s.sessionEvents, false},
		{"GET", "/v1/sessions/{sid}/turns/{tid}/events", s.turnEvents, false},

		{"GET", "/v1/models", s.listModels, false},

		{"POST", "/v1/files", s.createFile, false},
		{"GET", "/v1/files", s.listFiles, false},
		{"GET", "/v1/files/{fid}", s.getFile, false},
		{"GET", "/v1/files/{fid}/content", s.fileContent, false},
		{"DELETE", "/v1/files/{fid}", s.deleteFile, false},

		{"POST", "/v1/webhooks", s.createWebhook, false},
		{"GET", "/v1/webhooks", s.listWebhooks, false},
		{"GET", "/v1/webhooks/{whid}", s.getWebhook, false},
		{"DELETE", "/v1/webhooks/{whid}", s.deleteWebhook, false},
		{"GET", "/v1/webhooks/{whid}/deliveries", s.listWebhookDeliveries, false},
		{"POST", "/v1/schedules", s.createSchedule, false},
		{"GET", "/v1/schedules", s.listSchedules, false},
		{"GET", "/v1/schedules/{schid}", s.getSchedule, false},
		{"PATCH", "/v1/schedules/{schid}", s.patchSchedule, false},
		{"DELETE", "/v1/schedules/{schid}", s.deleteSchedule, false},
		{"GET", "/v1/schedules/{schid}/runs", s.listScheduleRuns, false},

		{"POST", "/v1/forums", s.createForum, false},
		{"GET", "/v1/forums", s.listForums, false},
		{"GET", "/v1/forums/{fid}", s.getForum, false},
		{"DELETE", "/v1/forums/{fid}", s.deleteForum, false},
		{"POST", "/v1/forums/{fid}/members", s.addMember, false},
		{"GET", "/v1/forums/{fid}/members", s.listMembers, false},
		{"GET", "/v1/forums/{fid}/members/{par}", s.getMember, false},
		{"DELETE", "/v1/forums/{fid}/members/{par}", s.removeMember, false},
		{"POST", "/v1/forums/{fid}/messages", s.postMessage, false},
		{"GET", "/v1/forums/{fid}/messages", s.listForumMessages, false},
		{"GET", "/v1/forums/{fid}/events", s.forumEvents, false},
	}
}

// routes builds the mux: every route, a JSON 405 for a known path with
// another method, and a JSON 404 for everything else.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	allow := map[string][]string{}
	var paths []string
	for _, rt := range s.routeTable() {
		h := s.serve(rt.h)
		if !rt.public {
			h = s.authenticate(h)
		}
		mux.Handle(rt.method+" "+rt.path, h)
		if _, ok := allow[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		allow[rt.path] = append(allow[rt.path], rt.method)
		if rt.method == "GET" {
			allow[rt.path] = append(allow[rt.path], "HEAD")
		}
	}
	for _, p := range paths {
		methods := allow[p]
		sort.Strings(methods)
		list := strings.Join(methods, ", ")
		mux.Handle(p, s.serve(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", list)
			return forge.Errorf(errMethodNotAllowed, "method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, list)
		}))
	}
	// The web inspector: static pages (public) that call this API from the
	// browser with the user's key. The root sends a browser there.
	mux.Handle(web.Prefix, web.New())
	mux.Handle("GET /{$}", http.RedirectHandler(web.Prefix, http.StatusFound))
	s.mountProtocols(mux)
	mux.Handle("/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		return forge.Errorf(forge.ErrNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	}))
	return mux
}

// serve adapts an apiFunc to http.Handler.
func (s *Server) serve(h apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

type tenantKey struct{}

// tenantOf returns the tenant authenticate put in the request context.
func tenantOf(r *http.Request) string {
	if t, ok := r.Context().Value(tenantKey{}).(string); ok {
		return t
	}
	return forge.DefaultTenant
}

// authenticate resolves the request's tenant from its bearer key. With no
// keys configured every request belongs to forge.DefaultTenant.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := s.tenantFor(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func (s *Server) tenantFor(r *http.Request) (string, error) {
	keyed, err := s.keysConfigured(r.Context())
	if err != nil {
		return "", err
	}
	if !keyed {
		return forge.DefaultTenant, nil
	}
	token, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	// Compare against every key in constant time, so the answer's timing
	// does not tell how much of a key matched.
	tenant := ""
	for key, t := range s.keys {
		if subtle.ConstantTimeCompare([]byte(key), []byte(token)) == 1 {
			tenant = t
		}
	}
	if tenant == "" {
		t, err := s.resolveKey(r.Context(), token)
		if err != nil {
			return "", err
		}
		tenant = t
	}
	if tenant == "" {
		return "", forge.Errorf(forge.ErrUnauthorized, "invalid API key")
	}
	return tenant, nil
}

// bearerToken returns the key of r's Authorization: Bearer header.
func bearerToken(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", forge.Errorf(forge.ErrUnauthorized, "missing Authorization header: send Authorization: Bearer <API key>")
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", forge.Errorf(forge.ErrUnauthorized, "malformed Authorization header: send Authorization: Bearer <API key>")
	}
	return token, nil
}

//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(openAPIDoc)
	return nil
}

// logRequests logs every request at debug level (5xx at error level),
// with the session_id and turn_id it concerns, counts open event streams,
// and turns a handler panic into a 500.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, sse: &s.sseOpen}
		defer func() {
			if rec.streaming {
				s.sseOpen.Add(-1)
			}
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				if !rec.wrote {
					writeJSON(rec, http.StatusInternalServerError, errorBody{apiError{Code: "internal", Message: "internal error"}})
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			level := slog.LevelDebug
			if status >= 500 {
				level = slog.LevelError
			}
			if !s.log.Enabled(r.Context(), level) {
				return
			}
			args := make([]any, 0, 14)
			// The mux set the path values on r itself.
			if sid := r.PathValue("sid"); sid != "" {
				args = append(args, "session_id", sid)
			}
			if tid := r.PathValue("tid"); tid != "" {
				args = append(args, "turn_id", tid)
			} else if rec.turnID != "" {
				args = append(args, "turn_id", rec.turnID)
			}
			args = append(args, "method", r.Method, "path", r.URL.Path, "status", status,
				"duration", time.Since(start), "bytes", rec.bytes)
			s.log.Log(r.Context(), level, "http request", args...)
		}()
		next.ServeHTTP(rec, r)
	})
}

// noteTurn tells the request log which turn a request started (POST
// /turns names none in its path).
func noteTurn(w http.ResponseWriter, turnID string) {
	for w != nil {
		if rec, ok := w.(*recorder); ok {
			rec.turnID = turnID
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// recorder remembers the status and size of an answer and counts it in
// sse while it is an event stream. It forwards Flush and Unwrap so
// http.ResponseController reaches the real writer.
type recorder struct {
	http.ResponseWriter
	status    int
	wrote     bool
	bytes     int64
	turnID    string // noteTurn
	sse       *atomic.Int64
	streaming bool // counted in sse
}

// begin records the answer's status when it starts.
func (r *recorder) begin(code int) {
	if r.wrote {
		return
	}
	r.status, r.wrote = code, true
	if code == http.StatusOK && strings.HasPrefix(r.Header().Get("Content-Type"), "text/event-stream") {
		r.streaming = true
		r.sse.Add(1)
	}
}

func (r *recorder) WriteHeader(code int) {
	r.begin(code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.begin(http.StatusOK)
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) FlushError() error {
	r.begin(http.StatusOK)
	return http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Flush() { _ = r.FlushError() }

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// keyedMutex is a set of mutexes by key, created on demand and dropped
// when unused.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// lock locks key and returns its unlock function.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
