package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/forge-runtime/forge"
)

// agentBody is the body of POST /v1/agents and PUT /v1/agents/{name}.
// Pointers tell an absent field from an explicit zero.
type agentBody struct {
	Name           *string             `json:"name"`
	Model          *string             `json:"model"`
	ModelParams    *modelParamsBody    `json:"model_params"`
	Instructions   *string             `json:"instructions"`
	Tools          []forge.ToolSpec    `json:"tools"`
	Approval       map[string]string   `json:"approval"`
	MCPServers     []forge.MCPServer   `json:"mcp_servers"`
	Subagents      []string            `json:"subagents"`
	IterationLimit *int                `json:"iteration_limit"`
	Compaction     *forge.Compaction   `json:"compaction"`
	OutputSchema   *forge.OutputSchema `json:"output_schema"`
	OutputRetries  *int                `json:"output_retries"`
	IfBusy         *string             `json:"if_busy"`
	Retention      *forge.Retention    `json:"retention"`
	// Locked refuses per-request settings (a turn's overrides).
	Locked *bool `json:"locked"`

	// Read-only fields of the agent object, accepted so that a GET answer
	// can be edited and PUT back. On PUT, id must be the agent's and a
	// version other than the current one is a conflict (a concurrent edit).
	ID        *string         `json:"id"`
	Version   *int            `json:"version"`
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedAt json.RawMessage `json:"updated_at"`
}

type modelParamsBody struct {
	MaxTokens       *int64          `json:"max_tokens"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	ReasoningEffort *string         `json:"reasoning_effort"`
	Script          json.RawMessage `json:"script"`
}

// redactedValue is what Agent.Redacted shows instead of a secret.
var redactedValue = (&forge.Agent{MCPServers: []forge.MCPServer{{Env: map[string]string{"k": "v"}}}}).
	Redacted().MCPServers[0].Env["k"]

// agent builds the agent the body describes, before Normalize.
func (b *agentBody) agent(tenant string) (*forge.Agent, error) {
	a := &forge.Agent{
		Tenant:     tenant,
		Tools:      b.Tools,
		Approval:   b.Approval,
		MCPServers: b.MCPServers,
		Subagents:  b.Subagents,
	}
	if b.Name != nil {
		a.Name = *b.Name
	}
	if b.Model != nil {
		a.Model = *b.Model
	}
	if b.Instructions != nil {
		a.Instructions = *b.Instructions
	}
	if p := b.ModelParams; p != nil {
		a.ModelParams = forge.ModelParams{MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP}
		if p.ReasoningEffort != nil {
			if *p.ReasoningEffort == "" {
				return nil, invalid("model_params.reasoning_effort must be one of minimal, low, medium, high (omit it for the model's default)")
			}
			a.ModelParams.ReasoningEffort = *p.ReasoningEffort
		}
		if len(p.Script) > 0 && string(p.Script) != "null" {
			a.ModelParams.Script = p.Script
		}
	}
	if b.IterationLimit != nil {
		if *b.IterationLimit < 1 || *b.IterationLimit > forge.MaxIterationLimit {
			return nil, invalid("iteration_limit must be between 1 and %d, got %d (omit it for the default, %d)",
				forge.MaxIterationLimit, *b.IterationLimit, forge.DefaultIterationLimit)
		}
		a.IterationLimit = *b.IterationLimit
	}
	if b.Compaction != nil {
		a.Compaction = *b.Compaction
	}
	a.OutputSchema, a.OutputRetries, a.Retention = b.OutputSchema, b.OutputRetries, b.Retention
	a.Locked = b.Locked != nil && *b.Locked
	if b.IfBusy != nil {
		if *b.IfBusy == "" {
			return nil, invalid("if_busy must be reject, enqueue, interrupt or steer (omit it for reject)")
		}
		a.IfBusy = *b.IfBusy
	}
	for i, s := range a.MCPServers {
		if len(s.Command) > 0 && s.Command[0] == "" {
			return nil, invalid("mcp_servers[%d].command[0] must name a program", i)
		}
		if s.URL != "" {
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, invalid("mcp_servers[%d].url must be an absolute http or https URL", i)
			}
		}
	}
	return a, nil
}

func (s *Server) createAgent(w http.ResponseWriter, r *http.Request) error {
	var body agentBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.ID != nil || body.Version != nil || body.CreatedAt != nil || body.UpdatedAt != nil {
		return invalid("id, version, created_at and updated_at are assigned by the server; omit them")
	}
	a, err := body.agent(tenantOf(r))
	if err != nil {
		return err
	}
	if err := s.checkAgent(r, a); err != nil {
		return err
	}
	if err := s.checkMCPServers(r, a); err != nil {
		return err
	}
	if err := restoreSecrets(a, nil); err != nil {
		return err
	}
	if err := s.store.CreateAgent(r.Context(), a); err != nil {
		if errors.Is(err, forge.ErrConflict) {
			return forge.Errorf(forge.ErrConflict, "agent %q already exists; PUT /v1/agents/%s makes a new version", a.Name, a.Name)
		}
		return err
	}
	w.Header().Set("Location", "/v1/agents/"+url.PathEscape(a.Name))
	writeJSON(w, http.StatusCreated, a.Redacted())
	return nil
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) error {
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	agents, next, err := s.store.ListAgents(r.Context(), tenantOf(r), opts)
	if err != nil {
		return err
	}
	out := make([]*forge.Agent, len(agents))
	for i, a := range agents {
		out[i] = a.Redacted()
	}
	writeList(w, out, next)
	return nil
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	a, err := s.store.GetAgent(r.Context(), tenantOf(r), name)
	if err != nil {
		return notFound(err, "agent", name)
	}
	writeJSON(w, http.StatusOK, a.Redacted())
	return nil
}

// putAgent stores a new version of an existing agent. The body replaces
// the definition: absent fields take their defaults.
func (s *Server) putAgent(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	tenant := tenantOf(r)
	var body agentBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.Name != nil && *body.Name != name {
		return invalid("name %q in the body differs from %q in the path: agents cannot be renamed", *body.Name, name)
	}
	body.Name = &name
	a, err := body.agent(tenant)
	if err != nil {
		return err
	}
	if err := s.checkAgent(r, a); err != nil {
		return err
	}
	if err := s.checkMCPServers(r, a); err != nil {
		return err
	}
	cur, err := s.store.GetAgent(r.Context(), tenant, name)
	if err != nil {
		return notFound(err, "agent", name)
	}
	if body.ID != nil && *body.ID != cur.ID {
		return invalid("id %q is not the id of agent %q", *body.ID, name)
	}
	if body.Version != nil && *body.Version != cur.Version {
		return forge.Errorf(forge.ErrConflict, "agent %q is at version %d, not %d: it changed since you read it", name, cur.Version, *body.Version)
	}
	if err := restoreSecrets(a, cur); err != nil {
		return err
	}
	if err := s.store.UpdateAgent(r.Context(), a); err != nil {
		return notFound(err, "agent", name)
	}
	writeJSON(w, http.StatusOK, a.Redacted())
	return nil
}

func (s *Server) deleteAgent(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := s.store.DeleteAgent(r.Context(), tenantOf(r), name); err != nil {
		return notFound(err, "agent", name)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// restoreSecrets replaces redaction placeholders in a's MCP env and headers
// with the values cur (the current version, nil on create) holds, so an
// agent read with GET can be edited and PUT back without losing secrets.
func restoreSecrets(a, cur *forge.Agent) error {
	old := map[string]forge.MCPServer{}
	if cur != nil {
		for _, s := range cur.MCPServers {
			old[s.Name] = s
		}
	}
	for i, srv := range a.MCPServers {
		prev := old[srv.Name]
		for _, f := range []struct {
			field     string
			now, prev map[string]string
		}{{"env", srv.Env, prev.Env}, {"headers", srv.Headers, prev.Headers}} {
			for k, v := range f.now {
				if v != redactedValue {
					continue
				}
				pv, ok := f.prev[k]
				if !ok {
					return invalid("mcp_servers[%d].%s[%q] is the redaction placeholder %q and no stored value exists to keep: send the real value",
						i, f.field, k, redactedValue)
				}
				f.now[k] = pv
			}
		}
	}
	return nil
}

// checkMCPServers refuses MCP servers this server would not run: the
// author learns it now rather than from a tool error in some later turn.
func (s *Server) checkMCPServers(r *http.Request, a *forge.Agent) error {
	if s.mcp == nil {
		return nil
	}
	for i, srv := range a.MCPServers {
		if err := s.mcp.CheckServer(r.Context(), srv); err != nil {
			if errors.Is(err, forge.ErrInvalid) {
				return invalid("mcp_servers[%d] (%s): %v", i, srv.Name, err)
			}
			return err
		}
	}
	return nil
}

// checkAgent normalizes a and checks what it refers to: a model the
// server can run with those parameters (the catalog's CheckModel: its
// provider configured, a scripted script valid), and live subagents.
// Without a catalog the model is not checked.
func (s *Server) checkAgent(r *http.Request, a *forge.Agent) error {
	if err := a.Normalize(s.rt.IsBuiltin); err != nil {
		return err
	}
	if a.OutputSchema != nil {
		if err := s.rt.CheckOutputSchema(a.OutputSchema, "output_schema"); err != nil {
			return err
		}
	}
	if s.models != nil {
		if err := s.models.CheckModel(a.Model, a.ModelParams); err != nil {
			return err
		}
	}
	return s.checkSubagents(r, a)
}

// checkSubagents refuses subagents that name no live agent of the tenant,
// or the agent itself.
func (s *Server) checkSubagents(r *http.Request, a *forge.Agent) error {
	for i, name := range a.Subagents {
		if name == a.Name {
			return invalid("subagents[%d]: an agent cannot delegate to itself", i)
		}
		if _, err := s.store.GetAgent(r.Context(), a.Tenant, name); err != nil {
			if errors.Is(err, forge.ErrNotFound) {
				return invalid("subagents[%d]: there is no agent named %q", i, name)
			}
			return err
		}
	}
	return nil
}
