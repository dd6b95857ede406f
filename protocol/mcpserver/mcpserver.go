// Package mcpserver serves the tenant's agents as MCP tools at /mcp: a
// Streamable HTTP MCP server (the official Go SDK), one tool ask_<agent>
// per agent, authenticated by the caller's bearer key (API.md, "Agents as
// MCP tools and A2A agents").
package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/protocol"
)

// Prefix is the path the server answers (and /mcp itself).
const Prefix = "/mcp/"

// maxTools bounds the tools listed for one tenant.
const maxTools = 1000

// maxBody is the largest request body, as on the API's JSON routes.
const maxBody = 4 << 20

// Protocol is the MCP endpoint as an httpapi.Protocol.
type Protocol struct {
	// MaxSessions bounds the MCP sessions (of clients that initialize)
	// one tenant holds open on this replica; 0: 100. Each holds memory
	// until it is closed or idles out.
	MaxSessions int
}

func (Protocol) Prefix() string { return Prefix }

// WriteError answers an error before the MCP exchange starts (a refused
// key, a refused request): JSON-RPC's error object, without an id.
func (Protocol) WriteError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32000, "message": message, "data": map[string]string{"code": code}}})
}

// sessionIdle closes a legacy client's session after this long without a
// request (its client then initializes again).
const sessionIdle = 30 * time.Minute

func (p Protocol) Handler(env protocol.Env) http.Handler {
	h := &handler{env: env, maxSessions: p.MaxSessions, live: map[*mcp.Server]*liveServer{}}
	if h.maxSessions <= 0 {
		h.maxSessions = 100
	}
	// Clients of the 2026-07-28 protocol (the Go SDK's) are served
	// statelessly: each request builds the server from the tenant's agents
	// as they are then, any replica answers, and a call's cancellation
	// reaches it through its request's end. Answers are SSE streams: a
	// call's progress notifications travel on its stream.
	stateless := mcp.NewStreamableHTTPHandler(h.requestServer, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true, Logger: env.Log})
	// Clients that initialize (older protocols: the TypeScript SDK's) get a
	// session (Mcp-Session-Id): only in a session does their
	// notifications/cancelled reach the call it cancels (the call's stream
	// stays open), and only there can the server ask them something back.
	// A session lives in this replica's memory.
	sessions := mcp.NewStreamableHTTPHandler(h.sessionServer, &mcp.StreamableHTTPOptions{SessionTimeout: sessionIdle, Logger: env.Log})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := env.Tenant(r)
		if err != nil {
			status, code, msg := env.Classify(err)
			p.WriteError(w, status, code, msg)
			return
		}
		var body []byte
		if r.Method == http.MethodPost {
			// The SDK decodes invalid UTF-8 as U+FFFD; Forge refuses it, as
			// on every route, within the API's body limit.
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				p.WriteError(w, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("the request body is over %d bytes", maxBody))
				return
			}
			if !utf8.Valid(body) {
				p.WriteError(w, http.StatusBadRequest, "invalid_request", "the request body is not valid UTF-8")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
			// A session is its tenant's: another key does not find it.
			if !strings.HasPrefix(sid, sessionPrefix(tenant)) {
				p.WriteError(w, http.StatusNotFound, "not_found", "no such MCP session")
				return
			}
			sessions.ServeHTTP(w, r)
			return
		}
		if initializes(body) {
			if h.openSessions(tenant) >= h.maxSessions {
				p.WriteError(w, http.StatusTooManyRequests, "rate_limited",
					fmt.Sprintf("this tenant holds %d open MCP sessions, the most this server keeps: close one (DELETE with its Mcp-Session-Id) or let one idle out", h.maxSessions))
				return
			}
			sessions.ServeHTTP(w, r)
			return
		}
		var built *mcp.Server
		stateless.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverKey{}, &built)))
	})
}

// initializes reports whether body is (or a batch holding) an initialize
// request.
func initializes(body []byte) bool {
	var one struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &one) == nil {
		return one.Method == "initialize"
	}
	var batch []struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &batch) != nil {
		return false
	}
	for _, m := range batch {
		if m.Method == "initialize" {
			return true
		}
	}
	return false
}

// sessionPrefix starts the ids of a tenant's MCP sessions: a session id
// names its tenant (by hash), and a random rest makes it unguessable.
func sessionPrefix(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return "mcps_" + hex.EncodeToString(sum[:8]) + "_"
}

func newSessionID(tenant string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return sessionPrefix(tenant) + hex.EncodeToString(b[:])
}

type tenantKey struct{}

// serverKey holds a request's stateless server once built.
type serverKey struct{}

type handler struct {
	env         protocol.Env
	maxSessions int

	mu   sync.Mutex
	live map[*mcp.Server]*liveServer // the servers of sessions, to count them
}

// liveServer is the server of one session, made at its initialize.
type liveServer struct {
	tenant string
	made   time.Time
	seen   bool // its session was seen connected
}

// openSessions counts tenant's sessions, forgetting the servers whose
// session has closed (or never opened, after a minute).
func (h *handler) openSessions(tenant string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	now := h.env.Clock.Now()
	for s, l := range h.live {
		open := false
		for range s.Sessions() {
			open = true
		}
		switch {
		case open:
			l.seen = true
		case l.seen || now.Sub(l.made) > time.Minute:
			delete(h.live, s)
			continue
		}
		if l.tenant == tenant {
			n++
		}
	}
	return n
}

// toolName is a valid MCP tool name: letters, digits, _ - . up to 128.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Ask is a tool's input.
type Ask struct {
	Message   string `json:"message" jsonschema:"what to ask the agent"`
	SessionID string `json:"session_id,omitempty" jsonschema:"a session of this agent to continue (from an earlier answer); omitted: a new session"`
}

// Answer is a tool's structured result.
type Answer struct {
	SessionID string `json:"session_id"`
	TurnID    string `json:"turn_id"`
	Status    string `json:"status"`
	Output    string `json:"output"`
	// Pending names what the turn waits for (approvals, client tools),
	// resolved through Forge's API on the session.
	Pending []forge.RequiredAction `json:"pending,omitempty"`
}

// answerSchema is Answer's schema, with a pending action's arguments any
// JSON (inferred from json.RawMessage it would be a byte array, and the
// SDK would refuse its own answer).
var answerSchema = func() *jsonschema.Schema {
	s, err := jsonschema.For[Answer](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
	}})
	if err != nil {
		panic(err)
	}
	return s
}()

// agentTool is one agent as a tool.
type agentTool struct {
	name, agent, desc string
}

// agentTools lists the tenant's agents as tools, at most maxTools.
func (h *handler) agentTools(ctx context.Context, tenant string) []agentTool {
	var out []agentTool
	opts := forge.ListOptions{Limit: 100}
	for len(out) < maxTools {
		agents, next, err := h.env.Store.ListAgents(ctx, tenant, opts)
		if err != nil {
			h.env.Log.Warn("mcp: listing agents failed", "tenant", tenant, "err", err)
			break
		}
		for _, a := range agents {
			name := "ask_" + a.Name
			if !toolName.MatchString(name) || len(out) >= maxTools {
				continue
			}
			out = append(out, agentTool{name: name, agent: a.Name,
				desc: "Ask the Forge agent " + a.Name + " (" + a.Model + "); the answer is its final text."})
		}
		if next == "" {
			break
		}
		opts.Cursor = next
	}
	return out
}

func (h *handler) addTool(s *mcp.Server, tenant string, t agentTool) {
	agent := t.agent
	mcp.AddTool(s, &mcp.Tool{Name: t.name, Description: t.desc, OutputSchema: answerSchema}, func(ctx context.Context, req *mcp.CallToolRequest, in Ask) (*mcp.CallToolResult, Answer, error) {
		return h.ask(ctx, req, tenant, agent, in)
	})
}

// requestServer is the MCP server of one stateless request: the tools of
// its tenant's agents as they are now.
func (h *handler) requestServer(r *http.Request) *mcp.Server {
	// The SDK asks twice per request: build it (and list the agents) once.
	slot, _ := r.Context().Value(serverKey{}).(**mcp.Server)
	if slot != nil && *slot != nil {
		return *slot
	}
	tenant, _ := r.Context().Value(tenantKey{}).(string)
	s := mcp.NewServer(&mcp.Implementation{Name: "forge", Version: "1"}, nil)
	for _, t := range h.agentTools(r.Context(), tenant) {
		h.addTool(s, tenant, t)
	}
	if slot != nil {
		*slot = s
	}
	return s
}

// sessionServer is the MCP server of one session (its initialize
// request). Its tools follow the agents: each tools/list and tools/call
// first brings them up to date. It announces no list changes (it learns
// of them only when asked).
func (h *handler) sessionServer(r *http.Request) *mcp.Server {
	tenant, _ := r.Context().Value(tenantKey{}).(string)
	if r.Header.Get("Mcp-Session-Id") != "" {
		// The SDK asks for a server on every request, but uses it only to
		// start a session; the session's own serves the rest.
		return mcp.NewServer(&mcp.Implementation{Name: "forge", Version: "1"}, nil)
	}
	var s *mcp.Server
	s = mcp.NewServer(&mcp.Implementation{Name: "forge", Version: "1"}, &mcp.ServerOptions{
		// Called once, when the session starts: from then on it counts.
		GetSessionID: func() string {
			h.mu.Lock()
			h.live[s] = &liveServer{tenant: tenant, made: h.env.Clock.Now()}
			h.mu.Unlock()
			return newSessionID(tenant)
		},
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}},
	})
	var mu sync.Mutex
	have := map[string]bool{}
	refresh := func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		want := map[string]bool{}
		for _, t := range h.agentTools(ctx, tenant) {
			want[t.name] = true
			if !have[t.name] {
				h.addTool(s, tenant, t)
				have[t.name] = true
			}
		}
		for name := range have {
			if !want[name] {
				s.RemoveTools(name)
				delete(have, name)
			}
		}
	}
	refresh(r.Context())
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" || method == "tools/call" {
				refresh(ctx)
			}
			return next(ctx, method, req)
		}
	})
	return s
}

// ask runs one turn of agent and answers its final text. A cancelled MCP
// request cancels the turn. A request with a progress token gets the
// answer's text as it streams, in progress notifications. A turn that
// pauses for approvals asks the client, when it can be asked (elicit.go).
func (h *handler) ask(ctx context.Context, req *mcp.CallToolRequest, tenant, agent string, in Ask) (*mcp.CallToolResult, Answer, error) {
	if req != nil && req.Params != nil && req.Params.RequestState != "" {
		// A 2026-07-28 client retrying with its answers to our elicitation.
		return h.resume(ctx, req, tenant, agent, req.Params.RequestState, req.Params.InputResponses)
	}
	if strings.TrimSpace(in.Message) == "" {
		return nil, Answer{}, errors.New("message is required")
	}
	ses, err := h.session(ctx, tenant, agent, in.SessionID)
	if err != nil {
		return nil, Answer{}, err
	}
	final, err := h.run(ctx, req, tenant, ses, []forge.Input{{Type: forge.InputMessage, Text: in.Message}})
	if err != nil {
		return nil, Answer{}, err
	}
	return h.settle(ctx, req, tenant, agent, ses, final)
}

// run runs one turn of the session with input to its end (streaming its
// text as progress when the request has a progress token); a cancelled
// request cancels it.
func (h *handler) run(ctx context.Context, req *mcp.CallToolRequest, tenant string, ses *forge.Session, input []forge.Input) (*forge.Turn, error) {
	treq := engine.TurnRequest{Input: input}
	var turn *forge.Turn
	var err error
	if token := progressToken(req); token != nil {
		turn, err = h.streamProgress(ctx, req, token, tenant, ses, treq)
	} else {
		turn, err = h.env.Runtime.StartTurn(ctx, tenant, ses.ID, treq)
	}
	if err != nil {
		return nil, h.public(err)
	}
	final, err := h.env.Runtime.WaitTurn(ctx, tenant, ses.ID, turn.ID)
	if err != nil {
		if ctx.Err() != nil {
			_, _ = h.env.Runtime.Cancel(context.WithoutCancel(ctx), tenant, ses.ID, "the MCP request was cancelled")
		}
		return nil, h.public(err)
	}
	return final, nil
}

// answer is the tool's result for a turn that has ended.
func answer(ses *forge.Session, final *forge.Turn) (*mcp.CallToolResult, Answer, error) {
	out := Answer{SessionID: ses.ID, TurnID: final.ID, Status: final.Status}
	if final.Output != nil {
		out.Output = final.Output.Text
	}
	res := &mcp.CallToolResult{}
	text := out.Output
	switch {
	case final.Status == forge.TurnDone && len(final.RequiredActions) > 0:
		out.Pending = final.RequiredActions
		a := final.RequiredActions[0]
		text = fmt.Sprintf("%s\n\n[The turn waits for %d action(s), first: %s of %s (call %s). Resolve them with POST /v1/sessions/%s/turns.]",
			out.Output, len(final.RequiredActions), a.Type, a.Tool, a.CallID, ses.ID)
	case final.Status == forge.TurnErrored:
		res.IsError = true
		text = "the turn failed"
		if final.Error != nil {
			text = final.Error.Code + ": " + final.Error.Message
		}
	case final.Status == forge.TurnCancelled:
		res.IsError = true
		text = "the turn was cancelled"
	}
	res.Content = []mcp.Content{&mcp.TextContent{Text: strings.TrimSpace(text)}}
	return res, out, nil
}

func progressToken(req *mcp.CallToolRequest) any {
	if req == nil || req.Params == nil || req.Session == nil {
		return nil
	}
	return req.Params.GetProgressToken()
}

// streamProgress runs the turn streaming and sends each piece of the
// answer's text (the main thread's deltas) as a progress notification,
// progress counting the pieces; it returns once the turn has ended.
func (h *handler) streamProgress(ctx context.Context, req *mcp.CallToolRequest, token any, tenant string, ses *forge.Session, treq engine.TurnRequest) (*forge.Turn, error) {
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, ses.ID, treq)
	if err != nil {
		return nil, err
	}
	n := 0
	for ev, err := range events {
		if err != nil {
			return turn, nil // WaitTurn tells how the turn ended
		}
		if ev.Type == forge.EventTurnDone {
			break
		}
		if ev.Type != forge.EventModelDelta || ev.ThreadID == nil || *ev.ThreadID != ses.MainThreadID {
			continue
		}
		var d forge.DeltaData
		if json.Unmarshal(ev.Data, &d) != nil || d.Delta == "" {
			continue
		}
		n++
		// A client that stopped listening does not stop the turn.
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: d.Delta})
	}
	return turn, nil
}

// session is the session to continue (one of this agent's, of this
// tenant) or a new one.
func (h *handler) session(ctx context.Context, tenant, agent, sid string) (*forge.Session, error) {
	if sid != "" {
		ses, err := h.env.Store.GetSession(ctx, tenant, sid)
		if err != nil {
			return nil, h.public(err)
		}
		if ses.Kind != forge.KindDirect || ses.Agent != agent {
			return nil, fmt.Errorf("session %s is not a direct session of agent %s", sid, agent)
		}
		return ses, nil
	}
	if _, err := h.env.Store.GetAgent(ctx, tenant, agent); err != nil {
		return nil, h.public(err)
	}
	now := h.env.Clock.Now()
	ses := &forge.Session{ID: h.env.IDs.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: agent,
		Title: "mcp", MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: json.RawMessage(`{"source":"mcp"}`),
		CreatedAt: now, UpdatedAt: now}
	if err := h.env.Store.CreateSession(ctx, ses); err != nil {
		return nil, h.public(err)
	}
	return ses, nil
}

// public is err as the client may see it: a 5xx's text is not shown.
func (h *handler) public(err error) error {
	status, code, msg := h.env.Classify(err)
	if status >= 500 {
		h.env.Log.Error("mcp tool call failed", "err", err)
	}
	return fmt.Errorf("%s: %s", code, msg)
}
