package forge

import (
	"bytes"
	"encoding/json"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Agent is a reusable, versioned definition. Every PUT makes a new version;
// a turn records the version it ran with.
type Agent struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"-"`
	Name           string            `json:"name"`
	Version        int               `json:"version"`
	Model          string            `json:"model"`
	ModelParams    ModelParams       `json:"model_params"`
	Instructions   string            `json:"instructions"`
	Tools          []ToolSpec        `json:"tools"`
	Approval       map[string]string `json:"approval"`
	MCPServers     []MCPServer       `json:"mcp_servers"`
	Subagents      []string          `json:"subagents"`
	IterationLimit int               `json:"iteration_limit"`
	Compaction     Compaction        `json:"compaction"`
	// OutputSchema, when set, asks every turn's final answer to be JSON
	// matching it (a turn request may bring its own).
	OutputSchema *OutputSchema `json:"output_schema"`
	// OutputRetries is how many repair steps an answer that does not
	// match the output schema gets (nil in agents stored before it
	// existed: Retries gives the default).
	OutputRetries *int `json:"output_retries,omitempty"`
	// IfBusy is the agent's default if_busy for turns that do not say
	// (API.md, "Busy sessions"); "" means IfBusyReject.
	IfBusy string `json:"if_busy,omitempty"`
	// Locked refuses per-request settings (TurnOverrides): the agent's
	// definition is all its turns run with.
	Locked bool `json:"locked,omitempty"`
	// Retention, when set, deletes the agent's idle sessions
	// (API.md, "Retention and listing").
	Retention *Retention `json:"retention,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// Defaults and bounds of agent fields (API.md).
const (
	DefaultIterationLimit = 100
	MaxIterationLimit     = 1024
	DefaultThreshold      = 0.8
)

// ModelParams tune a model call. Pointers distinguish "absent" from an
// explicit zero.
type ModelParams struct {
	MaxTokens       *int64   `json:"max_tokens,omitempty"`
	Temperature     *float64 `json:"temperature,omitempty"`
	TopP            *float64 `json:"top_p,omitempty"`
	ReasoningEffort string   `json:"reasoning_effort,omitempty"`
	// Script drives the scripted provider (see provider/scripted); other
	// providers ignore it.
	Script json.RawMessage `json:"script,omitempty"`
}

// ToolSpec is an entry of an agent's tools list: either the name of a
// built-in tool, or a declared tool (client-side when Client is set).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Client      bool            `json:"client,omitempty"`
	// BuiltIn is true when the entry was given as a bare name.
	BuiltIn bool `json:"-"`
}

// UnmarshalJSON accepts "name" or {"name": ..., ...}.
func (t *ToolSpec) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var name string
		if err := json.Unmarshal(b, &name); err != nil {
			return err
		}
		*t = ToolSpec{Name: name, BuiltIn: true}
		return nil
	}
	type plain ToolSpec
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*t = ToolSpec(p)
	t.BuiltIn = false
	return nil
}

// MarshalJSON writes built-in tools back as bare names.
func (t ToolSpec) MarshalJSON() ([]byte, error) {
	if t.BuiltIn {
		return json.Marshal(t.Name)
	}
	type plain ToolSpec
	return json.Marshal(plain(t))
}

// MCPServer declares an MCP server: either Command (stdio) or URL (HTTP).
type MCPServer struct {
	Name    string            `json:"name"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Compaction settings. Pointers distinguish absent from explicit values.
type Compaction struct {
	Enabled       *bool    `json:"enabled,omitempty"`
	ContextWindow *int64   `json:"context_window,omitempty"`
	Threshold     *float64 `json:"threshold,omitempty"`
	// PruneToolOutputs, when set, is a token budget for tool outputs in
	// the model view: newest first, outputs past it are replaced by a
	// marker (storage keeps them whole).
	PruneToolOutputs *int64 `json:"prune_tool_outputs,omitempty"`
}

var agentNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var (
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Normalize fills defaults and validates a. builtin reports whether a tool
// name is a known built-in. The error wraps ErrInvalid.
func (a *Agent) Normalize(builtin func(name string) bool) error {
	if a.Name == "" {
		return Errorf(ErrInvalid, "name is required")
	}
	if !agentNameRE.MatchString(a.Name) {
		return Errorf(ErrInvalid, "name %q must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit", a.Name)
	}
	if a.Model == "" {
		return Errorf(ErrInvalid, "model is required")
	}
	if _, _, err := SplitModel(a.Model); err != nil {
		return err
	}
	if a.IterationLimit == 0 {
		a.IterationLimit = DefaultIterationLimit
	} else if a.IterationLimit < 1 || a.IterationLimit > MaxIterationLimit {
		return Errorf(ErrInvalid, "iteration_limit must be between 1 and %d, got %d", MaxIterationLimit, a.IterationLimit)
	}
	p := a.ModelParams
	if p.MaxTokens != nil && *p.MaxTokens < 1 {
		return Errorf(ErrInvalid, "model_params.max_tokens must be at least 1")
	}
	if p.Temperature != nil && (*p.Temperature < 0 || *p.Temperature > 2) {
		return Errorf(ErrInvalid, "model_params.temperature must be between 0 and 2")
	}
	if p.TopP != nil && !(*p.TopP >= 0 && *p.TopP <= 1) {
		return Errorf(ErrInvalid, "model_params.top_p must be between 0 and 1")
	}
	switch p.ReasoningEffort {
	case "", "minimal", "low", "medium", "high":
	default:
		return Errorf(ErrInvalid, "model_params.reasoning_effort must be one of minimal, low, medium, high")
	}
	seen := map[string]bool{}
	for i, t := range a.Tools {
		if err := checkToolName("tools", i, t.Name, seen); err != nil {
			return err
		}
		if t.BuiltIn {
			if builtin != nil && !builtin(t.Name) {
				return Errorf(ErrInvalid, "tools[%d]: %q is not a built-in tool (declare it as an object with \"client\": true for a client-side tool)", i, t.Name)
			}
			continue
		}
		if !t.Client {
			if builtin == nil || !builtin(t.Name) {
				return Errorf(ErrInvalid, "tools[%d]: %q is neither a built-in tool nor declared with \"client\": true", i, t.Name)
			}
		}
		if len(t.InputSchema) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
				return Errorf(ErrInvalid, "tools[%d]: input_schema must be a JSON object", i)
			}
		}
	}
	for key, policy := range a.Approval {
		if key == "" {
			return Errorf(ErrInvalid, "approval: empty key")
		}
		if _, err := path.Match(strings.ReplaceAll(key, ".", "_"), "x"); err != nil {
			return Errorf(ErrInvalid, "approval: bad pattern %q", key)
		}
		switch policy {
		case PolicyAllow, PolicyAsk, PolicyDeny:
		default:
			return Errorf(ErrInvalid, "approval[%q] must be allow, ask or deny, got %q", key, policy)
		}
	}
	names := map[string]bool{}
	for i, s := range a.MCPServers {
		if !toolNameRE.MatchString(s.Name) {
			return Errorf(ErrInvalid, "mcp_servers[%d]: name %q must be 1-64 of [A-Za-z0-9_-]", i, s.Name)
		}
		if names[s.Name] {
			return Errorf(ErrInvalid, "mcp_servers[%d]: duplicate name %q", i, s.Name)
		}
		names[s.Name] = true
		if (len(s.Command) > 0) == (s.URL != "") {
			return Errorf(ErrInvalid, "mcp_servers[%d] (%s): give exactly one of command or url", i, s.Name)
		}
		if s.URL == "" && len(s.Headers) > 0 {
			return Errorf(ErrInvalid, "mcp_servers[%d] (%s): headers need url", i, s.Name)
		}
		if s.URL != "" && len(s.Env) > 0 {
			return Errorf(ErrInvalid, "mcp_servers[%d] (%s): env needs command", i, s.Name)
		}
		for k, v := range s.Env {
			if !envNameRE.MatchString(k) || strings.ContainsRune(v, 0) {
				return Errorf(ErrInvalid, "mcp_servers[%d] (%s): env %q must be a variable name (letters, digits and '_', not starting with a digit) with a value without NUL bytes", i, s.Name, k)
			}
		}
		for k, v := range s.Headers {
			if !headerNameRE.MatchString(k) || strings.ContainsAny(v, "\r\n\x00") {
				return Errorf(ErrInvalid, "mcp_servers[%d] (%s): header %q must be a valid header name with a value on one line", i, s.Name, k)
			}
		}
	}
	for i, s := range a.Subagents {
		if !agentNameRE.MatchString(s) {
			return Errorf(ErrInvalid, "subagents[%d]: %q is not an agent name", i, s)
		}
	}
	c := a.Compaction
	if c.ContextWindow != nil && *c.ContextWindow < 1 {
		return Errorf(ErrInvalid, "compaction.context_window must be at least 1")
	}
	if c.PruneToolOutputs != nil && *c.PruneToolOutputs < 1 {
		return Errorf(ErrInvalid, "compaction.prune_tool_outputs must be at least 1 (tokens)")
	}
	if c.Threshold != nil && (*c.Threshold <= 0 || *c.Threshold > 1) {
		return Errorf(ErrInvalid, "compaction.threshold must be in (0, 1]")
	}
	if a.OutputSchema != nil {
		if err := a.OutputSchema.Check("output_schema"); err != nil {
			return err
		}
	}
	if err := CheckIfBusy(a.IfBusy, "if_busy"); err != nil {
		return err
	}
	if a.Retention != nil {
		if err := CheckSessionTTL(time.Duration(a.Retention.SessionTTL), "retention.session_ttl"); err != nil {
			return err
		}
	}
	if r := a.OutputRetries; r != nil && (*r < 0 || *r > MaxOutputRetries) {
		return Errorf(ErrInvalid, "output_retries must be between 0 and %d, got %d", MaxOutputRetries, *r)
	}
	if a.OutputRetries == nil {
		r := DefaultOutputRetries
		a.OutputRetries = &r
	}
	if c.Enabled == nil {
		t := true
		a.Compaction.Enabled = &t
	}
	if c.Threshold == nil {
		th := DefaultThreshold
		a.Compaction.Threshold = &th
	}
	if a.Approval == nil {
		a.Approval = map[string]string{}
	}
	if a.Tools == nil {
		a.Tools = []ToolSpec{}
	}
	if a.MCPServers == nil {
		a.MCPServers = []MCPServer{}
	}
	if a.Subagents == nil {
		a.Subagents = []string{}
	}
	return nil
}

// checkToolName checks the name of tool i of the list field: its form,
// and that no tool before it in seen has it (then it adds it).
func checkToolName(field string, i int, name string, seen map[string]bool) error {
	if !toolNameRE.MatchString(name) {
		return Errorf(ErrInvalid, "%s[%d]: name %q must be 1-64 of [A-Za-z0-9_-]", field, i, name)
	}
	if seen[name] {
		return Errorf(ErrInvalid, "%s[%d]: duplicate tool %q", field, i, name)
	}
	seen[name] = true
	return nil
}

// Retries returns the agent's output_retries, its default when unset.
func (a *Agent) Retries() int {
	if a.OutputRetries == nil {
		return DefaultOutputRetries
	}
	return *a.OutputRetries
}

// SplitModel splits "provider/model" and rejects anything else.
func SplitModel(s string) (provider, model string, err error) {
	provider, model, ok := strings.Cut(s, "/")
	if !ok || provider == "" || model == "" {
		return "", "", Errorf(ErrInvalid, "model %q must be written provider/model, e.g. openai/gpt-4.1-mini", s)
	}
	return provider, model, nil
}

// Approval policies.
const (
	PolicyAllow = "allow"
	PolicyAsk   = "ask"
	PolicyDeny  = "deny"
)

// Policy returns the approval policy for tool: an exact key wins, then the
// longest matching glob, then "*", then allow.
func (a *Agent) Policy(tool string) string {
	if p, ok := a.Approval[tool]; ok {
		return p
	}
	best, bestLen := "", -1
	for key, p := range a.Approval {
		if key == "*" || !strings.ContainsAny(key, "*?[") {
			continue
		}
		pattern := strings.ReplaceAll(key, ".", "_")
		if ok, _ := path.Match(pattern, tool); ok && len(key) > bestLen {
			best, bestLen = p, len(key)
		}
	}
	if bestLen >= 0 {
		return best
	}
	if p, ok := a.Approval["*"]; ok {
		return p
	}
	return PolicyAllow
}

// Tool returns the spec of a declared tool by name.
func (a *Agent) Tool(name string) (ToolSpec, bool) {
	for _, t := range a.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return ToolSpec{}, false
}

// Redacted returns a copy safe to show clients: secret values in MCP env and
// headers are replaced.
func (a *Agent) Redacted() *Agent {
	c := *a
	c.MCPServers = make([]MCPServer, len(a.MCPServers))
	for i, s := range a.MCPServers {
		s.Env = redactMap(s.Env)
		s.Headers = redactMap(s.Headers)
		c.MCPServers[i] = s
	}
	return &c
}

func redactMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = "[redacted]"
	}
	return out
}

// Clone returns a deep copy of a: nothing reachable from it is shared
// with a (the stores keep decoded agents and hand out clones).
func (a *Agent) Clone() *Agent {
	c := *a
	c.ModelParams.MaxTokens = clonePtr(a.ModelParams.MaxTokens)
	c.ModelParams.Temperature = clonePtr(a.ModelParams.Temperature)
	c.ModelParams.TopP = clonePtr(a.ModelParams.TopP)
	c.ModelParams.Script = bytes.Clone(a.ModelParams.Script)
	if a.Tools != nil {
		c.Tools = make([]ToolSpec, len(a.Tools))
		for i, t := range a.Tools {
			t.InputSchema = bytes.Clone(t.InputSchema)
			c.Tools[i] = t
		}
	}
	c.Approval = maps.Clone(a.Approval)
	if a.MCPServers != nil {
		c.MCPServers = make([]MCPServer, len(a.MCPServers))
		for i, s := range a.MCPServers {
			s.Command = slices.Clone(s.Command)
			s.Env = maps.Clone(s.Env)
			s.Headers = maps.Clone(s.Headers)
			c.MCPServers[i] = s
		}
	}
	c.Subagents = slices.Clone(a.Subagents)
	c.OutputSchema = a.OutputSchema.Clone()
	c.OutputRetries = clonePtr(a.OutputRetries)
	c.Retention = clonePtr(a.Retention)
	c.Compaction.Enabled = clonePtr(a.Compaction.Enabled)
	c.Compaction.ContextWindow = clonePtr(a.Compaction.ContextWindow)
	c.Compaction.Threshold = clonePtr(a.Compaction.Threshold)
	c.Compaction.PruneToolOutputs = clonePtr(a.Compaction.PruneToolOutputs)
	return &c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// What a turn asked for while another runs does (API.md, "Busy sessions").
const (
	IfBusyReject    = "reject"
	IfBusyEnqueue   = "enqueue"
	IfBusyInterrupt = "interrupt"
	IfBusySteer     = "steer"
)

// CheckIfBusy validates an if_busy value ("" is absent); field names it in
// the error.
func CheckIfBusy(v, field string) error {
	switch v {
	case "", IfBusyReject, IfBusyEnqueue, IfBusyInterrupt, IfBusySteer:
		return nil
	}
	return Errorf(ErrInvalid, "%s must be reject, enqueue, interrupt or steer, got %q", field, v)
}
