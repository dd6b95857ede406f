package openaichat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/protocol/internal/history"
	"github.com/forge-runtime/forge/protocol/internal/jsonarg"
)

// createBody is the body of POST /chat/completions. Fields Forge honours
// are typed; settings the agent owns (or Forge cannot honour per request)
// are kept raw only to be refused when set.
type createBody struct {
	Model         *string         `json:"model"`
	Messages      json.RawMessage `json:"messages"`
	Stream        *bool           `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	N             *int            `json:"n"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	// Accepted: Forge always stores; metadata and client identification
	// are not used.
	Store             json.RawMessage `json:"store"`
	Metadata          json.RawMessage `json:"metadata"`
	User              json.RawMessage `json:"user"`
	SafetyIdentifier  json.RawMessage `json:"safety_identifier"`
	PromptCacheKey    json.RawMessage `json:"prompt_cache_key"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`

	// Per-request model settings: temperature, top_p, the max tokens,
	// tools and tool_choice are the turn's overrides (overrides.go); the
	// others are refused unless absent, null or the default.
	Temperature          json.RawMessage `json:"temperature"`
	TopP                 json.RawMessage `json:"top_p"`
	MaxTokens            json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens  json.RawMessage `json:"max_completion_tokens"`
	Stop                 json.RawMessage `json:"stop"`
	PresencePenalty      json.RawMessage `json:"presence_penalty"`
	FrequencyPenalty     json.RawMessage `json:"frequency_penalty"`
	LogitBias            json.RawMessage `json:"logit_bias"`
	Logprobs             json.RawMessage `json:"logprobs"`
	TopLogprobs          json.RawMessage `json:"top_logprobs"`
	Seed                 json.RawMessage `json:"seed"`
	ResponseFormat       json.RawMessage `json:"response_format"`
	ReasoningEffort      json.RawMessage `json:"reasoning_effort"`
	ServiceTier          json.RawMessage `json:"service_tier"`
	Modalities           json.RawMessage `json:"modalities"`
	Audio                json.RawMessage `json:"audio"`
	Prediction           json.RawMessage `json:"prediction"`
	WebSearchOptions     json.RawMessage `json:"web_search_options"`
	Verbosity            json.RawMessage `json:"verbosity"`
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"`
	Functions            json.RawMessage `json:"functions"`
	FunctionCall         json.RawMessage `json:"function_call"`
}

type streamOptions struct {
	IncludeUsage       *bool           `json:"include_usage"`
	IncludeObfuscation json.RawMessage `json:"include_obfuscation"`
}

// unsupported returns the first per-request setting the body sets that
// Forge does not honour.
func (b *createBody) unsupported() (string, bool) {
	fields := []struct {
		name string
		raw  json.RawMessage
		def  []string // values equal to what Forge does anyway
	}{
		{"stop", b.Stop, []string{`[]`}},
		{"presence_penalty", b.PresencePenalty, []string{`0`}},
		{"frequency_penalty", b.FrequencyPenalty, []string{`0`}},
		{"logit_bias", b.LogitBias, []string{`{}`}},
		{"logprobs", b.Logprobs, []string{`false`}},
		{"top_logprobs", b.TopLogprobs, []string{`0`}},
		{"seed", b.Seed, nil},
		{"reasoning_effort", b.ReasoningEffort, nil},
		{"service_tier", b.ServiceTier, []string{`"auto"`, `"default"`}},
		{"modalities", b.Modalities, []string{`["text"]`}},
		{"audio", b.Audio, nil},
		{"prediction", b.Prediction, nil},
		{"web_search_options", b.WebSearchOptions, nil},
		{"verbosity", b.Verbosity, nil},
		{"prompt_cache_retention", b.PromptCacheRetention, nil},
		{"functions", b.Functions, []string{`[]`}},
		{"function_call", b.FunctionCall, []string{`"auto"`}},
		{"parallel_tool_calls", b.ParallelToolCalls, []string{`true`}},
	}
	for _, f := range fields {
		v := jsonarg.Compact(f.raw)
		if v == "" || v == "null" {
			continue
		}
		isDefault := false
		for _, d := range f.def {
			isDefault = isDefault || v == d
		}
		if !isDefault {
			return f.name, true
		}
	}
	return "", false
}

// outputSchema maps response_format onto the turn's output schema: nil
// for text; json_schema becomes it (the engine checks the schema).
func outputSchema(raw json.RawMessage) (*forge.OutputSchema, error) {
	if jsonarg.Null(raw) {
		return nil, nil
	}
	var f struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name        string          `json:"name"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
			Description string          `json:"description"`
		} `json:"json_schema"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, invalid("response_format", "response_format must be {\"type\": \"json_schema\", \"json_schema\": {...}}: %v", err)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_schema":
		if f.JSONSchema == nil {
			return nil, invalid("response_format.json_schema", "response_format.json_schema is required with type json_schema")
		}
		s := &forge.OutputSchema{Name: f.JSONSchema.Name, Schema: f.JSONSchema.Schema}
		if f.JSONSchema.Strict != nil {
			s.Strict = *f.JSONSchema.Strict
		}
		return s, nil
	case "json_object":
		return nil, invalid("response_format", "response_format json_object is not supported: send json_schema with a schema")
	}
	return nil, invalid("response_format.type", "response_format.type must be text or json_schema, got %q", f.Type)
}

// chatMessage is one message of messages, with the fields Forge reads.
// Other fields (refusal, audio, annotations, ...) that clients echo back
// with an assistant message are accepted and not part of the
// conversation's identity.
type chatMessage struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       *string         `json:"name"`
	ToolCalls  []toolCall      `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// message is a request message as Forge compares conversations
// (history.Message).
type message = history.Message

type canonCal = history.Call

// parseMessages reads messages: a non-empty array of user, assistant and
// tool messages, and system and developer messages, whose text, joined in
// their order, is returned as the turn's instructions. They are not part
// of the conversation Forge matches: a client that changes its system
// prompt continues the same conversation.
func parseMessages(raw json.RawMessage) ([]message, string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, "", invalid("messages", "messages is required: the conversation, as an array of messages")
	}
	var items []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return nil, "", invalid("messages", "messages must be an array of messages")
	}
	if len(items) == 0 {
		return nil, "", invalid("messages", "messages must hold at least one message")
	}
	out := make([]message, 0, len(items))
	var instructions []string
	for i, item := range items {
		m, err := parseMessage(i, item)
		if err != nil {
			return nil, "", err
		}
		if m.Role == "system" || m.Role == "developer" {
			if strings.TrimSpace(m.Text) != "" {
				instructions = append(instructions, m.Text)
			}
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, "", invalid("messages", "messages holds only system and developer messages: end the conversation with a user message")
	}
	return out, strings.Join(instructions, "\n\n"), nil
}

func parseMessage(i int, raw json.RawMessage) (message, error) {
	param := func(f string) string { return "messages[" + strconv.Itoa(i) + "]" + f }
	var cm chatMessage
	if err := json.Unmarshal(raw, &cm); err != nil {
		return message{}, invalid(param(""), "messages[%d] is not a message: %s", i, strings.TrimPrefix(err.Error(), "json: "))
	}
	if cm.Role == nil {
		return message{}, invalid(param(".role"), "messages[%d].role is required", i)
	}
	m := message{Role: *cm.Role}
	switch m.Role {
	case "system", "developer":
		text, err := contentText(cm.Content, param(".content"), false)
		if err != nil {
			return message{}, err
		}
		m.Text = text
	case "user":
		text, atts, names, err := userContent(cm.Content, param(".content"))
		if err != nil {
			return message{}, err
		}
		m.Text, m.Atts, m.Files = text, atts, names
	case "assistant":
		text, err := contentText(cm.Content, param(".content"), false)
		if err != nil {
			return message{}, err
		}
		m.Text = text
		for j, tc := range cm.ToolCalls {
			if tc.ID == "" || tc.Function.Name == "" {
				return message{}, invalid(param(".tool_calls["+strconv.Itoa(j)+"]"), "messages[%d].tool_calls[%d] needs an id and a function name", i, j)
			}
			if tc.Type != "" && tc.Type != "function" {
				return message{}, invalid(param(".tool_calls["+strconv.Itoa(j)+"].type"), "messages[%d].tool_calls[%d] has type %q: Forge takes function calls", i, j, tc.Type)
			}
			m.ToolCalls = append(m.ToolCalls, canonCal{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	case "tool":
		if cm.ToolCallID == nil || *cm.ToolCallID == "" {
			return message{}, invalid(param(".tool_call_id"), "messages[%d].tool_call_id is required: the id of the tool call it answers", i)
		}
		text, err := contentText(cm.Content, param(".content"), false)
		if err != nil {
			return message{}, err
		}
		m.Text, m.ToolCallID = text, *cm.ToolCallID
	case "function":
		return message{}, invalid(param(".role"), "messages[%d] has the deprecated role \"function\": send tool messages (tool_call_id) instead", i)
	default:
		return message{}, invalid(param(".role"), "messages[%d] has role %q; Chat Completions roles are system, developer, user, assistant and tool", i, m.Role)
	}
	return m, nil
}

// contentText joins a message's text content: a string, or text parts.
// A user message must have text that is not blank.
func contentText(raw json.RawMessage, param string, required bool) (string, error) {
	v := bytes.TrimSpace(raw)
	var text string
	switch {
	case len(v) == 0 || string(v) == "null":
		if required {
			return "", invalid(param, "content is required: a string or an array of text parts")
		}
	case v[0] == '"':
		if err := json.Unmarshal(v, &text); err != nil {
			return "", invalid(param, "content is not a valid string")
		}
	case v[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(v, &parts); err != nil {
			return "", invalid(param, "content must be a string or an array of text parts")
		}
		var b strings.Builder
		for j, p := range parts {
			if p.Type != "text" {
				return "", invalid(param+"["+strconv.Itoa(j)+"]", "content[%d] has type %q: Forge takes text parts here (files go through /v1 sessions)", j, p.Type)
			}
			b.WriteString(p.Text)
		}
		text = b.String()
	default:
		return "", invalid(param, "content must be a string or an array of text parts")
	}
	if required && strings.TrimSpace(text) == "" {
		return "", invalid(param, "the message must not be blank")
	}
	return text, nil
}

// userContent reads a user message's content: a string, or text,
// image_url and file parts. It returns the text, the attachments and
// their names in the message's identity.
func userContent(raw json.RawMessage, param string) (string, []files.Attachment, []string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || v[0] != '[' {
		text, err := contentText(raw, param, true)
		return text, nil, nil, err
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
		File *struct {
			FileID   string `json:"file_id"`
			FileData string `json:"file_data"`
			Filename string `json:"filename"`
		} `json:"file"`
	}
	if err := json.Unmarshal(v, &parts); err != nil {
		return "", nil, nil, invalid(param, "content must be a string or an array of text, image_url and file parts")
	}
	var (
		b     strings.Builder
		atts  []files.Attachment
		names []string
	)
	digest := func(kind, s string) string {
		sum := sha256.Sum256([]byte(s))
		return kind + ":" + hex.EncodeToString(sum[:])
	}
	for j, p := range parts {
		at := param + "[" + strconv.Itoa(j) + "]"
		switch p.Type {
		case "text":
			b.WriteString(p.Text)
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return "", nil, nil, invalid(at, "content[%d] (image_url) needs image_url.url (a data: URL)", j)
			}
			atts = append(atts, files.Attachment{URL: p.ImageURL.URL})
			names = append(names, digest("url", p.ImageURL.URL))
		case "file":
			switch {
			case p.File == nil:
				return "", nil, nil, invalid(at, "content[%d] (file) needs file.file_id or file.file_data", j)
			case p.File.FileID != "":
				atts = append(atts, files.Attachment{FileID: p.File.FileID})
				names = append(names, "id:"+p.File.FileID)
			case strings.HasPrefix(p.File.FileData, "data:"):
				atts = append(atts, files.Attachment{URL: p.File.FileData, Filename: p.File.Filename})
				names = append(names, digest("data", p.File.FileData))
			case p.File.FileData != "":
				data := p.File.FileData
				atts = append(atts, files.Attachment{Data: &data, MimeType: "application/octet-stream", Filename: p.File.Filename})
				names = append(names, digest("data", data))
			default:
				return "", nil, nil, invalid(at, "content[%d] (file) needs file.file_id or file.file_data", j)
			}
		default:
			return "", nil, nil, invalid(at, "content[%d] has type %q: Forge takes text, image_url and file parts", j, p.Type)
		}
	}
	text := b.String()
	if strings.TrimSpace(text) == "" && len(atts) == 0 {
		return "", nil, nil, invalid(param, "the message must not be blank")
	}
	return text, atts, names, nil
}

// split cuts the conversation into the part Forge must already hold
// (prefix) and the new input at its end: one user message, or the tool
// messages answering the calls of the assistant message before them.
func split(msgs []message) (prefix []message, input []forge.Input, err error) {
	last := len(msgs) - 1
	switch msgs[last].Role {
	case "user":
		if last > 0 && msgs[last-1].Role == "tool" {
			return nil, nil, invalid("messages", "the conversation ends with tool results followed by a user message: send the tool results first (the agent answers them), then the user message")
		}
		return msgs[:last], []forge.Input{{Type: forge.InputMessage, Text: msgs[last].Text}}, nil
	case "assistant":
		return nil, nil, invalid("messages", "the conversation ends with an assistant message: there is nothing to answer (end it with a user message or tool results)")
	}
	start := last
	for start > 0 && msgs[start-1].Role == "tool" {
		start--
	}
	if start == 0 || len(msgs[start-1].ToolCalls) == 0 {
		return nil, nil, invalid("messages", "tool messages must follow the assistant message whose tool_calls they answer")
	}
	for _, m := range msgs[start:] {
		out := m.Text
		input = append(input, forge.Input{Type: forge.InputToolResult, CallID: m.ToolCallID, Output: &out})
	}
	return msgs[:start], input, nil
}
