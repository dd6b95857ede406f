package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/forge-runtime/forge"
)

// agentBody is the request body of POST and PUT /v1/agents: the fields of
// forge.Agent a client may set, absent when zero so that the server applies
// its defaults (the API treats an explicit 0 as a value, not as absent).
func agentBody(a *forge.Agent) map[string]any {
	m := map[string]any{"name": a.Name, "model": a.Model}
	p := a.ModelParams
	if p.MaxTokens != nil || p.Temperature != nil || p.ReasoningEffort != "" || len(p.Script) > 0 {
		m["model_params"] = p
	}
	if a.Instructions != "" {
		m["instructions"] = a.Instructions
	}
	if a.Tools != nil {
		m["tools"] = a.Tools
	}
	if a.Approval != nil {
		m["approval"] = a.Approval
	}
	if a.MCPServers != nil {
		m["mcp_servers"] = a.MCPServers
	}
	if a.Subagents != nil {
		m["subagents"] = a.Subagents
	}
	if a.IterationLimit != 0 {
		m["iteration_limit"] = a.IterationLimit
	}
	if c := a.Compaction; c.Enabled != nil || c.ContextWindow != nil || c.Threshold != nil {
		m["compaction"] = c
	}
	if a.OutputSchema != nil {
		m["output_schema"] = a.OutputSchema
	}
	if a.OutputRetries != nil {
		m["output_retries"] = *a.OutputRetries
	}
	if a.IfBusy != "" {
		m["if_busy"] = a.IfBusy
	}
	if a.Retention != nil {
		m["retention"] = a.Retention
	}
	return m
}

// CreateAgent creates an agent (POST /v1/agents). Only the fields a client
// sets are sent: name, model, model_params, instructions, tools, approval,
// mcp_servers, subagents, iteration_limit, compaction, output_schema,
// output_retries, if_busy, retention; zero values are left out so the
// server's defaults apply.
func (c *Client) CreateAgent(ctx context.Context, a *forge.Agent) (*forge.Agent, error) {
	var out forge.Agent
	if _, err := c.do(ctx, http.MethodPost, "/v1/agents", nil, agentBody(a), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutAgent replaces the agent named a.Name, making a new version
// (PUT /v1/agents/{name}).
func (c *Client) PutAgent(ctx context.Context, a *forge.Agent) (*forge.Agent, error) {
	var out forge.Agent
	if _, err := c.do(ctx, http.MethodPut, "/v1/agents/"+seg(a.Name), nil, agentBody(a), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetAgent returns the current version of an agent.
func (c *Client) GetAgent(ctx context.Context, name string) (*forge.Agent, error) {
	var out forge.Agent
	if _, err := c.do(ctx, http.MethodGet, "/v1/agents/"+seg(name), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListAgents returns a page of agents.
func (c *Client) ListAgents(ctx context.Context, opts ListOptions) (*Page[forge.Agent], error) {
	return list[forge.Agent](ctx, c, "/v1/agents", opts.query(nil))
}

// DeleteAgent deletes an agent. Its existing sessions keep working.
func (c *Client) DeleteAgent(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/agents/"+seg(name), nil, nil, nil, nil)
	return err
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	Agent    string          `json:"agent"`
	Title    string          `json:"title,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// CreateSession opens a direct session with an agent.
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest) (*forge.Session, error) {
	var out forge.Session
	if _, err := c.do(ctx, http.MethodPost, "/v1/sessions", nil, req, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSession returns a session.
func (c *Client) GetSession(ctx context.Context, id string) (*forge.Session, error) {
	var out forge.Session
	if _, err := c.do(ctx, http.MethodGet, "/v1/sessions/"+seg(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSessionsOptions filter and page a list of sessions (newest update
// first unless Ascending).
type ListSessionsOptions struct {
	ListOptions
	Agent string
	Kind  string
	// Status is "running", "idle" or "" (both).
	Status string
	// Metadata keeps sessions whose metadata has each key with that value.
	Metadata     map[string]string
	UpdatedAfter time.Time
	Ascending    bool
}

func (o ListSessionsOptions) query() url.Values {
	q := o.ListOptions.query(nil)
	for k, v := range map[string]string{"agent": o.Agent, "kind": o.Kind, "status": o.Status} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for k, v := range o.Metadata {
		q.Set("metadata."+k, v)
	}
	if !o.UpdatedAfter.IsZero() {
		q.Set("updated_after", o.UpdatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if o.Ascending {
		q.Set("order", "asc")
	}
	return q
}

// ListSessions returns a page of sessions.
func (c *Client) ListSessions(ctx context.Context, opts ListSessionsOptions) (*Page[forge.Session], error) {
	return list[forge.Session](ctx, c, "/v1/sessions", opts.query())
}

// DeleteSession deletes a session, cancelling its running turn first.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/sessions/"+seg(id), nil, nil, nil, nil)
	return err
}

// Message views.
const (
	ViewFull  = "full"
	ViewModel = "model"
)

// ListMessagesOptions page through a session's messages. View is ViewFull
// (the default) or ViewModel (what the model would see next).
type ListMessagesOptions struct {
	View string
	ListOptions
}

// ListMessages returns the messages of the branch ending at the session
// tip, oldest first, with their parts.
func (c *Client) ListMessages(ctx context.Context, sessionID string, opts ListMessagesOptions) (*Page[forge.Message], error) {
	q := opts.query(nil)
	if opts.View != "" {
		q.Set("view", opts.View)
	}
	return list[forge.Message](ctx, c, "/v1/sessions/"+seg(sessionID)+"/messages", q)
}

func list[T any](ctx context.Context, c *Client, path string, q url.Values) (*Page[T], error) {
	var out pageJSON[T]
	if _, err := c.do(ctx, http.MethodGet, path, q, nil, nil, &out); err != nil {
		return nil, err
	}
	p := &Page[T]{Data: out.Data}
	if p.Data == nil {
		p.Data = []T{}
	}
	if out.NextCursor != nil {
		p.NextCursor = *out.NextCursor
	}
	return p, nil
}
