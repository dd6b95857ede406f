package openaichat

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/jsonarg"
)

// Per-request settings (API.md, "Stateless clients and Chat Completions"):
// system and developer messages, temperature, top_p, max_tokens /
// max_completion_tokens, response_format and function tools become the
// turn's forge.TurnOverrides. Tools that name the agent's own client tools
// are the agent's (as before); others are client tools of the turn.

// overrides reads the body's settings for a turn of agent; instructions
// are the text of the request's system and developer messages. nil when
// it sets none.
func (b *createBody) overrides(agent *forge.Agent, instructions string, format *forge.OutputSchema) (*forge.TurnOverrides, error) {
	o := &forge.TurnOverrides{Instructions: instructions, OutputSchema: format}
	var err error
	if o.Temperature, err = jsonarg.Number(b.Temperature, "temperature"); err != nil {
		return nil, err
	}
	if o.TopP, err = jsonarg.Number(b.TopP, "top_p"); err != nil {
		return nil, err
	}
	maxTokens, err := jsonarg.Integer(b.MaxTokens, "max_tokens")
	if err != nil {
		return nil, err
	}
	maxCompletion, err := jsonarg.Integer(b.MaxCompletionTokens, "max_completion_tokens")
	if err != nil {
		return nil, err
	}
	switch {
	case maxTokens != nil && maxCompletion != nil && *maxTokens != *maxCompletion:
		return nil, invalid("max_tokens", "max_tokens and max_completion_tokens differ: send one of them")
	case maxCompletion != nil:
		o.MaxOutputTokens = maxCompletion
	default:
		o.MaxOutputTokens = maxTokens
	}
	choice, err := toolChoice(b.ToolChoice)
	if err != nil {
		return nil, err
	}
	tools, err := requestTools(b.Tools, agent)
	if err != nil {
		return nil, err
	}
	if choice != "none" {
		// "none": the model may call no tool of the request this turn
		// (the agent's own stay offered).
		o.Tools = tools
	}
	if o.Empty() {
		return nil, nil
	}
	if err := o.Check(agent); err != nil {
		return nil, invalid(param(err), "%v", err)
	}
	return o, nil
}

// param is the request field an overrides error names.
func param(err error) string {
	msg := err.Error()
	for _, f := range []string{"instructions", "temperature", "top_p", "max_output_tokens", "tools", "output_schema"} {
		if strings.Contains(msg, "overrides."+f) {
			switch f {
			case "instructions":
				return "messages"
			case "max_output_tokens":
				return "max_completion_tokens"
			case "output_schema":
				return "response_format"
			}
			return f
		}
	}
	return ""
}

// toolChoice accepts "auto" and "none" (absent is auto): Forge cannot
// force a call.
func toolChoice(raw json.RawMessage) (string, error) {
	if jsonarg.Null(raw) {
		return "auto", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && (s == "auto" || s == "none") {
		return s, nil
	}
	return "", invalid("tool_choice", "tool_choice %s is not supported: Forge takes \"auto\" or \"none\" (the model decides whether to call a tool)", jsonarg.Compact(raw))
}

// requestTools reads tools: function tools. Those naming a client tool
// the agent declares are the agent's (its declaration is what the model
// sees); the others are returned, client tools of the turn.
func requestTools(raw json.RawMessage, agent *forge.Agent) ([]forge.TurnTool, error) {
	if jsonarg.Null(raw) || jsonarg.Compact(raw) == "[]" {
		return nil, nil
	}
	var tools []json.RawMessage
	if v := bytes.TrimSpace(raw); v[0] != '[' || json.Unmarshal(v, &tools) != nil {
		return nil, invalid("tools", "tools must be an array of function tools")
	}
	var out []forge.TurnTool
	for i, item := range tools {
		at := "tools[" + strconv.Itoa(i) + "]"
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      *bool           `json:"strict"`
			} `json:"function"`
		}
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&t); err != nil {
			return nil, invalid(at, "%s is not a function tool ({\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}): %s", at, strings.TrimPrefix(err.Error(), "json: "))
		}
		if t.Type != "function" {
			return nil, invalid(at+".type", "%s has type %q: Forge takes function tools (custom tools are not supported)", at, t.Type)
		}
		if t.Function == nil || t.Function.Name == "" {
			return nil, invalid(at+".function.name", "%s needs function.name", at)
		}
		if spec, ok := agent.Tool(t.Function.Name); ok && spec.Client {
			continue
		}
		params := t.Function.Parameters
		if jsonarg.Null(params) {
			params = nil
		}
		out = append(out, forge.TurnTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: params})
	}
	return out, nil
}
