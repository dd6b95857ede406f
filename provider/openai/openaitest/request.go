package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
)

// Request is a request body the server received, decoded for assertions.
// Body keeps the exact bytes.
type Request struct {
	Header http.Header     `json:"-"`
	Body   json.RawMessage `json:"-"`

	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Tools               []Tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxTokens           *int64          `json:"max_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	ReasoningEffort     string          `json:"reasoning_effort"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	ResponseFormat      *ResponseFormat `json:"response_format"`
}

// ResponseFormat is a chat request's response_format.
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema"`
}

// JSONSchema is a structured-output format: response_format.json_schema of
// a chat request, text.format of a Responses request (with Type).
type JSONSchema struct {
	Type   string          `json:"type,omitempty"`
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

// problem is what the API says of a json_schema format at param.
func (s *JSONSchema) problem(param string) (string, string) {
	if !functionNameRE.MatchString(s.Name) {
		return param + ".name", "Invalid '" + param + ".name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
	}
	var schema map[string]any
	if err := json.Unmarshal(s.Schema, &schema); err != nil || schema == nil {
		return param + ".schema", "Invalid '" + param + ".schema': expected an object."
	}
	return "", ""
}

// StreamOptions is the request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one entry of the request's messages. Content is the text of a
// string content or the concatenated text parts of an array content;
// ContentNull reports an explicit null.
type Message struct {
	Role        string     `json:"role"`
	Content     string     `json:"-"`
	ContentNull bool       `json:"-"`
	Name        string     `json:"name,omitempty"`
	ToolCalls   []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID  string     `json:"tool_call_id,omitempty"`
	// RawContent is the content exactly as sent (absent: nil).
	RawContent json.RawMessage `json:"content,omitempty"`
}

// UnmarshalJSON decodes a message, flattening its content to text.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = Message(p)
	c := bytes.TrimSpace(m.RawContent)
	switch {
	case len(c) == 0:
	case bytes.Equal(c, []byte("null")):
		m.ContentNull = true
	case c[0] == '"':
		if err := json.Unmarshal(c, &m.Content); err != nil {
			return err
		}
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return fmt.Errorf("content: %w", err)
		}
		for _, p := range parts {
			m.Content += p.Text
		}
	default:
		return fmt.Errorf("content must be a string, an array or null")
	}
	return nil
}

// ToolCall is an assistant message's tool call.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a tool declared in the request.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
}

var functionNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validate applies the checks the real API makes on a chat request, so a
// history the real service would refuse is refused here too.
func (r *Request) validate() (param, msg string) {
	if r.Model == "" {
		return "model", "you must provide a model parameter"
	}
	if len(r.Messages) == 0 {
		return "messages", "[] is too short - 'messages'"
	}
	if r.StreamOptions != nil && !r.Stream {
		return "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."
	}
	if f := r.ResponseFormat; f != nil {
		switch {
		case f.Type == "json_schema" && f.JSONSchema == nil:
			return "response_format.json_schema", "Missing required parameter: 'response_format.json_schema'."
		case f.Type == "json_schema":
			if p, m := f.JSONSchema.problem("response_format.json_schema"); p != "" {
				return p, m
			}
		case f.Type != "text" && f.Type != "json_object":
			return "response_format.type", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'json_schema', 'json_object' and 'text'.", f.Type)
		}
	}
	for i, t := range r.Tools {
		if t.Type != "function" {
			return fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("Invalid value: '%s'. Supported values are: 'function' and 'custom'.", t.Type)
		}
		if !functionNameRE.MatchString(t.Function.Name) {
			return fmt.Sprintf("tools[%d].function.name", i), fmt.Sprintf("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
		}
		if len(t.Function.Parameters) > 0 {
			var schema struct {
				Type any `json:"type"`
			}
			if err := json.Unmarshal(t.Function.Parameters, &schema); err != nil || schema.Type != "object" {
				return fmt.Sprintf("tools[%d].function.parameters", i), fmt.Sprintf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%v\"'.", t.Function.Name, schema.Type)
			}
		}
	}
	// open holds the tool_call ids of the last assistant message still
	// waiting for their tool messages.
	var open []string
	for i, m := range r.Messages {
		p := fmt.Sprintf("messages.[%d]", i)
		if m.Role != "tool" && len(open) > 0 {
			return "messages", fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", joinIDs(open))
		}
		switch m.Role {
		case "system", "developer", "user":
			if m.RawContent == nil || m.ContentNull {
				return p + ".content", fmt.Sprintf("Invalid value for '%s.content': expected a string, got null.", p)
			}
			if param, msg := chatContentProblem(p, m.RawContent); msg != "" {
				return param, msg
			}
		case "assistant":
			if (m.RawContent == nil || m.ContentNull) && len(m.ToolCalls) == 0 {
				return p + ".content", fmt.Sprintf("Invalid value for '%s.content': expected a string, got null.", p)
			}
			for j, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || c.Function.Name == "" {
					return fmt.Sprintf("%s.tool_calls[%d]", p, j), "a tool call needs an id, type \"function\" and a function name"
				}
				open = append(open, c.ID)
			}
		case "tool":
			if m.ToolCallID == "" {
				return p + ".tool_call_id", fmt.Sprintf("Missing required parameter: '%s.tool_call_id'.", p)
			}
			k := -1
			for j, id := range open {
				if id == m.ToolCallID {
					k = j
				}
			}
			if k < 0 {
				return p + ".role", "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
			}
			open = append(open[:k], open[k+1:]...)
		default:
			return p + ".role", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role)
		}
	}
	if len(open) > 0 {
		return "messages", fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", joinIDs(open))
	}
	return "", ""
}

func joinIDs(ids []string) string {
	var b bytes.Buffer
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(id)
	}
	return b.String()
}
