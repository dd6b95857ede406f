// Package engine runs turns: the turn loop and thread state machine, the
// per-session event writer, cancellation, recovery and live subscriptions.
package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/mcp"
	"github.com/forge-runtime/forge/sandbox"
)

// Config wires an Engine.
type Config struct {
	Store  forge.Store
	Models forge.Models
	// Tools are the server-side built-in tools by name.
	Tools map[string]forge.Tool
	Bus   *bus.Bus
	// Sandboxes, when set, gives sessions a working directory and the
	// sandbox tools (bash, read_file, ...).
	Sandboxes *sandbox.Manager
	// MCP, when set, runs the MCP servers agents declare.
	MCP *mcp.Manager
	// Capabilities are the built-in capabilities by name (e.g. todo); an
	// agent enables one by listing its name in tools.
	Capabilities map[string]forge.Capability
	// SubagentDepth is how deep delegations may nest: 1 (the default) lets
	// the root agent delegate and its subagents not.
	SubagentDepth int

	Clock  forge.Clock
	IDs    forge.IDGen
	Logger *slog.Logger

	// TurnTimeout bounds a turn's execution; 0 means 10 minutes.
	TurnTimeout time.Duration
	// CheckpointInterval is how often streaming parts are checkpointed;
	// 0 means 1 s.
	CheckpointInterval time.Duration
	// ToolCancelWait bounds how long a cancel waits for running tool calls.
	// 0 means 5 s.
	ToolCancelWait time.Duration
	// MaxToolOutput is the most of a tool's output the model is shown;
	// longer outputs are cut with a marker and kept whole on the part
	// (data.full_output). 0 means 64 KiB.
	MaxToolOutput int
}

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
}

// Engine owns running turns. Every goroutine it starts is waited for by Close.
type Engine struct {
	cfg    Config
	store  forge.Store
	bus    *bus.Bus
	clock  forge.Clock
	ids    forge.IDGen
	log    *slog.Logger
	tools  map[string]forge.Tool
	models forge.Models

	wg        sync.WaitGroup
	histories historyCache

	mu      sync.Mutex             // guards the following
	logs    map[string]*sessionLog // per-session sequencer and writer
	running map[string]*run        // by session id
	closing bool
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
		cfg.Bus = bus.New(0, 0)
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = 10 * time.Minute
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.SubagentDepth <= 0 {
		cfg.SubagentDepth = 1
	}
	if cfg.MaxToolOutput <= 0 {
		cfg.MaxToolOutput = 64 << 10
	}
	if cfg.ToolCancelWait <= 0 {
		cfg.ToolCancelWait = 5 * time.Second
	}
	if cfg.Tools == nil {
		cfg.Tools = map[string]forge.Tool{}
	}
	return &Engine{
		cfg:     cfg,
		store:   cfg.Store,
		bus:     cfg.Bus,
		clock:   cfg.Clock,
		ids:     cfg.IDs,
		log:     cfg.Logger,
		tools:   cfg.Tools,
		models:  cfg.Models,
		logs:    map[string]*sessionLog{},
		running: map[string]*run{},
	}
}

// IsBuiltin reports whether name is a server-side built-in tool.
func (e *Engine) IsBuiltin(name string) bool {
	_, ok := e.tools[name]
	_, capability := e.cfg.Capabilities[name]
	return ok || capability || (e.cfg.Sandboxes != nil && sandboxTools[name])
}

// Close stops the engine gracefully: running turns may finish until ctx is
// done; those still running then end cancelled with reason shutdown. It
// returns once every goroutine the engine started has exited.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	runs := make([]*run, 0, len(e.running))
	for _, r := range e.running {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	for _, r := range runs {
		select {
		case <-r.done:
		case <-ctx.Done():
			r.stop(forge.CancelShutdown)
			<-r.done
		}
	}
	e.wg.Wait()
	return nil
}
