package openairesp

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/protocol/internal/history"
	"github.com/forge-runtime/forge/protocol/internal/jsonarg"
)

// createBody is the body of POST /responses. Fields Forge honours are
// typed; agent-owned settings are kept raw only to be refused when set.
type createBody struct {
	Model              *string         `json:"model"`
	Input              json.RawMessage `json:"input"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Stream             *bool           `json:"stream"`
	Background         *bool           `json:"background"`
	Metadata           json.RawMessage `json:"metadata"`
	Store              *bool           `json:"store"`
	Include            json.RawMessage `json:"include"`
	StreamOptions      json.RawMessage `json:"stream_options"`
	// Client identification, accepted and not used.
	User             json.RawMessage `json:"user"`
	SafetyIdentifier json.RawMessage `json:"safety_identifier"`
	PromptCacheKey   json.RawMessage `json:"prompt_cache_key"`

	// Text is text.format: json_schema becomes the turn's output_schema.
	Text json.RawMessage `json:"text"`

	// Per-request settings (overrides.go): instructions, tools,
	// tool_choice, temperature, top_p, max_output_tokens.
	Instructions    json.RawMessage `json:"instructions"`
	Tools           json.RawMessage `json:"tools"`
	ToolChoice      json.RawMessage `json:"tool_choice"`
	Temperature     json.RawMessage `json:"temperature"`
	TopP            json.RawMessage `json:"top_p"`
	MaxOutputTokens json.RawMessage `json:"max_output_tokens"`
	// Agent-owned: refused unless absent, null or the default.
	MaxToolCalls         json.RawMessage `json:"max_tool_calls"`
	ParallelToolCalls    json.RawMessage `json:"parallel_tool_calls"`
	Reasoning            json.RawMessage `json:"reasoning"`
	Truncation           json.RawMessage `json:"truncation"`
	Prompt               json.RawMessage `json:"prompt"`
	TopLogprobs          json.RawMessage `json:"top_logprobs"`
	ServiceTier          json.RawMessage `json:"service_tier"`
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"`
	ContextManagement    json.RawMessage `json:"context_management"`
}

// agentSettings returns the first agent-owned setting the body sets.
func (b *createBody) agentSettings() (string, bool) {
	fields := []struct {
		name string
		raw  json.RawMessage
		def  []string // values equal to what the agent does anyway
	}{
		{"max_tool_calls", b.MaxToolCalls, nil},
		{"parallel_tool_calls", b.ParallelToolCalls, []string{`true`}},
		{"reasoning", b.Reasoning, []string{`{}`}},
		{"truncation", b.Truncation, []string{`"disabled"`}},
		{"prompt", b.Prompt, nil},
		{"top_logprobs", b.TopLogprobs, []string{`0`}},
		{"service_tier", b.ServiceTier, []string{`"auto"`, `"default"`}},
		{"prompt_cache_retention", b.PromptCacheRetention, nil},
		{"context_management", b.ContextManagement, nil},
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

// textFormat is the text object of a request.
type textFormat struct {
	Format *struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
		Description string          `json:"description"`
	} `json:"format"`
}

// outputSchema maps text.format onto the turn's output schema: nil for
// plain text; json_schema becomes it (the engine checks the schema).
func outputSchema(raw json.RawMessage) (*forge.OutputSchema, error) {
	if jsonarg.Null(raw) {
		return nil, nil
	}
	var t textFormat
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, invalid("text", "text must be {\"format\": {...}}: %v (verbosity is the agent's)", err)
	}
	if t.Format == nil {
		return nil, nil
	}
	switch t.Format.Type {
	case "text":
		return nil, nil
	case "json_schema":
		s := &forge.OutputSchema{Name: t.Format.Name, Schema: t.Format.Schema}
		if t.Format.Strict != nil {
			s.Strict = *t.Format.Strict
		}
		return s, nil
	case "json_object":
		return nil, invalid("text.format.type", "json_object is not supported: send json_schema with a schema")
	}
	return nil, invalid("text.format.type", "text.format.type must be text or json_schema, got %q", t.Format.Type)
}

// inputItem is one item of an input array, with the fields of every type
// Forge takes.
type inputItem struct {
	Type    *string         `json:"type"`
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
	// function_call_output
	CallID *string         `json:"call_id"`
	Output json.RawMessage `json:"output"`
	// mcp_approval_response
	ApprovalRequestID *string `json:"approval_request_id"`
	Approve           *bool   `json:"approve"`
	Reason            *string `json:"reason"`
	// Accepted and not used.
	ID        json.RawMessage `json:"id"`
	Status    json.RawMessage `json:"status"`
	Name      json.RawMessage `json:"name"`
	Namespace json.RawMessage `json:"namespace"`
	Caller    json.RawMessage `json:"caller"`
}

// parseInputFiles reads input: the new input at its end (one user
// message, or resolutions of open calls), the items before it that
// repeat the conversation (history.go), and the new message's
// attachments (input_image and input_file parts), not yet checked.
func parseInputFiles(raw json.RawMessage) (prefix []entry, input []forge.Input, atts []files.Attachment, err error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, nil, nil, invalid("input", "input is required: a string, or an array of input items")
	}
	if v[0] == '"' {
		var text string
		if err := json.Unmarshal(v, &text); err != nil {
			return nil, nil, nil, invalid("input", "input is not a valid string")
		}
		if strings.TrimSpace(text) == "" {
			return nil, nil, nil, invalid("input", "input must not be blank")
		}
		return nil, []forge.Input{{Type: forge.InputMessage, Text: text}}, nil, nil
	}
	if v[0] != '[' {
		return nil, nil, nil, invalid("input", "input must be a string or an array of input items")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, nil, nil, invalid("input", "input must be an array of input items")
	}
	if len(items) == 0 {
		return nil, nil, nil, invalid("input", "input must hold at least one item")
	}
	if len(items) > maxInputItems {
		return nil, nil, nil, invalid("input", "input holds %d items; at most %d", len(items), maxInputItems)
	}
	entries := make([]entry, 0, len(items))
	for i, raw := range items {
		e, err := parseItem(i, raw)
		if err != nil {
			return nil, nil, nil, err
		}
		entries = append(entries, e)
	}
	prefix, input, atts, err = splitInput(entries)
	if err != nil {
		return nil, nil, nil, err
	}
	for i := len(prefix); i < len(entries); i++ {
		if err := strictItem(&entries[i], items[i]); err != nil {
			return nil, nil, nil, err
		}
	}
	return prefix, input, atts, nil
}

// maxInputItems bounds an input array (resent history included): the
// body limit bounds it too; this keeps a request's work reasonable.
const maxInputItems = 10000

// anyItem is an input item read leniently, with the fields of every type
// Forge reads: clients echo back fields of earlier items Forge does not
// read, none of which is part of the conversation's identity. The new
// input at the end is checked strictly too (strictItem).
type anyItem struct {
	Type              *string         `json:"type"`
	Role              *string         `json:"role"`
	ID                *string         `json:"id"`
	Content           json.RawMessage `json:"content"`
	CallID            *string         `json:"call_id"`
	Name              *string         `json:"name"`
	Arguments         *string         `json:"arguments"`
	Output            json.RawMessage `json:"output"`
	ApprovalRequestID *string         `json:"approval_request_id"`
	Approve           *bool           `json:"approve"`
	Reason            *string         `json:"reason"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// strictItem refuses fields a new input item (a user message,
// function_call_output or mcp_approval_response) has that Forge would
// ignore.
func strictItem(e *entry, raw json.RawMessage) error {
	var it inputItem
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&it); err != nil {
		return invalid("input["+itoa(e.index)+"]", "input[%d] is not an input item Forge takes (a message, function_call_output, mcp_approval_response or an item of an earlier response): %s",
			e.index, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func parseItem(i int, raw json.RawMessage) (entry, error) {
	param := func(f string) string { return "input[" + itoa(i) + "]" + f }
	var it anyItem
	if err := json.Unmarshal(raw, &it); err != nil {
		return entry{}, invalid(param(""), "input[%d] is not an input item Forge reads: %s", i, strings.TrimPrefix(err.Error(), "json: "))
	}
	typ := "message"
	switch {
	case it.Type != nil:
		typ = *it.Type
	case it.Role == nil && it.ID != nil:
		// An item of only an id is a reference (the Go SDK sends
		// item_reference so, its type being optional).
		typ = "item_reference"
	}
	if typ == "message" && it.Role != nil && *it.Role == "assistant" {
		typ = "assistant"
	}
	e := entry{index: i, kind: typ, id: deref(it.ID)}
	switch typ {
	case "assistant":
		text, err := assistantText(it.Content, param(".content"))
		if err != nil {
			return entry{}, err
		}
		e.text = text
	case "function_call":
		if deref(it.CallID) == "" || deref(it.Name) == "" {
			return entry{}, invalid(param(""), "input[%d] (function_call) needs call_id and name", i)
		}
		e.call = history.Call{ID: *it.CallID, Name: *it.Name, Arguments: deref(it.Arguments)}
	case "mcp_approval_request":
		if e.id == "" {
			return entry{}, invalid(param(".id"), "input[%d] (mcp_approval_request) needs its id", i)
		}
		e.call = history.Call{ID: e.id, Name: "mcp_approval:" + deref(it.Name), Arguments: deref(it.Arguments)}
	case "item_reference":
		if e.id == "" {
			return entry{}, invalid(param(".id"), "input[%d] (item_reference) needs the id of the item it refers to", i)
		}
	case "reasoning", "mcp_call", "mcp_list_tools":
	case "message":
		role := deref(it.Role)
		if role != "user" {
			return entry{}, invalid(param(".role"), "input[%d] has role %q: the agent owns its instructions, so input takes user messages and the items of earlier responses", i, role)
		}
		text, atts, err := contentParts(it.Content, param(".content"))
		if err != nil {
			return entry{}, err
		}
		e.kind, e.in, e.atts = "user", forge.Input{Type: forge.InputMessage, Text: text}, atts
	case "function_call_output":
		if deref(it.CallID) == "" {
			return entry{}, invalid(param(".call_id"), "input[%d].call_id is required", i)
		}
		out, err := callOutput(it.Output, param(".output"))
		if err != nil {
			return entry{}, err
		}
		e.in = forge.Input{Type: forge.InputToolResult, CallID: *it.CallID, Output: &out}
	case "mcp_approval_response":
		if deref(it.ApprovalRequestID) == "" {
			return entry{}, invalid(param(".approval_request_id"), "input[%d].approval_request_id is required: the id of the mcp_approval_request", i)
		}
		if it.Approve == nil {
			return entry{}, invalid(param(".approve"), "input[%d].approve is required: true or false", i)
		}
		e.in = forge.Input{Type: forge.InputApproval, CallID: *it.ApprovalRequestID, Approved: it.Approve, Reason: deref(it.Reason)}
	default:
		return entry{}, invalid(param(".type"), "input[%d] has type %q; Forge takes messages, function_call_output, mcp_approval_response, item_reference and the items of earlier responses", i, typ)
	}
	return e, nil
}

// assistantText joins an assistant message's output_text (or refusal)
// parts.
func assistantText(raw json.RawMessage, param string) (string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) > 0 && v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", invalid(param, "content is not a valid string")
		}
		return s, nil
	}
	if len(v) == 0 || string(v) == "null" {
		return "", nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(v, &parts); err != nil {
		return "", invalid(param, "an assistant message's content must be a string or an array of output_text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "output_text", "input_text", "text":
			b.WriteString(p.Text)
		case "refusal":
			b.WriteString(p.Refusal)
		}
	}
	return b.String(), nil
}

// contentParts joins a message's text content (a string, or input_text
// parts) and returns its input_image and input_file parts as
// attachments: an image by data URL or file_id (image_url naming a
// remote URL is refused: Forge fetches nothing), a file by file_data (a
// data URL, or base64 with filename) or file_id.
func contentParts(raw json.RawMessage, param string) (string, []files.Attachment, error) {
	v := bytes.TrimSpace(raw)
	var (
		text string
		atts []files.Attachment
	)
	switch {
	case len(v) > 0 && v[0] == '"':
		if err := json.Unmarshal(v, &text); err != nil {
			return "", nil, invalid(param, "content is not a valid string")
		}
	case len(v) > 0 && v[0] == '[':
		var parts []struct {
			Type     string  `json:"type"`
			Text     string  `json:"text"`
			ImageURL string  `json:"image_url"`
			FileID   string  `json:"file_id"`
			FileData *string `json:"file_data"`
			FileURL  string  `json:"file_url"`
			Filename string  `json:"filename"`
			Detail   string  `json:"detail"`
		}
		if err := json.Unmarshal(v, &parts); err != nil {
			return "", nil, invalid(param, "content must be a string or an array of input_text, input_image and input_file parts")
		}
		var b strings.Builder
		for j, p := range parts {
			at := param + "[" + itoa(j) + "]"
			switch p.Type {
			case "input_text", "text":
				b.WriteString(p.Text)
			case "input_image":
				switch {
				case p.ImageURL != "" && p.FileID != "":
					return "", nil, invalid(at, "content[%d] takes image_url or file_id, not both", j)
				case p.FileID != "":
					atts = append(atts, files.Attachment{FileID: p.FileID})
				case p.ImageURL != "":
					atts = append(atts, files.Attachment{URL: p.ImageURL})
				default:
					return "", nil, invalid(at, "content[%d] (input_image) needs image_url (a data: URL) or file_id", j)
				}
			case "input_file":
				switch {
				case p.FileURL != "":
					return "", nil, invalid(at+".file_url", "content[%d].file_url: Forge does not fetch URLs; send file_data or a file_id", j)
				case p.FileID != "" && p.FileData != nil:
					return "", nil, invalid(at, "content[%d] takes file_data or file_id, not both", j)
				case p.FileID != "":
					atts = append(atts, files.Attachment{FileID: p.FileID})
				case p.FileData != nil && strings.HasPrefix(*p.FileData, "data:"):
					atts = append(atts, files.Attachment{URL: *p.FileData, Filename: p.Filename})
				case p.FileData != nil:
					// Bare base64: the type comes from the content.
					atts = append(atts, files.Attachment{Data: p.FileData, MimeType: "application/octet-stream", Filename: p.Filename})
				default:
					return "", nil, invalid(at, "content[%d] (input_file) needs file_data or file_id", j)
				}
			default:
				return "", nil, invalid(at, "content[%d] has type %q: Forge takes input_text, input_image and input_file", j, p.Type)
			}
		}
		text = b.String()
	default:
		return "", nil, invalid(param, "content is required: a string or an array of input_text parts")
	}
	if strings.TrimSpace(text) == "" {
		if len(atts) == 0 {
			return "", nil, invalid(param, "the message must not be blank")
		}
		text = "" // images or files alone
	}
	return text, atts, nil
}

// callOutput is a function_call_output's output: a string, or text parts
// joined.
func callOutput(raw json.RawMessage, param string) (string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) > 0 && v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", invalid(param, "output is not a valid string")
		}
		return s, nil
	}
	if len(v) > 0 && v[0] == '[' {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(v, &parts); err != nil {
			return "", invalid(param, "output must be a string or an array of input_text parts")
		}
		var b strings.Builder
		for j, p := range parts {
			if p.Type != "input_text" && p.Type != "output_text" && p.Type != "text" {
				return "", invalid(param, "output[%d] has type %q: Forge takes text outputs", j, p.Type)
			}
			b.WriteString(p.Text)
		}
		return b.String(), nil
	}
	return "", invalid(param, "output is required: a string")
}

// conversationID reads conversation: a session id, or {"id": ...}.
func conversationID(raw json.RawMessage) (string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return "", nil
	}
	var id string
	if v[0] == '{' {
		var c struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(v, &c); err != nil {
			return "", invalid("conversation", "conversation must be a conversation id or {\"id\": ...}")
		}
		id = c.ID
	} else if err := json.Unmarshal(v, &id); err != nil {
		return "", invalid("conversation", "conversation must be a conversation id or {\"id\": ...}")
	}
	if id == "" {
		return "", invalid("conversation", "conversation must name a conversation (a Forge session id)")
	}
	return id, nil
}

// metadata reads metadata: an object of strings (at most 16 keys of 64
// characters, values of 512, as OpenAI's).
func metadata(raw json.RawMessage) (map[string]string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return map[string]string{}, nil
	}
	var m map[string]string
	if err := json.Unmarshal(v, &m); err != nil {
		return nil, invalid("metadata", "metadata must be an object of string values")
	}
	if len(m) > 16 {
		return nil, invalid("metadata", "metadata holds %d keys; at most 16", len(m))
	}
	for k, val := range m {
		if len(k) > 64 || len(val) > 512 {
			return nil, invalid("metadata", "metadata keys are at most 64 characters and values at most 512")
		}
	}
	return m, nil
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
