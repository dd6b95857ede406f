// Package mcpserver serves the tenant's agents as MCP tools at /mcp: a
// Streamable HTTP MCP server (the official Go SDK), one tool ask_<agent>
// per agent, authenticated by the caller's bearer key (API.md, "Agents as
// MCP tools and A2A agents").
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

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
type Protocol struct{}

func (Protocol) Prefix() string { return Prefix }

// WriteError answers an error before the MCP exchange starts (a refused
// key, a refused request): JSON-RPC's error object, without an id.
func (Protocol) WriteError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32000, "message": message, "data": map[string]string{"code": code}}})
}

func (p Protocol) Handler(env protocol.Env) http.Handler {
	h := &handler{env: env}
	// Answers are SSE streams (not single JSON bodies): a call's progress
	// notifications travel on its stream. Stateless, a client's cancel
	// reaches the call only through its request's end: propagating it is
	// what makes a cancelled call cancel its turn.
	sdk := mcp.NewStreamableHTTPHandler(h.server, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true, Logger: env.Log})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := env.Tenant(r)
		if err != nil {
			status, code, msg := env.Classify(err)
			p.WriteError(w, status, code, msg)
			return
		}
		if r.Method == http.MethodPost {
			// The SDK decodes invalid UTF-8 as U+FFFD; Forge refuses it, as
			// on every route, within the API's body limit.
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
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
		sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

type tenantKey struct{}

type handler struct {
	env protocol.Env
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

// server is the MCP server of one request: the tools of its tenant's
// agents as they are now (so the list follows agents as they change).
func (h *handler) server(r *http.Request) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "forge", Version: "1"}, nil)
	tenant, _ := r.Context().Value(tenantKey{}).(string)
	opts := forge.ListOptions{Limit: 100}
	n := 0
	for n < maxTools {
		agents, next, err := h.env.Store.ListAgents(r.Context(), tenant, opts)
		if err != nil {
			h.env.Log.Warn("mcp: listing agents failed", "tenant", tenant, "err", err)
			break
		}
		for _, a := range agents {
			name := "ask_" + a.Name
			if !toolName.MatchString(name) || n >= maxTools {
				continue
			}
			n++
			desc := "Ask the Forge agent " + a.Name + " (" + a.Model + "); the answer is its final text."
			agent := a.Name
			mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc}, func(ctx context.Context, req *mcp.CallToolRequest, in Ask) (*mcp.CallToolResult, Answer, error) {
				return h.ask(ctx, req, tenant, agent, in)
			})
		}
		if next == "" {
			break
		}
		opts.Cursor = next
	}
	return s
}

// ask runs one turn of agent and answers its final text. A cancelled MCP
// request cancels the turn. A request with a progress token gets the
// answer's text as it streams, in progress notifications.
func (h *handler) ask(ctx context.Context, req *mcp.CallToolRequest, tenant, agent string, in Ask) (*mcp.CallToolResult, Answer, error) {
	if strings.TrimSpace(in.Message) == "" {
		return nil, Answer{}, errors.New("message is required")
	}
	ses, err := h.session(ctx, tenant, agent, in.SessionID)
	if err != nil {
		return nil, Answer{}, err
	}
	treq := engine.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: in.Message}}}
	var turn *forge.Turn
	if token := progressToken(req); token != nil {
		turn, err = h.streamProgress(ctx, req, token, tenant, ses, treq)
	} else {
		turn, err = h.env.Runtime.StartTurn(ctx, tenant, ses.ID, treq)
	}
	if err != nil {
		return nil, Answer{}, h.public(err)
	}
	final, err := h.env.Runtime.WaitTurn(ctx, tenant, ses.ID, turn.ID)
	if err != nil {
		if ctx.Err() != nil {
			_, _ = h.env.Runtime.Cancel(context.WithoutCancel(ctx), tenant, ses.ID, "the MCP request was cancelled")
		}
		return nil, Answer{}, h.public(err)
	}
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
