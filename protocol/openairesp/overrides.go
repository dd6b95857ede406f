package openairesp

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/jsonarg"
)

// Per-request settings (API.md, "Stateless clients and Chat Completions"):
// instructions, temperature, top_p, max_output_tokens, text.format and
// function tools become the turn's forge.TurnOverrides. Function tools
// that name the agent's own client tools are the agent's; the others are
// client tools of the turn, whose calls come back as function_call items.

// requestOverrides reads the body's settings, before the agent is known;
// nil when it sets none.
func (b *createBody) requestOverrides(format *forge.OutputSchema) (*forge.TurnOverrides, error) {
	o := &forge.TurnOverrides{OutputSchema: format}
	if !jsonarg.Null(b.Instructions) {
		if err := json.Unmarshal(b.Instructions, &o.Instructions); err != nil {
			return nil, invalid("instructions", "instructions must be a string")
		}
	}
	var err error
	if o.Temperature, err = jsonarg.Number(b.Temperature, "temperature"); err != nil {
		return nil, err
	}
	if o.TopP, err = jsonarg.Number(b.TopP, "top_p"); err != nil {
		return nil, err
	}
	if !jsonarg.Null(b.MaxOutputTokens) {
		var n int
		if err := json.Unmarshal(b.MaxOutputTokens, &n); err != nil {
			return nil, invalid("max_output_tokens", "max_output_tokens must be an integer")
		}
		o.MaxOutputTokens = &n
	}
	none := false
	if !jsonarg.Null(b.ToolChoice) {
		var s string
		if json.Unmarshal(b.ToolChoice, &s) != nil || (s != "auto" && s != "none") {
			return nil, invalid("tool_choice", "tool_choice %s is not supported: Forge takes \"auto\" or \"none\" (the model decides whether to call a tool)", jsonarg.Compact(b.ToolChoice))
		}
		none = s == "none"
	}
	tools, err := functionTools(b.Tools)
	if err != nil {
		return nil, err
	}
	if !none {
		// "none": the model may call no tool of the request this turn.
		o.Tools = tools
	}
	if o.Empty() {
		return nil, nil
	}
	return o, nil
}

// forAgent drops the request's tools that are the agent's own client
// tools and checks what is left for the agent (a locked agent takes
// nothing). It returns nil when nothing is left.
func forAgent(o *forge.TurnOverrides, agent *forge.Agent) (*forge.TurnOverrides, error) {
	if o == nil {
		return nil, nil
	}
	c := *o
	c.Tools = nil
	for _, t := range o.Tools {
		if spec, ok := agent.Tool(t.Name); ok && spec.Client {
			continue
		}
		c.Tools = append(c.Tools, t)
	}
	if c.Empty() {
		return nil, nil
	}
	if err := c.Check(agent); err != nil {
		return nil, invalid(overrideParam(err), "%v", err)
	}
	return &c, nil
}

// checkOverrides is forAgent for the agent named name.
func (h *handler) checkOverrides(ctx context.Context, tenant, name string, o *forge.TurnOverrides) (*forge.TurnOverrides, error) {
	agent, err := h.env.Store.GetAgent(ctx, tenant, name)
	if err != nil {
		return nil, notFound(err, "model", "model_not_found", "The model `%s` does not exist: models are Forge agents (GET /openai/v1/models)", name)
	}
	return forAgent(o, agent)
}

// overrideParam is the request field an overrides error names.
func overrideParam(err error) string {
	msg := err.Error()
	for f, p := range map[string]string{"instructions": "instructions", "temperature": "temperature", "top_p": "top_p",
		"max_output_tokens": "max_output_tokens", "tools": "tools", "output_schema": "text.format"} {
		if strings.Contains(msg, "overrides."+f) {
			return p
		}
	}
	return ""
}

// functionTools reads tools: function tools only; hosted tools (web
// search, file search, MCP, code interpreter, ...) are refused.
func functionTools(raw json.RawMessage) ([]forge.TurnTool, error) {
	if jsonarg.Null(raw) || jsonarg.Compact(raw) == "[]" {
		return nil, nil
	}
	var items []json.RawMessage
	if v := bytes.TrimSpace(raw); v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return nil, invalid("tools", "tools must be an array of function tools")
	}
	var out []forge.TurnTool
	for i, item := range items {
		at := "tools[" + strconv.Itoa(i) + "]"
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			return nil, invalid(at, "%s is not a tool object", at)
		}
		if head.Type != "function" {
			return nil, invalid(at+".type", "%s has type %q: Forge takes function tools per request; hosted tools are not supported (the agent's tools and MCP servers are set on the agent)", at, head.Type)
		}
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&t); err != nil {
			return nil, invalid(at, "%s is not a function tool ({\"type\": \"function\", \"name\", \"description\", \"parameters\"}): %s", at, strings.TrimPrefix(err.Error(), "json: "))
		}
		if t.Name == "" {
			return nil, invalid(at+".name", "%s needs a name", at)
		}
		params := t.Parameters
		if jsonarg.Null(params) {
			params = nil
		}
		out = append(out, forge.TurnTool{Name: t.Name, Description: t.Description, InputSchema: params})
	}
	return out, nil
}

// echoOverrides shows a turn's settings on its response, as OpenAI echoes
// the request's.
func echoOverrides(r *Response, o *forge.TurnOverrides) {
	if o == nil {
		return
	}
	if o.Instructions != "" {
		r.Instructions = &o.Instructions
	}
	r.Temperature, r.TopP = o.Temperature, o.TopP
	if o.MaxOutputTokens != nil {
		n := int64(*o.MaxOutputTokens)
		r.MaxOutputTokens = &n
	}
	for _, t := range o.Tools {
		params := t.InputSchema
		if params == nil {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		r.Tools = append(r.Tools, map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": params, "strict": false})
	}
}
