package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/forge-runtime/forge"
)

// budgets are the thinking budgets (budget_tokens) of each reasoning_effort
// on the models that take the budget form.
var budgets = map[string]int64{
	"minimal": 1024,
	"low":     1024,
	"medium":  4096,
	"high":    16384,
}

// minBudget is the smallest budget_tokens the API accepts.
const minBudget = 1024

// efforts maps reasoning_effort to output_config.effort on the models with
// adaptive thinking (which has no "minimal").
var efforts = map[string]sdk.OutputConfigEffort{
	"minimal": sdk.OutputConfigEffortLow,
	"low":     sdk.OutputConfigEffortLow,
	"medium":  sdk.OutputConfigEffortMedium,
	"high":    sdk.OutputConfigEffortHigh,
}

// modelVersion reads the generation of a model id: "claude-sonnet-4-6" and
// "claude-haiku-4-5-20251001" put it after the family, "claude-3-7-sonnet-
// 20250219" before; "claude-opus-5" has no minor. A trailing date is not a
// version. ok is false for ids without a number.
func modelVersion(id string) (major, minor int, ok bool) {
	fields := strings.FieldsFunc(strings.ToLower(id), func(r rune) bool { return r == '-' || r == '.' || r == '@' || r == ':' })
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || len(f) >= 8 {
			continue
		}
		major, ok = n, true
		if i+1 < len(fields) {
			if m, err := strconv.Atoi(fields[i+1]); err == nil && len(fields[i+1]) < 8 {
				minor = m
			}
		}
		return major, minor, ok
	}
	return 0, 0, false
}

// adaptiveThinking tells whether a model takes thinking {"type":"adaptive"}
// with output_config.effort (Claude 4.6 and later, Mythos) rather than a
// budget_tokens budget (Claude 4.5 and earlier, and ids without a version).
func adaptiveThinking(id string) bool {
	if strings.Contains(strings.ToLower(id), "mythos") {
		return true
	}
	major, minor, ok := modelVersion(id)
	return ok && (major > 4 || major == 4 && minor >= 6)
}

// defaultMaxTokens is max_tokens when the agent sets none: every Claude 4
// and later model, and 3.7, can write 16384 tokens and more; 3.5 at most
// 8192; Claude 3 and unknown ids 4096.
func defaultMaxTokens(id string) int64 {
	major, minor, ok := modelVersion(id)
	switch {
	case !ok:
		return 4096
	case major >= 4 || major == 3 && minor >= 7:
		return 16384
	case major == 3 && minor == 5:
		return 8192
	}
	return 4096
}

// thinkingState is the opaque state kept on a reasoning part: a thinking
// block's signature, or a redacted_thinking block's data.
type thinkingState struct {
	Type      string `json:"type"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
}

// buildParams maps a forge request onto the wire.
func buildParams(model string, req *forge.ModelRequest, cache bool) (sdk.MessageNewParams, error) {
	params := sdk.MessageNewParams{Model: sdk.Model(model)}
	if strings.TrimSpace(req.System) != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	msgs, err := messages(req.Messages)
	if err != nil {
		return params, err
	}
	params.Messages = msgs
	for _, t := range req.Tools {
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			return params, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		tool := &sdk.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: tool})
	}

	mp := req.Params
	maxTokens := defaultMaxTokens(model)
	if mp.MaxTokens != nil {
		maxTokens = *mp.MaxTokens
	}
	if effort := mp.ReasoningEffort; effort != "" {
		if _, ok := budgets[effort]; !ok {
			return params, fmt.Errorf("unknown reasoning_effort %q (one of minimal, low, medium, high)", effort)
		}
		budget := budgets[effort]
		if mp.MaxTokens == nil {
			// The default leaves the answer its usual room beside the
			// thinking.
			maxTokens += budget
		}
		switch {
		case adaptiveThinking(model):
			params.Thinking.OfAdaptive = &sdk.ThinkingConfigAdaptiveParam{}
			params.OutputConfig.Effort = efforts[effort]
		case !thinkingAllowed(params.Messages):
			// A tool loop whose last assistant message does not start with
			// a thinking block (it ran without thinking): the API refuses
			// thinking until the loop ends, so this step runs without.
		default:
			if budget >= maxTokens {
				budget = maxTokens / 2
			}
			if budget < minBudget {
				return params, fmt.Errorf("reasoning_effort %q needs model_params.max_tokens above %d on %s (it is %d)",
					effort, 2*minBudget-1, model, maxTokens)
			}
			params.Thinking.OfEnabled = &sdk.ThinkingConfigEnabledParam{BudgetTokens: budget}
		}
	}
	params.MaxTokens = maxTokens
	if os := req.OutputSchema; os != nil {
		// Native structured output: the answer is text holding the JSON,
		// and tools stay free (a forced tool would forbid the others).
		// The API takes neither a name nor strict: it always constrains.
		schema, err := outputSchema(os.Schema)
		if err != nil {
			return params, err
		}
		params.OutputConfig.Format = sdk.JSONOutputFormatParam{Schema: schema}
	}
	// mp.Temperature is not sent: API version 2026-10-21 rejects sampling
	// parameters on every model.
	if cache {
		params.CacheControl = sdk.NewCacheControlEphemeralParam()
	}
	return params, nil
}

// outputSchema is an output schema for the SDK, its members kept as raw
// JSON (numbers as written).
func outputSchema(schema json.RawMessage) (map[string]any, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(schema, &fields); err != nil || fields == nil {
		return nil, errors.New("output schema is not a JSON object")
	}
	m := make(map[string]any, len(fields))
	for k, v := range fields {
		m[k] = v
	}
	return m, nil
}

// thinkingAllowed tells whether budget thinking may be on: when the history
// ends in a tool loop (its last user message holds tool results), the
// assistant message that made those calls must start with a thinking block.
func thinkingAllowed(msgs []sdk.MessageParam) bool {
	n := len(msgs)
	if n < 2 || msgs[n-1].OfUser == nil || msgs[n-2].OfAssistant == nil {
		return true
	}
	results := false
	for _, b := range msgs[n-1].OfUser.Content {
		if b.OfToolResult != nil {
			results = true
			break
		}
	}
	if !results {
		return true
	}
	content := msgs[n-2].OfAssistant.Content
	return len(content) > 0 && (content[0].OfThinking != nil || content[0].OfRedactedThinking != nil)
}

// messages maps the history: user text; tool results as tool_result blocks
// of a user message (first in it, as the API requires); assistant thinking
// (only blocks with their signature or redacted data), text and tool_use
// blocks in their order. Consecutive messages of the same role are merged
// (the API expects alternation), and messages left empty are dropped.
func messages(in []forge.ModelMessage) ([]sdk.MessageParam, error) {
	out := make([]sdk.MessageParam, 0, len(in))
	var last string
	var blocks []sdk.ContentBlockParamUnion
	var results int // tool_result blocks at the start of blocks
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if last == forge.RoleAssistant {
			out = append(out, sdk.MessageParam{OfAssistant: &sdk.AssistantMessageParam{Content: blocks}})
		} else {
			out = append(out, sdk.MessageParam{OfUser: &sdk.UserMessageParam{Content: blocks}})
		}
		blocks, results = nil, 0
	}
	for i, m := range in {
		role := m.Role
		switch role {
		case forge.RoleUser, forge.RoleTool:
			role = forge.RoleUser
		case forge.RoleAssistant:
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		if role != last {
			flush()
			last = role
		}
		for j, part := range m.Parts {
			if part.Type == forge.ModelPartToolCall && role != forge.RoleAssistant {
				return nil, fmt.Errorf("messages[%d].parts[%d]: a tool call in a %s message", i, j, m.Role)
			}
			b, ok, err := contentBlock(role, part)
			switch {
			case err != nil:
				return nil, fmt.Errorf("messages[%d].parts[%d]: %w", i, j, err)
			case !ok:
			case b.OfToolResult != nil:
				// Tool results go before any text of the same user message.
				blocks = append(blocks, sdk.ContentBlockParamUnion{})
				copy(blocks[results+1:], blocks[results:])
				blocks[results] = b
				results++
			default:
				blocks = append(blocks, b)
			}
		}
	}
	flush()
	return out, nil
}

// contentBlock maps one content block of the model view, in a message of role
// (user or assistant), to the Messages API's: text (never empty: the API
// refuses that), a file (fileBlock), thinking (thinkingBlock), tool_use,
// and tool_result with its output and content blocks (text, images,
// documents). ok is false for a block left out; a block the role cannot
// hold is an error.
func contentBlock(role string, part forge.ModelPart) (b sdk.ContentBlockParamUnion, ok bool, err error) {
	switch part.Type {
	case forge.ModelPartText:
		if strings.TrimSpace(part.Text) == "" {
			return b, false, nil
		}
		return sdk.ContentBlockParamUnion{OfText: &sdk.TextBlockParam{Text: part.Text}}, true, nil
	case forge.ModelPartFile:
		return fileBlock(part.File), role == forge.RoleUser, nil
	case forge.ModelPartReasoning:
		if role != forge.RoleAssistant {
			return b, false, nil
		}
		b, ok = thinkingBlock(part)
		return b, ok, nil
	case forge.ModelPartToolCall:
		if role != forge.RoleAssistant {
			return b, false, fmt.Errorf("a tool call in a %s message", role)
		}
		return sdk.ContentBlockParamUnion{OfToolUse: &sdk.ToolUseBlockParam{
			ID: part.CallID, Name: part.Name, Input: toolInput(part.Arguments)}}, true, nil
	case forge.ModelPartToolResult:
		if role != forge.RoleUser {
			return b, false, errors.New("a tool result in an assistant message")
		}
		r := &sdk.ToolResultBlockParam{ToolUseID: part.CallID}
		if part.Output != "" {
			r.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: part.Output}}}
		}
		for _, c := range part.Content {
			cb, ok, err := contentBlock(role, c)
			switch {
			case err != nil:
				return b, false, err
			case !ok:
			case cb.OfText != nil:
				r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfText: cb.OfText})
			case cb.OfImage != nil:
				r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfImage: cb.OfImage})
			case cb.OfDocument != nil:
				r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfDocument: cb.OfDocument})
			default:
				return b, false, fmt.Errorf("a %s block in a tool result", c.Type)
			}
		}
		if part.IsError {
			r.IsError = sdk.Bool(true)
		}
		return sdk.ContentBlockParamUnion{OfToolResult: r}, true, nil
	}
	return b, false, fmt.Errorf("unknown part type %q", part.Type)
}

// thinkingBlock rebuilds a thinking or redacted_thinking block from a
// reasoning part this provider produced; reasoning without that state
// (another provider's, or cut before its signature) cannot be sent back.
func thinkingBlock(part forge.ModelPart) (sdk.ContentBlockParamUnion, bool) {
	if len(part.Provider) == 0 {
		return sdk.ContentBlockParamUnion{}, false
	}
	var st thinkingState
	if json.Unmarshal(part.Provider, &st) != nil {
		return sdk.ContentBlockParamUnion{}, false
	}
	switch {
	case st.Type == "thinking" && st.Signature != "":
		return sdk.ContentBlockParamUnion{OfThinking: &sdk.ThinkingBlockParam{Thinking: part.Text, Signature: st.Signature}}, true
	case st.Type == "redacted_thinking" && st.Data != "":
		return sdk.ContentBlockParamUnion{OfRedactedThinking: &sdk.RedactedThinkingBlockParam{Data: st.Data}}, true
	}
	return sdk.ContentBlockParamUnion{}, false
}

var emptyObject = json.RawMessage("{}")

// toolInput is a call's arguments as the JSON object tool_use.input must
// be: absent, null or anything but an object (arguments the engine could not
// parse, kept as a string) becomes {}.
func toolInput(args json.RawMessage) json.RawMessage {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || a[0] != '{' || !json.Valid(a) {
		return emptyObject
	}
	return a
}

// inputSchema turns a tool's schema into input_schema: absent or empty is
// {"type":"object","properties":{}}; a schema must be an object schema.
// Values are kept as raw JSON.
func inputSchema(schema json.RawMessage) (sdk.ToolInputSchemaParam, error) {
	var out sdk.ToolInputSchemaParam
	var fields map[string]json.RawMessage
	if s := bytes.TrimSpace(schema); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		if err := json.Unmarshal(s, &fields); err != nil {
			return out, errors.New("input schema is not a JSON object")
		}
	}
	for k, v := range fields {
		switch k {
		case "type":
			if !bytes.Equal(bytes.TrimSpace(v), []byte(`"object"`)) {
				return out, fmt.Errorf(`input schema has type %s: the API takes only "object"`, v)
			}
		case "properties":
			out.Properties = v
		case "required":
			if err := json.Unmarshal(v, &out.Required); err != nil {
				return out, errors.New("input schema: required is not a list of names")
			}
		default:
			if out.ExtraFields == nil {
				out.ExtraFields = make(map[string]any, len(fields))
			}
			out.ExtraFields[k] = v
		}
	}
	if out.Properties == nil {
		out.Properties = emptyObject
	}
	return out, nil
}
