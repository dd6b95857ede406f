package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/forge-runtime/forge"
)

// callableKind tells how a call to a callable runs.
type callableKind int

const (
	// serverTool is a forge.Tool the server runs: a built-in, a sandbox
	// tool, a capability's tool or an MCP server's tool.
	serverTool callableKind = iota + 1
	// delegation hands a task to a subagent: the call runs a child thread
	// and its result is the child's final text.
	delegation
)

// callable is something the model can call by name this turn and the
// server answers. Client tools are not callables: they are declared on the
// agent and answered by the client.
type callable struct {
	kind callableKind
	def  forge.ToolDef
	tool forge.Tool   // serverTool
	sub  *forge.Agent // delegation
	// inSandbox is set for the sandbox's tools: a step calling one is
	// diffed for a patch.
	inSandbox bool
}

// toolSet is what one thread can call this turn, resolved by prepareTools.
type toolSet struct {
	// named are the built-in and sandbox tools the agent version lists,
	// and no others: a call resolved after a new version dropped a tool
	// must not find it. extra are capability, MCP and subagent tools,
	// always offered.
	named map[string]*callable
	extra map[string]*callable
	// caps are the states of the capabilities the agent enables.
	caps    map[string]*capState
	sandbox forge.Sandbox
	// mcpErrors are the MCP servers that failed to start this turn.
	mcpErrors []error
	// authActions are MCP servers that need a token before the turn goes on.
	authActions []forge.RequiredAction
}

func tool(t forge.Tool) *callable { return &callable{kind: serverTool, def: t.Def(), tool: t} }

// prepareTools resolves what the thread can call: the built-ins the agent
// lists, the sandbox's tools it lists (the sandbox is provisioned now if it
// lists any),
// the capabilities' tools (from the base turn's states for the main
// thread), the tools of the agent's MCP servers (started now, reused
// across the session's turns) and its subagents. Their events are queued
// for the next flush.
func (th *thread) prepareTools() {
	x, e := th.x, th.x.e
	ts := &toolSet{named: map[string]*callable{}, extra: map[string]*callable{}, caps: map[string]*capState{}}
	th.tools = ts
	for _, spec := range th.agent.Tools {
		if t, ok := e.tools[spec.Name]; ok && !spec.Client {
			ts.named[spec.Name] = tool(t)
		}
	}
	if m := e.cfg.Sandboxes; m != nil && th.usesSandbox() {
		sb, created, err := m.Open(x.ctx, x.session.ID)
		if err != nil {
			e.log.Error("sandbox unavailable", "session_id", x.session.ID, "err", err)
		} else {
			ts.sandbox = sb
			x.noteSandbox(sb)
			if created {
				th.event(forge.EventSandboxCreated, x.session.ID, forge.SandboxCreatedData{Dir: sb.Dir(), Isolated: m.Isolated()})
			}
			th.materializeAttachments(sb)
			for _, t := range sb.Tools() {
				if !th.listsServerTool(t.Def().Name) {
					continue
				}
				c := tool(t)
				c.inSandbox = true
				ts.named[c.def.Name] = c
			}
		}
	}
	for _, spec := range th.agent.Tools {
		c, ok := e.cfg.Capabilities[spec.Name]
		if !ok || !spec.BuiltIn {
			continue
		}
		st := &capState{}
		if th.depth == 0 {
			st.raw = x.base.Capabilities[spec.Name]
		}
		ts.caps[spec.Name] = st
		for _, t := range c.Tools(st) {
			ts.extra[t.Def().Name] = tool(t)
		}
	}
	if m := e.cfg.MCP; m != nil && len(th.agent.MCPServers) > 0 {
		tools, inits, err := m.Tools(x.ctx, x.session.ID, th.agent.MCPServers)
		for _, t := range tools {
			ts.extra[t.Def().Name] = tool(t)
		}
		for _, in := range inits {
			th.event(forge.EventMCPInitialized, x.session.ID, in)
		}
		x.noteMCP(inits)
		for _, err := range unjoin(err) {
			var auth *forge.AuthRequiredError
			if errors.As(err, &auth) {
				// The turn pauses for a token before calling the model.
				ts.authActions = append(ts.authActions, forge.RequiredAction{
					Type: forge.ActionAuth, CallID: e.ids.New(forge.PrefixCall), ThreadID: th.id,
					Arguments: json.RawMessage("{}"), Server: auth.Server, AuthURL: auth.AuthURL,
				})
				continue
			}
			// The model works with the tools that are there; a call to a
			// tool of the failed server gets this error.
			ts.mcpErrors = append(ts.mcpErrors, err)
			e.log.Warn("MCP server unavailable", "session_id", x.session.ID, "err", err)
		}
	}
	th.prepareSubagents()
}

// usesSandbox reports whether the agent lists any sandbox tool.
func (th *thread) usesSandbox() bool {
	for _, t := range th.agent.Tools {
		if t.BuiltIn && th.x.e.sandboxTools[t.Name] {
			return true
		}
	}
	return false
}

// listsServerTool reports whether the agent lists name as a tool the
// server runs (a bare name, or declared without "client": true).
func (th *thread) listsServerTool(name string) bool {
	spec, ok := th.agent.Tool(name)
	return ok && !spec.Client
}

// lookup returns what answers a call to name this turn, nil when nothing
// server-side does.
func (ts *toolSet) lookup(name string) *callable {
	if c, ok := ts.named[name]; ok {
		return c
	}
	return ts.extra[name]
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// defs is what the model is told about the thread's tools: the agent's
// tools in its order (server tools by their own definition, client tools
// as declared), then the extra tools by name.
func (th *thread) toolDefs() []forge.ToolDef {
	ts := th.tools
	defs := make([]forge.ToolDef, 0, len(th.agent.Tools)+len(ts.extra))
	for _, t := range th.agent.Tools {
		if _, ok := th.x.e.cfg.Capabilities[t.Name]; ok && t.BuiltIn {
			continue // its tools are among the extra tools
		}
		if c, ok := ts.named[t.Name]; ok && !t.Client {
			defs = append(defs, c.def)
			continue
		}
		defs = append(defs, forge.ToolDef{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	for _, name := range slices.Sorted(maps.Keys(ts.extra)) {
		defs = append(defs, ts.extra[name].def)
	}
	return defs
}

func (th *thread) toolNames() []string {
	names := make([]string, 0, len(th.agent.Tools)+len(th.tools.extra))
	for _, t := range th.agent.Tools {
		names = append(names, t.Name)
	}
	names = append(names, slices.Sorted(maps.Keys(th.tools.extra))...)
	if len(names) == 0 {
		return []string{"(none)"}
	}
	return names
}

// unavailable explains why tool is missing when it looks like a tool of an
// MCP server that failed to start ("" when it does not).
func (th *thread) unavailable(tool string) string {
	for _, s := range th.agent.MCPServers {
		if !strings.HasPrefix(tool, s.Name+"_") {
			continue
		}
		for _, err := range th.tools.mcpErrors {
			if strings.Contains(err.Error(), fmt.Sprintf("%q", s.Name)) {
				return fmt.Sprintf("the tool %q is unavailable: %v", tool, err)
			}
		}
	}
	return ""
}

// applyAuthTokens hands the tokens of this turn's auth resolutions to the
// MCP manager before any server is contacted.
func (th *thread) applyAuthTokens() {
	m := th.x.e.cfg.MCP
	if m == nil {
		return
	}
	for _, res := range th.resolutions {
		if res.input.Type == forge.InputAuth && res.action.Server != "" {
			m.SetToken(th.x.session.ID, res.action.Server, res.input.Token)
		}
	}
}

// capState is a capability's state during a turn; its tools may run
// concurrently.
type capState struct {
	mu  sync.Mutex // guards raw
	raw json.RawMessage
}

func (s *capState) Load() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw
}

func (s *capState) Store(raw json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw = raw
}

// capabilityStates is what the turn's snapshot keeps: the base turn's
// states, updated by what the main thread's capability tools stored.
func (x *execution) capabilityStates() map[string]json.RawMessage {
	var caps map[string]*capState
	if x.main != nil && x.main.tools != nil {
		caps = x.main.tools.caps
	}
	if len(x.base.Capabilities) == 0 && len(caps) == 0 {
		return nil
	}
	out := maps.Clone(x.base.Capabilities)
	if out == nil {
		out = map[string]json.RawMessage{}
	}
	for name, st := range caps {
		if raw := st.Load(); raw != nil {
			out[name] = raw
		}
	}
	return out
}
