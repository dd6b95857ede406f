// Package mcp connects Forge agents to MCP servers (stdio and streamable
// HTTP) and exposes their tools as forge.Tools named "<server>_<tool>".
//
// A Manager starts each server lazily, once per Forge session, keeps it while
// it is alive and restarts it on the next use after it died. Every operation
// is bounded: starting a server by Options.InitTimeout, a tool call by
// Options.CallTimeout.
//
// Nothing a tenant declares runs on the host: a stdio server runs in its
// session's sandbox (Options.Launcher), unless it is one of the operator's
// Options.Commands marked Host; a url server reaches only the addresses
// Options.Network allows, checked on every connection it dials.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	forge "github.com/forge-runtime/forge"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of Options.
const (
	DefaultCallTimeout = 60 * time.Second
	DefaultInitTimeout = 30 * time.Second
	// terminateDuration is how long closing a stdio server waits after
	// closing its stdin before signalling it (server-everything ignores
	// stdin close).
	terminateDuration = 500 * time.Millisecond
)

// Options configure a Manager.
type Options struct {
	Logger      *slog.Logger
	CallTimeout time.Duration // a tool call; default 60s
	InitTimeout time.Duration // starting a server and listing its tools; default 30s

	// Launcher runs stdio servers in their session's sandbox. Without it
	// (or without isolation) only the Host entries of Commands run.
	Launcher Launcher
	// Commands are the stdio servers the operator offers: a matching
	// command gets the entry's environment, and runs on the host when the
	// entry says so.
	Commands []AllowedCommand
	// OnlyAllowedCommands refuses the stdio commands Commands does not
	// hold, even sandboxed.
	OnlyAllowedCommands bool
	// Network says which addresses url servers may connect to (public
	// ones only by default).
	Network NetworkPolicy

	// treatAsPublic, when set, makes the guard take matching addresses
	// for public ones (tests: a "public" server on loopback).
	treatAsPublic func(netip.AddrPort) bool
}

// Manager owns the MCP server connections of every session. It is safe for
// concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	closed   bool
	sessions map[string]map[string]*server // session -> server name -> server
	tokens   map[tokenKey]string
	wg       sync.WaitGroup // background closes
}

type tokenKey struct{ session, server string }

// NewManager returns a Manager.
func NewManager(opts Options) *Manager {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.InitTimeout <= 0 {
		opts.InitTimeout = DefaultInitTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		opts:     opts,
		log:      log,
		sessions: map[string]map[string]*server{},
		tokens:   map[tokenKey]string{},
	}
}

var errClosed = errors.New("MCP manager is closed")

// Tools starts (when not running yet) each declared server of the session and
// returns their tools, plus an MCPInitialized for every server started by this
// call. When some servers fail, the tools of the others are still returned,
// with an error joining the failures (errors.As finds *forge.AuthRequiredError).
func (m *Manager) Tools(ctx context.Context, sessionID string, servers []forge.MCPServer) ([]forge.Tool, []forge.MCPInitialized, error) {
	type out struct {
		tools []forge.Tool
		init  *forge.MCPInitialized
		err   error
	}
	results := make([]out, len(servers))
	var wg sync.WaitGroup
	for i, spec := range servers {
		srv, err := m.server(sessionID, spec)
		if err != nil {
			results[i].err = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, init, err := srv.ensure(ctx)
			if err != nil {
				results[i].err = err
				return
			}
			results[i].tools = srv.forgeTools(st)
			results[i].init = init
		}()
	}
	wg.Wait()
	var tools []forge.Tool
	var inits []forge.MCPInitialized
	var errs []error
	seen := map[string]bool{}
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		for _, t := range r.tools {
			name := t.Def().Name
			if seen[name] {
				m.log.Warn("mcp: duplicate tool name, skipped", "tool", name)
				continue
			}
			seen[name] = true
			tools = append(tools, t)
		}
		if r.init != nil {
			inits = append(inits, *r.init)
		}
	}
	return tools, inits, errors.Join(errs...)
}

// server returns the session's server for spec, replacing one declared
// differently under the same name (a new agent version).
func (m *Manager) server(sessionID string, spec forge.MCPServer) (*server, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	ss := m.sessions[sessionID]
	if ss == nil {
		ss = map[string]*server{}
		m.sessions[sessionID] = ss
	}
	if s := ss[spec.Name]; s != nil {
		if reflect.DeepEqual(s.spec, spec) {
			return s, nil
		}
		m.closeAsync(s)
	}
	s := &server{m: m, session: sessionID, spec: spec, redact: newRedactor(spec.Env)}
	ss[spec.Name] = s
	return s, nil
}

// closeAsync stops s in the background; Close waits for it. m.mu is held.
func (m *Manager) closeAsync(s *server) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		s.shutdown()
	}()
}

// SetToken stores a bearer token for an HTTP server of a session; it is sent
// from the next request on (a connection refused with 401 is reopened on the
// next use). Tokens live in memory only.
func (m *Manager) SetToken(sessionID, server, token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[tokenKey{sessionID, server}] = token
}

func (m *Manager) token(sessionID, server string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tokens[tokenKey{sessionID, server}]
}

// CloseSession stops the session's servers (in the background; Close waits
// for them) and forgets its tokens.
func (m *Manager) CloseSession(sessionID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions[sessionID] {
		m.closeAsync(s)
	}
	delete(m.sessions, sessionID)
	for k := range m.tokens {
		if k.session == sessionID {
			delete(m.tokens, k)
		}
	}
}

// Close stops every server and waits for them to exit, or for ctx.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	for sid, ss := range m.sessions {
		for _, s := range ss {
			m.closeAsync(s)
		}
		delete(m.sessions, sid)
	}
	clear(m.tokens)
	m.mu.Unlock()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("closing MCP servers: %w", ctx.Err())
	}
}

// server is one declared server of one session.
type server struct {
	m       *Manager
	session string
	spec    forge.MCPServer
	redact  *redactor // for what the server says (stderr, error texts)

	startMu sync.Mutex // serializes starts

	mu      sync.Mutex
	st      *state // nil when not running
	stopped bool   // the session was closed
}

// state is one running connection.
type state struct {
	cs      *sdk.ClientSession
	tools   []*sdk.Tool
	rt      *httpRoundTripper // HTTP only
	guard   *addrGuard        // HTTP only
	tr      *http.Transport   // HTTP only
	stderr  *stderrLog        // stdio only
	cmd     *exec.Cmd         // stdio only
	dead    chan struct{}     // closed when the connection ended
	closing sync.Once
}

func (s *server) current() *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return nil
	}
	select {
	case <-s.st.dead:
		return nil
	default:
		return s.st
	}
}

// ensure returns the running connection, starting it when needed; init is
// non-nil when this call started it.
func (s *server) ensure(ctx context.Context) (*state, *forge.MCPInitialized, error) {
	if st := s.current(); st != nil {
		return st, nil, nil
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if st := s.current(); st != nil {
		return st, nil, nil
	}
	s.mu.Lock()
	stopped := s.stopped
	old := s.st
	s.st = nil
	s.mu.Unlock()
	if stopped {
		return nil, nil, fmt.Errorf("MCP server %q is not running: its session was closed", s.spec.Name)
	}
	if old != nil {
		old.close() // reap the dead one
	}
	st, err := s.start(ctx)
	if err != nil {
		if ctx.Err() != nil && !errors.As(err, new(*forge.AuthRequiredError)) {
			return nil, nil, fmt.Errorf("starting MCP server %q was cancelled: %w", s.spec.Name, ctx.Err())
		}
		return nil, nil, err
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		st.close()
		return nil, nil, fmt.Errorf("MCP server %q is not running: its session was closed", s.spec.Name)
	}
	s.st = st
	s.mu.Unlock()
	init := &forge.MCPInitialized{Server: s.spec.Name, Tools: make([]string, 0, len(st.tools))}
	if r := st.cs.InitializeResult(); r != nil {
		init.ProtocolVersion = r.ProtocolVersion
	}
	for _, t := range st.tools {
		init.Tools = append(init.Tools, ToolName(s.spec.Name, t.Name))
	}
	s.m.log.Info("mcp: server started", "session_id", s.session, "server", s.spec.Name,
		"protocol", init.ProtocolVersion, "tools", len(init.Tools))
	return st, init, nil
}

func (s *server) start(ctx context.Context) (*state, error) {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.InitTimeout)
	defer cancel()
	st := &state{dead: make(chan struct{})}
	var transport sdk.Transport
	if len(s.spec.Command) > 0 {
		cmd, err := s.m.stdioCommand(ctx, s.session, s.spec)
		if err != nil {
			close(st.dead)
			return nil, s.startError(st, err)
		}
		st.stderr = newStderrLog(s.m.log.With("session_id", s.session, "server", s.spec.Name), s.redact)
		st.cmd = cmd
		cmd.Stderr = st.stderr
		transport = &sdk.CommandTransport{Command: cmd, TerminateDuration: terminateDuration}
		defer func() {
			// Sweep children left behind once the connection ends.
			go func() {
				<-st.dead
				killProcessGroup(cmd)
			}()
		}()
	} else {
		origin, err := url.Parse(s.spec.URL)
		if err != nil {
			close(st.dead)
			return nil, s.startError(st, fmt.Errorf("its url does not parse: %w", err))
		}
		st.rt = &httpRoundTripper{
			origin:  origin,
			headers: s.spec.Headers,
			token:   func() string { return s.m.token(s.session, s.spec.Name) },
		}
		st.guard = s.m.newGuard(ctx)
		var client *http.Client
		client, st.tr = st.guard.httpClient(st.rt)
		transport = &sdk.StreamableClientTransport{
			Endpoint:             s.spec.URL,
			HTTPClient:           client,
			DisableStandaloneSSE: true,
			MaxRetries:           1,
		}
	}
	// The SDK's own log goes to Forge's, tagged with the server.
	client := sdk.NewClient(&sdk.Implementation{Name: "forge", Version: "1"},
		&sdk.ClientOptions{Logger: s.m.log.With("component", "mcp-sdk", "session_id", s.session, "server", s.spec.Name)})
	cs, err := client.Connect(ctx, transport, nil)
	if st.cmd != nil {
		for _, f := range st.cmd.ExtraFiles { // the child has its copies
			_ = f.Close()
		}
	}
	if err != nil {
		close(st.dead)
		return nil, s.startError(st, err)
	}
	st.cs = cs
	go func() {
		_ = cs.Wait()
		close(st.dead)
	}()
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			st.close()
			return nil, s.startError(st, fmt.Errorf("listing tools: %w", err))
		}
		st.tools = append(st.tools, t)
	}
	return st, nil
}

func (s *server) startError(st *state, err error) error {
	if st.rt != nil {
		if a := st.rt.authError(s.spec.Name); a != nil {
			return a
		}
	}
	if r := st.refusal(); r != nil {
		err = r
	} else if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("it did not finish starting within %s", s.m.opts.InitTimeout)
	}
	msg := s.redact.apply(fmt.Sprintf("MCP server %q is not running: %v", s.spec.Name, err))
	if st.stderr != nil {
		if tail := st.stderr.lastLines(3); tail != "" {
			msg += "; its stderr ended with: " + tail
		}
	}
	s.m.log.Warn("mcp: server failed to start", "session_id", s.session, "server", s.spec.Name, "err", msg)
	return errors.New(msg)
}

// markDead stops st when it is still the current connection.
func (s *server) markDead(st *state) {
	s.mu.Lock()
	if s.st == st {
		s.st = nil
	}
	s.mu.Unlock()
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		st.close()
	}()
}

// shutdown stops the server for good.
func (s *server) shutdown() {
	s.mu.Lock()
	s.stopped = true
	st := s.st
	s.st = nil
	s.mu.Unlock()
	if st != nil {
		st.close()
	}
}

func (st *state) close() {
	st.closing.Do(func() {
		if st.cs != nil {
			_ = st.cs.Close()
			<-st.dead
		}
		if st.stderr != nil {
			st.stderr.flush()
		}
		if st.tr != nil {
			st.tr.CloseIdleConnections()
		}
	})
}

// refusal is the last connection the network policy refused, or nil.
func (st *state) refusal() *AddressRefusedError {
	if st.guard == nil {
		return nil
	}
	return st.guard.refusal()
}

func (s *server) forgeTools(st *state) []forge.Tool {
	out := make([]forge.Tool, 0, len(st.tools))
	for _, t := range st.tools {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || t.InputSchema == nil || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		out = append(out, &tool{
			srv: s,
			def: forge.ToolDef{Name: ToolName(s.spec.Name, t.Name), Description: desc, InputSchema: schema},
			mcp: t.Name,
		})
	}
	return out
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// ToolName is the name the model sees for tool of server.
func ToolName(server, tool string) string {
	return unsafeChars.ReplaceAllString(server+"_"+tool, "_")
}

// tool is an MCP tool as a forge.Tool.
type tool struct {
	srv *server
	def forge.ToolDef
	mcp string // the tool's name on its server
}

func (t *tool) Def() forge.ToolDef { return t.def }

// Call calls the tool, restarting its server first when it died.
func (t *tool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	s := t.srv
	name := s.spec.Name
	st, _, err := s.ensure(ctx)
	if err != nil {
		return forge.ToolResult{}, err
	}
	var arguments any = map[string]any{}
	if a := bytes.TrimSpace(args); len(a) > 0 && string(a) != "null" {
		if a[0] != '{' || !json.Valid(a) {
			return forge.ToolResult{}, fmt.Errorf("arguments of %s must be a JSON object", t.def.Name)
		}
		arguments = json.RawMessage(a)
	}
	cctx, cancel := context.WithTimeout(ctx, s.m.opts.CallTimeout)
	defer cancel()
	res, err := st.cs.CallTool(cctx, &sdk.CallToolParams{Name: t.mcp, Arguments: arguments})
	if err == nil {
		return toolResult(res), nil
	}
	if st.rt != nil {
		if a := st.rt.authError(name); a != nil {
			s.markDead(st)
			return forge.ToolResult{}, a
		}
	}
	var wire *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		// The caller gave up; the server is fine.
		return forge.ToolResult{}, fmt.Errorf("MCP tool %s was cancelled: %w", t.def.Name, ctx.Err())
	case errors.As(err, &wire):
		// The server answered with an error: it is alive.
		return forge.ToolResult{}, fmt.Errorf("MCP server %q rejected the call of %q: %s", name, t.mcp, s.redact.apply(wire.Message))
	case cctx.Err() != nil:
		s.m.log.Warn("mcp: tool call timed out; stopping server", "session_id", s.session, "server", name, "tool", t.mcp)
		s.markDead(st)
		return forge.ToolResult{}, fmt.Errorf("MCP server %q did not answer %q within %s; it was stopped and will be restarted on next use", name, t.mcp, s.m.opts.CallTimeout)
	default:
		if r := st.refusal(); r != nil {
			err = r
		}
		msg := s.redact.apply(fmt.Sprintf("MCP server %q is not running: the call of %q failed (%v); it will be restarted on next use", name, t.mcp, err))
		s.m.log.Warn("mcp: tool call failed; server marked dead", "session_id", s.session, "server", name, "tool", t.mcp, "err", msg)
		s.markDead(st)
		if st.stderr != nil {
			if tail := st.stderr.lastLines(3); tail != "" {
				msg += "; its stderr ended with: " + tail
			}
		}
		return forge.ToolResult{}, errors.New(msg)
	}
}

// toolResult is a call's result: its content as text (an image named
// where it stood), and the images of a successful call as files of the
// result besides (the engine stores them; a model that takes images in
// tool results is shown them). A failed call's text alone is shown.
func toolResult(res *sdk.CallToolResult) forge.ToolResult {
	out := forge.ToolResult{Output: flatten(res.Content, res.StructuredContent), IsError: res.IsError}
	if res.IsError {
		return out
	}
	for _, c := range res.Content {
		if img, ok := c.(*sdk.ImageContent); ok {
			out.Files = append(out.Files, forge.ToolFile{MimeType: img.MIMEType, Data: img.Data})
		}
	}
	return out
}

// flatten renders content blocks as text.
func flatten(content []sdk.Content, structured any) string {
	var parts []string
	for _, c := range content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s %s]", c.Name, c.URI))
		case *sdk.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
				parts = append(parts, "[resource]")
			case r.Text != "":
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text))
			default:
				parts = append(parts, fmt.Sprintf("[resource %s %s, %d bytes]", r.URI, r.MIMEType, len(r.Blob)))
			}
		default:
			b, _ := json.Marshal(c)
			parts = append(parts, string(b))
		}
	}
	if len(parts) == 0 && structured != nil {
		b, _ := json.Marshal(structured)
		return string(b)
	}
	return strings.Join(parts, "\n")
}

// stdioEnv is the environment of an operator's host command: a minimal
// one plus the declared variables.
func stdioEnv(extra map[string]string) []string {
	env := map[string]string{}
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TZ", "SHELL", "TERM"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// ServerPID is the process id of a running stdio server (of bubblewrap
// for a sandboxed one: the server dies with it), or 0 (for tests and
// diagnostics).
func (m *Manager) ServerPID(sessionID, name string) int {
	m.mu.Lock()
	s := m.sessions[sessionID][name]
	m.mu.Unlock()
	if s == nil {
		return 0
	}
	st := s.current()
	if st == nil || st.cmd == nil || st.cmd.Process == nil {
		return 0
	}
	return st.cmd.Process.Pid
}
