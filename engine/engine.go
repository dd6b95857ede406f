// Package engine runs turns: the turn loop and thread state machine,
// tool calls and subagents, cancellation and recovery. Every event it
// writes and every subscription it serves goes through an eventlog.Log.
package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// Sandboxes gives sessions a working directory and the tools that act in
// it. *sandbox.Manager implements it.
type Sandboxes interface {
	// ToolNames are the names of the tools every sandbox offers: what an
	// agent lists in its tools to get a sandbox.
	ToolNames() []string
	// Open returns the session's sandbox, provisioning it when it does not
	// exist yet (created is then true).
	Open(ctx context.Context, sessionID string) (sb forge.Sandbox, created bool, err error)
	// Isolated reports whether commands run process-isolated.
	Isolated() bool
	// Stop kills the session's running commands; the sandbox stays usable.
	Stop(sessionID string)
	// Remove deletes the session's sandbox.
	Remove(sessionID string) error
}

// MCPServers runs the MCP servers agents declare, once per session.
// *mcp.Manager implements it.
type MCPServers interface {
	// Tools starts the servers not running yet and returns the tools of
	// all, an MCPInitialized per server started by this call, and an error
	// joining the failures (a *forge.AuthRequiredError among them pauses
	// the turn for a token).
	Tools(ctx context.Context, sessionID string, servers []forge.MCPServer) ([]forge.Tool, []forge.MCPInitialized, error)
	// SetToken hands a server of the session the bearer token a turn's
	// auth resolution carried (kept in memory only).
	SetToken(sessionID, server, token string)
	// CloseSession stops the session's servers.
	CloseSession(sessionID string)
}

// Config wires an Engine.
type Config struct {
	Store forge.Store
	// Files keeps the files messages attach; nil: the Store's, when it is
	// a forge.FileStore (else attachments are refused).
	Files  forge.FileStore
	Models forge.Models
	// Tools are the server-side built-in tools by name.
	Tools map[string]forge.Tool
	// Bus carries live events (required: bus.New in one process, the
	// Redis bus across replicas). The assembly picks it; the engine
	// imports no bus of its own.
	Bus forge.Bus
	// Sandboxes, when set, gives sessions a working directory and the
	// sandbox tools (bash, read_file, ...).
	Sandboxes Sandboxes
	// MCP, when set, runs the MCP servers agents declare.
	MCP MCPServers
	// Capabilities are the built-in capabilities by name (e.g. todo); an
	// agent enables one by listing its name in tools.
	Capabilities map[string]forge.Capability
	// SubagentDepth is how deep delegations may nest: 1 (the default) lets
	// the root agent delegate and its subagents not.
	SubagentDepth int
	// Schemas compiles output schemas (structured output); nil refuses
	// them.
	Schemas forge.SchemaCompiler

	Clock  forge.Clock
	IDs    forge.IDGen
	Logger *slog.Logger

	// TurnTimeout bounds a turn's execution; 0 means 10 minutes.
	TurnTimeout time.Duration
	// CheckpointInterval is how often streaming parts are checkpointed;
	// 0 means 1 s.
	CheckpointInterval time.Duration
	// DeltaLinger is how long a model that reports its waits may be
	// waited for before the deltas it streamed so far are written and
	// published (deltas streamed in one burst share one write). 0 means
	// 1 ms; negative, as soon as it waits.
	DeltaLinger time.Duration
	// DeltaMaxHold bounds how long deltas are held back at all, waits or
	// not: a reply that streams in one long burst has its first deltas
	// written and published once they have been held this long. 0 means
	// 500 µs; negative, never (they wait for a wait or the next write).
	DeltaMaxHold time.Duration
	// ToolCancelWait bounds how long a cancel waits for running tool calls.
	// 0 means 5 s.
	ToolCancelWait time.Duration
	// MaxParallelTools bounds the tool calls of one step that run at once
	// (delegations included); the others wait their turn, in order. 0
	// means 16.
	MaxParallelTools int
	// MaxTurnOutputBytes bounds what one turn streams (text, reasoning,
	// tool names and arguments, every thread included): past it the turn
	// ends errored with code output_limit, what was streamed kept (its
	// part interrupted). 0 means DefaultMaxTurnOutputBytes; negative, no
	// limit.
	MaxTurnOutputBytes int64
	// MaxTurnOutputTokens bounds the output tokens of one turn's model
	// calls (as reported; estimated while a call streams): a call is cut
	// when its estimate crosses it, and no model call or tool call follows
	// a call whose reported tokens reached it (a final answer that did
	// stands). 0 means DefaultMaxTurnOutputTokens; negative, no limit.
	MaxTurnOutputTokens int64
	// Quota, when set, limits per tenant the turns of some providers'
	// models (forge serve: the scripted provider's).
	Quota *TurnQuota
	// MaxToolOutput is the most of a tool's output the model is shown;
	// longer outputs are cut with a marker and kept whole on the part
	// (data.full_output). 0 means 64 KiB.
	MaxToolOutput int
	// StoreRetryDelays are the waits before each retry of a failed store
	// write (nil: eventlog.DefaultRetryDelays). A write still failing after
	// them ends the turn errored with code store_error.
	StoreRetryDelays []time.Duration
	// Sleep waits between retries; nil sleeps for real.
	Sleep func(ctx context.Context, d time.Duration) error

	// Distributed mode (docs/distributed.md). Leaving these nil, this
	// process owns every turn of the store (single node, the default).

	// Leases, when set, makes turns owned by leases: the engine creates
	// each turn it runs with a lease, renews its leases every third of
	// LeaseTTL, stops a turn whose lease another replica took (writing
	// nothing more), and ends any replica's turn whose lease expired as a
	// restart would (cancelled, abandoned). Recover then ends only those.
	Leases forge.LeaseStore
	// LeaseTTL is the lease period; 0 means 10 s.
	LeaseTTL time.Duration
	// ReplicaID names this process as a lease owner; "" means a random id.
	ReplicaID string
	// Fence is handed to the event log: one writer per session at a time
	// across processes.
	Fence forge.WriterFence
	// Peers, when set, reaches the replica running a turn this one does
	// not (cancel, supersede, delete).
	Peers Peers
	// Observer, when set, watches turns, model calls and tool calls
	// (metrics, traces). Observers combines several.
	Observer Observer
	// Kinds are the session kinds of the layers above the engine, by
	// forge.Kind* (the forum registers forums and monologues: forum.Kinds).
	// A session of a kind neither direct nor here takes no turns.
	Kinds map[string]SessionKind
	// MaxFileBytes bounds a file a tool result carries (an MCP tool's
	// image), as --max-file-bytes bounds uploads; 0 is files.DefaultMaxBytes.
	MaxFileBytes int64
}

// Peers carries control signals between replicas. *redis.Bus implements
// it.
type Peers interface {
	// SendCancel asks whichever replica runs sig.TurnID to cancel it.
	SendCancel(ctx context.Context, sig forge.CancelSignal) error
	// OnCancel registers fn, called with every cancel signal sent by any
	// replica; fn must not block.
	OnCancel(fn func(forge.CancelSignal))
}

// DefaultLeaseTTL is Config.LeaseTTL's default.
const DefaultLeaseTTL = 10 * time.Second

// DefaultMaxParallelTools is Config.MaxParallelTools's default.
const DefaultMaxParallelTools = 16

// TurnRequest is the body of POST /turns, decoded.
type TurnRequest struct {
	Input          []forge.Input
	PreviousTurnID *string
	NewRoot        bool
	Supersede      bool
	IdempotencyKey string
	// Compact makes the turn a compaction of its own (POST /compact): no
	// input, one summary call, no other model call.
	Compact bool
	// Trigger starts a turn that answers messages its session took
	// outside turns (no input, no user message): a monologue's copies.
	// Only the layer owning the session's kind sets it.
	Trigger *forge.TurnTrigger
	// Owner marks a request of the layer owning the session's kind (the
	// forum): its SessionKind.Check decides what that request may do.
	Owner bool
	// OutputSchema, when set, is this turn's structured output (it wins
	// over the agent's).
	OutputSchema *forge.OutputSchema
	// Overrides are the request's per-turn settings (nil: none). A turn
	// that only resolves calls and brings none runs with those of the
	// turn it resolves (docs/decisions.md, "Per-request settings").
	Overrides *forge.TurnOverrides
	// ScheduleID marks a schedule's run (the scheduler sets it): the turn
	// has its Input like any, and Trigger {type: schedule, schedule_id}.
	// Unlike Trigger it does not make the turn a monologue's.
	ScheduleID string
	// IfBusy is what the request does while another turn of the session
	// runs (forge.IfBusy*; "" is the agent's default, else reject).
	IfBusy string

	// promote, when set, is the queued turn this request starts (its
	// stored request): the turn keeps its id, key and creation time.
	promote *forge.Turn
	// began, when set, is set once this request began the turn StartTurn
	// returns (not a repeat's, a queued or a steered one): StreamTurn's
	// subscription then holds all of it.
	began *bool
}

// Engine owns running turns. Every goroutine it starts is waited for by Close.
type Engine struct {
	cfg    Config
	store  forge.Store
	files  forge.FileStore // nil: no attachments
	events *eventlog.Log
	clock  forge.Clock
	ids    forge.IDGen
	log    *slog.Logger
	tools  map[string]forge.Tool
	models forge.Models
	obs    Observer // nil: nothing observes
	kinds  map[string]SessionKind
	// sandboxTools are the names of the sandbox's tools.
	sandboxTools map[string]bool
	// quotas counts the tenants' turns under Config.Quota (nil: none).
	quotas *quotas

	wg        sync.WaitGroup
	workers   *workers // the executions' goroutines
	histories historyCache
	cutoffs   cutoffCache // GET /messages?view=model with pruning
	// gaveUp is closed when Close stops waiting: retry loops end.
	gaveUp chan struct{}

	// replica is this process's lease owner id (distributed mode).
	replica string
	// stopKeeper ends the lease keeper, keeperDone says it has.
	stopKeeper, keeperDone chan struct{}

	mu      sync.Mutex            // guards the following
	running map[string]*execution // by session id
	// deleting are the sessions DeleteSession is deleting, each with a
	// channel closed when it is done: no turn of theirs registers
	// meanwhile (register), so none runs once the delete returns.
	deleting map[string]chan struct{}
	closing  bool
	// queueHolds counts, by session, the requests interrupting its
	// running turn: its queued turns wait for them (holdQueue).
	queueHolds map[string]int
}

// New returns an engine. Call Recover before serving, Close to stop.
func New(cfg Config) *Engine {
	if cfg.Clock == nil {
		cfg.Clock = forge.SystemClock{}
	}
	if cfg.IDs == nil {
		cfg.IDs = forge.NewULIDGen(cfg.Clock)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Bus == nil {
		panic("engine.New: Config.Bus is nil (bus.New(0, 0) is the in-process bus)")
	}
	if err := validKinds(cfg.Kinds); err != nil {
		panic(err)
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = 10 * time.Minute
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.DeltaLinger == 0 {
		cfg.DeltaLinger = defaultDeltaLinger
	}
	if cfg.DeltaMaxHold == 0 {
		cfg.DeltaMaxHold = defaultDeltaMaxHold
	}
	if cfg.SubagentDepth <= 0 {
		cfg.SubagentDepth = 1
	}
	if cfg.MaxToolOutput <= 0 {
		cfg.MaxToolOutput = 64 << 10
	}
	cfg.MaxTurnOutputBytes = limit(cfg.MaxTurnOutputBytes, DefaultMaxTurnOutputBytes)
	cfg.MaxTurnOutputTokens = limit(cfg.MaxTurnOutputTokens, DefaultMaxTurnOutputTokens)
	if cfg.ToolCancelWait <= 0 {
		cfg.ToolCancelWait = 5 * time.Second
	}
	if cfg.MaxParallelTools <= 0 {
		cfg.MaxParallelTools = DefaultMaxParallelTools
	}
	if cfg.Tools == nil {
		cfg.Tools = map[string]forge.Tool{}
	}
	if cfg.StoreRetryDelays == nil {
		cfg.StoreRetryDelays = eventlog.DefaultRetryDelays
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = cfg.IDs.New("replica_")
	}
	e := &Engine{
		cfg:   cfg,
		store: cfg.Store,
		files: cfg.Files,
		events: eventlog.New(eventlog.Config{Store: cfg.Store, Bus: cfg.Bus, Clock: cfg.Clock, Logger: cfg.Logger,
			RetryDelays: cfg.StoreRetryDelays, Sleep: cfg.Sleep, Fence: cfg.Fence}),
		replica:      cfg.ReplicaID,
		clock:        cfg.Clock,
		ids:          cfg.IDs,
		log:          cfg.Logger,
		tools:        cfg.Tools,
		models:       cfg.Models,
		obs:          cfg.Observer,
		sandboxTools: map[string]bool{},
		gaveUp:       make(chan struct{}),
		workers:      newWorkers(),
		running:      map[string]*execution{},
		deleting:     map[string]chan struct{}{},
		queueHolds:   map[string]int{},
		kinds:        cfg.Kinds,
		quotas:       newQuotas(cfg.Quota, cfg.Clock),
	}
	if e.files == nil {
		e.files, _ = cfg.Store.(forge.FileStore)
	}
	if cfg.Sandboxes != nil {
		for _, name := range cfg.Sandboxes.ToolNames() {
			e.sandboxTools[name] = true
		}
	}
	if cfg.Peers != nil {
		cfg.Peers.OnCancel(e.onCancelSignal)
	}
	if cfg.Leases != nil {
		e.stopKeeper, e.keeperDone = make(chan struct{}), make(chan struct{})
		go e.keepLeases()
	}
	return e
}

// ReplicaID is this process's id as a turn's lease owner.
func (e *Engine) ReplicaID() string { return e.replica }

// Log is the engine's event log: every writer of a session in this
// process goes through it (the forum layer's copies into monologues).
func (e *Engine) Log() *eventlog.Log { return e.events }

// IsBuiltin reports whether name is a server-side built-in tool.
func (e *Engine) IsBuiltin(name string) bool {
	_, ok := e.tools[name]
	_, capability := e.cfg.Capabilities[name]
	return ok || capability || e.sandboxTools[name]
}

// Close stops the engine gracefully: running turns may finish until ctx is
// done; those still running then end cancelled with reason shutdown. It
// returns once every goroutine the engine started has exited.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	runs := make([]*execution, 0, len(e.running))
	for _, x := range e.running {
		runs = append(runs, x)
	}
	e.mu.Unlock()
	for _, x := range runs {
		select {
		case <-x.done:
		case <-ctx.Done():
			x.stop(forge.CancelShutdown, "")
		}
	}
	for _, x := range runs {
		select {
		case <-x.done:
		case <-ctx.Done():
			// A terminal write still retrying gives up; recovery ends the
			// turn at the next start.
			e.giveUp()
			<-x.done
		}
	}
	// The leases are kept until the turns have ended: a turn finishing
	// within the grace period must not be taken over meanwhile.
	if e.stopKeeper != nil {
		select {
		case <-e.stopKeeper:
		default:
			close(e.stopKeeper)
		}
		<-e.keeperDone
	}
	e.wg.Wait()
	e.workers.stop()
	// Deltas still queued for a shared bus are published (each turn's
	// terminal write drained its own; this waits for their flushers).
	return e.events.Close(ctx)
}

func (e *Engine) giveUp() {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.gaveUp:
	default:
		close(e.gaveUp)
	}
}
