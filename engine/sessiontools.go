package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/mcp"
)

// sandboxTools are the built-in tools that run in the session's sandbox.
var sandboxTools = map[string]bool{
	"bash": true, "read_file": true, "write_file": true, "edit_file": true, "list_files": true, "grep": true,
}

// usesSandbox reports whether the agent declares any sandbox tool.
func (r *run) usesSandbox() bool {
	for _, t := range r.agent.Tools {
		if t.BuiltIn && sandboxTools[t.Name] {
			return true
		}
	}
	return false
}

// prepareTools resolves what this turn can call: the built-ins, the
// sandbox's tools (the sandbox is provisioned now if the agent declares
// any), and the tools of the agent's MCP servers (started now, reused
// across the session's turns). Their events are queued for the next flush.
func (r *run) prepareTools() {
	r.tools = maps.Clone(r.e.tools)
	r.extraTools = map[string]forge.Tool{}
	r.caps = map[string]*capState{}
	r.prepareSubagents()
	thread := r.threadID
	if m := r.e.cfg.Sandboxes; m != nil && r.usesSandbox() {
		sb, created, err := m.Get(r.ctx, r.session.ID)
		if err != nil {
			r.e.log.Error("sandbox unavailable", "session", r.session.ID, "err", err)
		} else {
			r.sandbox = sb
			if created {
				r.event(forge.EventSandboxCreated, r.session.ID, thread, map[string]any{"dir": sb.Dir(), "isolated": m.Isolated()})
			}
			for _, t := range sb.Tools() {
				r.tools[t.Def().Name] = t
			}
		}
	}
	for _, t := range r.agent.Tools {
		c, ok := r.e.cfg.Capabilities[t.Name]
		if !ok || !t.BuiltIn {
			continue
		}
		st := &capState{raw: r.baseCaps[t.Name]}
		r.caps[t.Name] = st
		for _, tool := range c.Tools(st) {
			r.extraTools[tool.Def().Name] = tool
		}
	}
	if m := r.e.cfg.MCP; m != nil && len(r.agent.MCPServers) > 0 {
		tools, inits, err := m.Tools(r.ctx, r.session.ID, r.agent.MCPServers)
		for _, t := range tools {
			r.extraTools[t.Def().Name] = t
		}
		for _, in := range inits {
			r.event(forge.EventMCPInitialized, r.session.ID, thread, in)
			r.mcpInfo = append(r.mcpInfo, in)
		}
		for _, err := range unjoin(err) {
			var auth *mcp.AuthRequiredError
			if errors.As(err, &auth) {
				// The turn pauses for a token before calling the model.
				r.authActions = append(r.authActions, forge.RequiredAction{
					Type: forge.ActionAuth, CallID: r.e.ids.New(forge.PrefixCall), ThreadID: thread,
					Arguments: json.RawMessage("{}"), Server: auth.Server, AuthURL: auth.AuthURL,
				})
				continue
			}
			// The model works with the tools that are there; a call to a
			// tool of the failed server gets this error.
			r.mcpErrors = append(r.mcpErrors, err)
			r.e.log.Warn("MCP server unavailable", "session", r.session.ID, "err", err)
		}
	}
}

// tool returns the server-side tool named name, if this turn has one.
func (r *run) tool(name string) forge.Tool {
	if t, ok := r.tools[name]; ok {
		return t
	}
	return r.extraTools[name]
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

// applyAuthTokens hands the tokens of this turn's auth resolutions to the
// MCP manager before any server is contacted.
func (r *run) applyAuthTokens() {
	if r.e.cfg.MCP == nil {
		return
	}
	for _, res := range r.resolutions {
		if res.input.Type == forge.InputAuth && res.action.Server != "" {
			r.e.cfg.MCP.SetToken(r.session.ID, res.action.Server, res.input.Token)
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

// capabilityStates is what the turn's snapshot keeps: the states it
// started from, updated by what its tools stored.
func (r *run) capabilityStates() map[string]json.RawMessage {
	if len(r.baseCaps) == 0 && len(r.caps) == 0 {
		return nil
	}
	out := maps.Clone(r.baseCaps)
	if out == nil {
		out = map[string]json.RawMessage{}
	}
	for name, st := range r.caps {
		if raw := st.Load(); raw != nil {
			out[name] = raw
		}
	}
	return out
}

// usesCapabilities reports whether the agent enables any capability.
func (e *Engine) usesCapabilities(a *forge.Agent) bool {
	for _, t := range a.Tools {
		if _, ok := e.cfg.Capabilities[t.Name]; ok && t.BuiltIn {
			return true
		}
	}
	return false
}

// unavailable explains why tool is missing when it looks like a tool of an
// MCP server that failed to start ("" when it does not).
func (r *run) unavailable(tool string) string {
	for _, s := range r.agent.MCPServers {
		if !strings.HasPrefix(tool, s.Name+"_") {
			continue
		}
		for _, err := range r.mcpErrors {
			if strings.Contains(err.Error(), fmt.Sprintf("%q", s.Name)) {
				return fmt.Sprintf("the tool %q is unavailable: %v", tool, err)
			}
		}
	}
	return ""
}
