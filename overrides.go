package forge

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// TurnOverrides are the per-request settings of one turn (API.md,
// "Stateless clients and Chat Completions"): they change what this turn's
// main thread sends to the model, never the agent. A turn records them
// as it ran with them (Turn.Overrides).
type TurnOverrides struct {
	// Instructions are added after the agent's own instructions in the
	// system prompt of this turn (docs/decisions.md, "Per-request
	// settings").
	Instructions    string   `json:"instructions,omitempty"`
	Temperature     *float64 `json:"temperature,omitempty"`
	TopP            *float64 `json:"top_p,omitempty"`
	MaxOutputTokens *int     `json:"max_output_tokens,omitempty"`
	// Tools are client tools of this turn: the caller runs them and
	// sends their outputs back, as for an agent's client tools.
	Tools []TurnTool `json:"tools,omitempty"`
	// OutputSchema is the turn's structured output, when the request
	// gave one (the native API's output_schema, a facade's
	// response_format or text.format).
	OutputSchema *OutputSchema `json:"output_schema,omitempty"`
}

// TurnTool is a function tool a request declares: a client tool of its
// turn.
type TurnTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Bounds of per-request settings: they come from clients, and are sent
// to the model on every step of the turn.
const (
	MaxOverrideInstructions = 256 << 10
	MaxOverrideTools        = 128
	MaxOverrideOutputTokens = 1 << 20
	MaxToolDescription      = 16 << 10
)

// Empty reports whether o sets nothing.
func (o *TurnOverrides) Empty() bool {
	return o == nil || (o.Instructions == "" && o.Temperature == nil && o.TopP == nil &&
		o.MaxOutputTokens == nil && len(o.Tools) == 0 && o.OutputSchema == nil)
}

// Check validates o for a turn of agent a: a locked agent takes none, and
// each setting must be within its bounds; a tool may not take the name of
// one of the agent's. Whether the output schema is a valid JSON Schema is
// the SchemaCompiler's to say. The error wraps ErrInvalid.
func (o *TurnOverrides) Check(a *Agent) error {
	if o.Empty() {
		return nil
	}
	if a.Locked {
		return Errorf(ErrInvalid, "agent %s is locked: it takes no per-request settings (%s); change the agent (PUT /v1/agents/%s) instead", a.Name, strings.Join(o.names(), ", "), a.Name)
	}
	if len(o.Instructions) > MaxOverrideInstructions {
		return Errorf(ErrInvalid, "overrides.instructions is %d bytes; at most %d are allowed", len(o.Instructions), MaxOverrideInstructions)
	}
	if !utf8.ValidString(o.Instructions) {
		return Errorf(ErrInvalid, "overrides.instructions is not valid UTF-8")
	}
	if t := o.Temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return Errorf(ErrInvalid, "overrides.temperature must be between 0 and 2, got %v", *t)
	}
	if p := o.TopP; p != nil && !(*p >= 0 && *p <= 1) {
		return Errorf(ErrInvalid, "overrides.top_p must be between 0 and 1, got %v", *p)
	}
	if m := o.MaxOutputTokens; m != nil && (*m < 1 || *m > MaxOverrideOutputTokens) {
		return Errorf(ErrInvalid, "overrides.max_output_tokens must be between 1 and %d, got %d", MaxOverrideOutputTokens, *m)
	}
	if len(o.Tools) > MaxOverrideTools {
		return Errorf(ErrInvalid, "overrides.tools holds %d tools; at most %d are allowed", len(o.Tools), MaxOverrideTools)
	}
	seen := make(map[string]bool, len(o.Tools))
	for i, t := range o.Tools {
		if err := checkToolName("overrides.tools", i, t.Name, seen); err != nil {
			return err
		}
		if _, ok := a.Tool(t.Name); ok || slices.Contains(a.Subagents, t.Name) {
			return Errorf(ErrInvalid, "overrides.tools[%d]: %q is a tool of agent %s already; give a request's tool another name", i, t.Name, a.Name)
		}
		for _, m := range a.MCPServers {
			if strings.HasPrefix(t.Name, m.Name+"_") {
				return Errorf(ErrInvalid, "overrides.tools[%d]: %q is named like the tools of MCP server %q of agent %s (%s_*); give a request's tool another name", i, t.Name, m.Name, a.Name, m.Name)
			}
		}
		if len(t.Description) > MaxToolDescription || !utf8.ValidString(t.Description) {
			return Errorf(ErrInvalid, "overrides.tools[%d] (%s): description must be valid UTF-8 of at most %d bytes", i, t.Name, MaxToolDescription)
		}
		if len(t.InputSchema) == 0 {
			continue
		}
		if len(t.InputSchema) > MaxOutputSchemaBytes {
			return Errorf(ErrInvalid, "overrides.tools[%d] (%s): input_schema is %d bytes; at most %d are allowed", i, t.Name, len(t.InputSchema), MaxOutputSchemaBytes)
		}
		depth, err := jsonDepth(t.InputSchema)
		if err != nil || !isJSONObject(t.InputSchema) {
			return Errorf(ErrInvalid, "overrides.tools[%d] (%s): input_schema must be a JSON Schema object", i, t.Name)
		}
		if depth > MaxOutputSchemaDepth {
			return Errorf(ErrInvalid, "overrides.tools[%d] (%s): input_schema nests %d levels deep; at most %d are allowed", i, t.Name, depth, MaxOutputSchemaDepth)
		}
		if typ, ok := schemaType(t.InputSchema); ok && typ != "object" {
			return Errorf(ErrInvalid, "overrides.tools[%d] (%s): input_schema must describe an object (type \"object\"), got type %q", i, t.Name, typ)
		}
	}
	if o.OutputSchema != nil {
		if err := o.OutputSchema.Check("overrides.output_schema"); err != nil {
			return err
		}
	}
	return nil
}

// names lists the settings o sets, for messages.
func (o *TurnOverrides) names() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(o.Instructions != "", "instructions")
	add(o.Temperature != nil, "temperature")
	add(o.TopP != nil, "top_p")
	add(o.MaxOutputTokens != nil, "max_output_tokens")
	add(len(o.Tools) > 0, "tools")
	add(o.OutputSchema != nil, "output_schema")
	return out
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil
}

// schemaType returns a schema's "type" when it is one string.
func schemaType(b []byte) (string, bool) {
	var s struct {
		Type json.RawMessage `json:"type"`
	}
	if json.Unmarshal(b, &s) != nil || len(s.Type) == 0 {
		return "", false
	}
	var typ string
	if json.Unmarshal(s.Type, &typ) != nil {
		return "", false
	}
	return typ, true
}

// WithOverrides returns the agent a turn's main thread runs with under o:
// a copy of a whose instructions are followed by o's, whose model
// parameters o replaces where it sets them, and whose tools end with o's
// as client tools. a itself is not changed; nil o returns a.
func (a *Agent) WithOverrides(o *TurnOverrides) *Agent {
	if o.Empty() {
		return a
	}
	c := *a
	switch {
	case o.Instructions == "":
	case strings.TrimSpace(a.Instructions) == "":
		c.Instructions = o.Instructions
	default:
		c.Instructions = a.Instructions + "\n\n" + o.Instructions
	}
	if o.Temperature != nil {
		t := *o.Temperature
		c.ModelParams.Temperature = &t
	}
	if o.TopP != nil {
		p := *o.TopP
		c.ModelParams.TopP = &p
	}
	if o.MaxOutputTokens != nil {
		m := int64(*o.MaxOutputTokens)
		c.ModelParams.MaxTokens = &m
	}
	if len(o.Tools) > 0 {
		c.Tools = make([]ToolSpec, 0, len(a.Tools)+len(o.Tools))
		c.Tools = append(c.Tools, a.Tools...)
		for _, t := range o.Tools {
			c.Tools = append(c.Tools, ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Client: true})
		}
	}
	return &c
}
