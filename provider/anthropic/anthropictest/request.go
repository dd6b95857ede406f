package anthropictest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Request is a Messages request the server received, decoded for
// assertions. Body keeps the exact bytes.
type Request struct {
	Header http.Header     `json:"-"`
	Body   json.RawMessage `json:"-"`

	Model     string `json:"model"`
	MaxTokens *int64 `json:"max_tokens"`
	// System is the text of a string system prompt or the concatenated
	// text blocks of an array one; RawSystem is the value as sent.
	System        string          `json:"-"`
	RawSystem     json.RawMessage `json:"system,omitempty"`
	Messages      []Message       `json:"messages"`
	Tools         []Tool          `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Stream        bool            `json:"stream"`
	Thinking      *ThinkingConfig `json:"thinking"`
	OutputConfig  *OutputConfig   `json:"output_config"`
	CacheControl  json.RawMessage `json:"cache_control"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Metadata      json.RawMessage `json:"metadata"`
}

// ThinkingConfig is the request's thinking configuration.
type ThinkingConfig struct {
	Type         string `json:"type"`
	BudgetTokens int64  `json:"budget_tokens"`
	Display      string `json:"display,omitempty"`
}

// OutputConfig is the request's output_config.
type OutputConfig struct {
	Effort string          `json:"effort,omitempty"`
	Format json.RawMessage `json:"format,omitempty"`
}

// Message is one entry of the request's messages. A string content is
// decoded as one text block; Text concatenates the text blocks.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"-"`
	Text    string  `json:"-"`
	// RawContent is the content exactly as sent.
	RawContent json.RawMessage `json:"content"`
}

// UnmarshalJSON decodes a message and its content blocks.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = Message(p)
	c := bytes.TrimSpace(m.RawContent)
	switch {
	case len(c) == 0, bytes.Equal(c, []byte("null")):
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return err
		}
		m.Content = []Block{{Type: "text", Text: s}}
	case c[0] == '[':
		if err := json.Unmarshal(c, &m.Content); err != nil {
			return fmt.Errorf("content: %w", err)
		}
	default:
		return fmt.Errorf("content must be a string or an array")
	}
	for _, bl := range m.Content {
		if bl.Type == "text" {
			m.Text += bl.Text
		}
	}
	return nil
}

// Block is a content block of a message.
type Block struct {
	Type string `json:"type"`
	// text
	Text string `json:"text,omitempty"`
	// thinking, redacted_thinking
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
	Data      string  `json:"data,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result: Content is the text of a string content or of its text
	// blocks; RawContent is the content as sent.
	ToolUseID  string          `json:"tool_use_id,omitempty"`
	Content    string          `json:"-"`
	RawContent json.RawMessage `json:"content,omitempty"`
	IsError    *bool           `json:"is_error,omitempty"`
	// Files are a tool_result's image and document blocks, decoded.
	Files []fakeapi.File `json:"-"`
	// image, document: the source (base64 data), and a document's title.
	Source *Source `json:"source,omitempty"`
	Title  string  `json:"title,omitempty"`

	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// UnmarshalJSON decodes a block, flattening a tool_result's content.
func (bl *Block) UnmarshalJSON(b []byte) error {
	type plain Block
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*bl = Block(p)
	c := bytes.TrimSpace(bl.RawContent)
	switch {
	case len(c) == 0:
	case c[0] == '"':
		return json.Unmarshal(c, &bl.Content)
	case c[0] == '[':
		var parts []Block
		if err := json.Unmarshal(c, &parts); err != nil {
			return fmt.Errorf("tool_result content: %w", err)
		}
		for _, p := range parts {
			bl.Content += p.Text
			if f, ok := p.File(); ok {
				bl.Files = append(bl.Files, f)
			}
		}
	}
	return nil
}

// Source is an image or document block's source.
type Source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
}

// File is an image or document block's file, decoded; false for another
// block, or a source that is not base64.
func (bl *Block) File() (fakeapi.File, bool) {
	if (bl.Type != "image" && bl.Type != "document") || bl.Source == nil || bl.Source.Type != "base64" {
		return fakeapi.File{}, false
	}
	data, err := base64.StdEncoding.DecodeString(bl.Source.Data)
	if err != nil {
		return fakeapi.File{}, false
	}
	mt := bl.Source.MediaType
	if mt == "" && bl.Type == "document" {
		mt = "application/pdf"
	}
	return fakeapi.File{MimeType: mt, Name: bl.Title, Data: data}, true
}

// Tool is a tool declared in the request.
type Tool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	toolUseIDRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
)

// Known API versions (the anthropic-version header).
const (
	Version20230601 = "2023-06-01"
	Version20261021 = "2026-10-21"
)

func (r *Request) decodeSystem() error {
	c := bytes.TrimSpace(r.RawSystem)
	switch {
	case len(c) == 0, bytes.Equal(c, []byte("null")):
	case c[0] == '"':
		return json.Unmarshal(c, &r.System)
	case c[0] == '[':
		var parts []Block
		if err := json.Unmarshal(c, &parts); err != nil {
			return err
		}
		for _, p := range parts {
			r.System += p.Text
		}
	default:
		return fmt.Errorf("system must be a string or an array of text blocks")
	}
	return nil
}

// validate applies the checks the real API makes on a Messages request, so
// a request the real service would refuse is refused here too, with the
// API's message. One check is stricter than the API: messages must
// alternate between user and assistant (the API merges consecutive turns of
// one role; Forge's provider merges them itself, and this catches a
// provider that does not).
func (r *Request) validate(version string) string {
	if r.Model == "" {
		return "model: Field required"
	}
	if r.MaxTokens == nil {
		return "max_tokens: Field required"
	}
	if *r.MaxTokens < 0 {
		return "max_tokens: Input should be greater than or equal to 0"
	}
	if len(r.Messages) == 0 {
		return "messages: Field required"
	}
	if version == Version20261021 {
		for _, p := range []struct {
			name string
			set  bool
		}{{"temperature", r.Temperature != nil}, {"top_p", r.TopP != nil}, {"top_k", r.TopK != nil}} {
			if p.set {
				return p.name + ": Extra inputs are not permitted"
			}
		}
	}
	if t := r.Thinking; t != nil {
		switch t.Type {
		case "enabled":
			if t.BudgetTokens < 1024 {
				return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
			}
			if t.BudgetTokens >= *r.MaxTokens {
				return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
			}
		case "disabled", "adaptive":
		default:
			return fmt.Sprintf("thinking: Input tag '%s' found using 'type' does not match any of the expected tags: 'adaptive', 'disabled', 'enabled'", t.Type)
		}
	}
	if o := r.OutputConfig; o != nil && len(o.Format) > 0 {
		var f struct {
			Type   string                     `json:"type"`
			Schema map[string]json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(o.Format, &f); err != nil || f.Type != "json_schema" {
			return "output_config.format.type: Input tag found using 'type' does not match any of the expected tags: 'json_schema'"
		}
		if f.Schema == nil {
			return "output_config.format.schema: Field required"
		}
	}
	if o := r.OutputConfig; o != nil && o.Effort != "" {
		switch o.Effort {
		case "low", "medium", "high", "xhigh", "max":
		default:
			return "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
		}
	}
	names := map[string]bool{}
	for i, t := range r.Tools {
		p := fmt.Sprintf("tools.%d.custom", i)
		if t.Type != "" && t.Type != "custom" {
			continue // a server tool
		}
		if !toolNameRE.MatchString(t.Name) {
			return p + ".name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"
		}
		if names[t.Name] {
			return "tools: Tool names must be unique."
		}
		names[t.Name] = true
		if len(t.InputSchema) == 0 {
			return p + ".input_schema: Field required"
		}
		var schema struct {
			Type any `json:"type"`
		}
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema.Type != "object" {
			return p + ".input_schema.type: Input should be 'object'"
		}
	}
	return r.validateMessages()
}

func (r *Request) validateMessages() string {
	seen := map[string]bool{}
	prevRole := ""
	var open []string // tool_use ids of the previous assistant message
	for i, m := range r.Messages {
		p := fmt.Sprintf("messages.%d", i)
		switch m.Role {
		case "user", "assistant":
		default:
			return p + ".role: Input should be 'user' or 'assistant'"
		}
		if m.Role == prevRole {
			return fmt.Sprintf(`messages: roles must alternate between "user" and "assistant", but found multiple %q roles in a row`, m.Role)
		}
		prevRole = m.Role
		final := i == len(r.Messages)-1
		if len(m.Content) == 0 && !(final && m.Role == "assistant") {
			return p + ": all messages must have non-empty content except for the optional final assistant message"
		}
		answered := map[string]bool{}
		texts := false // a block other than tool_result seen
		for j, b := range m.Content {
			bp := fmt.Sprintf("%s.content.%d", p, j)
			switch b.Type {
			case "text":
				if b.Text == "" {
					return "messages: text content blocks must be non-empty"
				}
				if strings.TrimSpace(b.Text) == "" {
					return "messages: text content blocks must contain non-whitespace text"
				}
			case "image", "document", "search_result":
				if b.Type == "document" && m.Role == "assistant" {
					return bp + ": document blocks are not permitted in assistant messages"
				}
			case "thinking":
				if m.Role != "assistant" {
					return bp + ": thinking blocks are only permitted in assistant messages"
				}
				if b.Signature == nil {
					return bp + ".thinking.signature: Field required"
				}
				if b.Thinking == nil {
					return bp + ".thinking.thinking: Field required"
				}
				if *b.Signature == "" || !checkSignature(*b.Thinking, *b.Signature) {
					return bp + ": Invalid `signature` in `thinking` block"
				}
			case "redacted_thinking":
				if m.Role != "assistant" {
					return bp + ": redacted_thinking blocks are only permitted in assistant messages"
				}
				if b.Data == "" {
					return bp + ".redacted_thinking.data: Field required"
				}
			case "tool_use":
				if m.Role != "assistant" {
					return bp + ": tool_use blocks are only permitted in assistant messages"
				}
				if !toolUseIDRE.MatchString(b.ID) {
					return bp + ".tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
				}
				if b.Name == "" {
					return bp + ".tool_use.name: Field required"
				}
				if in := bytes.TrimSpace(b.Input); len(in) == 0 || in[0] != '{' {
					return bp + ".tool_use.input: Input should be a valid dictionary"
				}
				if seen[b.ID] {
					return bp + ": `tool_use` ids must be unique"
				}
				seen[b.ID] = true
			case "tool_result":
				if m.Role != "user" {
					return bp + ": tool_result blocks are only permitted in user messages"
				}
				known := false
				for _, id := range open {
					known = known || id == b.ToolUseID
				}
				if !known {
					return fmt.Sprintf("%s: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", bp, b.ToolUseID)
				}
				if texts {
					// Results must come first in the message.
					continue
				}
				answered[b.ToolUseID] = true
				continue
			default:
				return fmt.Sprintf("%s.type: Input tag '%s' found using 'type' does not match any of the expected tags", bp, b.Type)
			}
			texts = true
		}
		if len(open) > 0 {
			var missing []string
			for _, id := range open {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
					i-1, strings.Join(missing, ", "))
			}
		}
		open = open[:0]
		if m.Role == "assistant" {
			for _, b := range m.Content {
				if b.Type == "tool_use" {
					open = append(open, b.ID)
				}
			}
			if final && len(m.Content) > 0 {
				if last := m.Content[len(m.Content)-1]; last.Type == "text" && strings.TrimRight(last.Text, " \t\r\n") != last.Text {
					return "messages: final assistant content cannot end with trailing whitespace"
				}
			}
		}
	}
	if len(open) > 0 {
		return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
			len(r.Messages)-1, strings.Join(open, ", "))
	}
	if r.Thinking != nil && r.Thinking.Type == "enabled" {
		if msg := r.thinkingLoop(); msg != "" {
			return msg
		}
	}
	return ""
}

// thinkingLoop applies the rule of budget thinking: when the request ends
// in a tool loop (the last message holds tool results), the assistant
// message that made the calls must start with a thinking block.
func (r *Request) thinkingLoop() string {
	n := len(r.Messages)
	if n < 2 || r.Messages[n-1].Role != "user" {
		return ""
	}
	results := false
	for _, b := range r.Messages[n-1].Content {
		results = results || b.Type == "tool_result"
	}
	a := r.Messages[n-2]
	if !results || a.Role != "assistant" || len(a.Content) == 0 {
		return ""
	}
	if t := a.Content[0].Type; t != "thinking" && t != "redacted_thinking" {
		return fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", n-2, t)
	}
	return ""
}
