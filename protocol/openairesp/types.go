package openairesp

import "encoding/json"

// Response is an OpenAI Responses API response object: a Forge turn.
type Response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	Error              *ResponseError    `json:"error"`
	IncompleteDetails  *Incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Conversation       *Conversation     `json:"conversation"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              []any             `json:"tools"`
	Text               textConfig        `json:"text"`
	Truncation         string            `json:"truncation"`
	Usage              *Usage            `json:"usage"`
	Metadata           map[string]string `json:"metadata"`
	Store              bool              `json:"store"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Incomplete says why a response is incomplete.
type Incomplete struct {
	Reason string `json:"reason"`
}

// Conversation names the Forge session a response belongs to.
type Conversation struct {
	ID string `json:"id"`
}

type textConfig struct {
	Format struct {
		Type   string          `json:"type"`
		Name   string          `json:"name,omitempty"`
		Schema json.RawMessage `json:"schema,omitempty"`
		Strict *bool           `json:"strict,omitempty"`
	} `json:"format"`
}

// Usage is a response's token accounting.
type Usage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// Output item types.
const (
	itemMessage         = "message"
	itemReasoning       = "reasoning"
	itemMCPCall         = "mcp_call"
	itemFunctionCall    = "function_call"
	itemApprovalRequest = "mcp_approval_request"
)

// serverLabel is the MCP server label of every tool Forge runs: the agent
// owns its tools, whatever server they come from.
const serverLabel = "forge"

// messageItem is an assistant text part.
type messageItem struct {
	Type    string        `json:"type"`
	ID      string        `json:"id"`
	Status  string        `json:"status"`
	Role    string        `json:"role"`
	Content []*outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

// reasoningItem is a reasoning part, as reasoning_text content and again
// as its summary_text summary.
type reasoningItem struct {
	Type    string           `json:"type"`
	ID      string           `json:"id"`
	Status  string           `json:"status"`
	Summary []*reasoningText `json:"summary"`
	Content []*reasoningText `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// mcpCallItem is a tool call Forge ran (built-in, MCP or subagent).
type mcpCallItem struct {
	Type              string  `json:"type"`
	ID                string  `json:"id"`
	ServerLabel       string  `json:"server_label"`
	Name              string  `json:"name"`
	Arguments         string  `json:"arguments"`
	Output            *string `json:"output"`
	Error             *string `json:"error"`
	Status            string  `json:"status"`
	ApprovalRequestID *string `json:"approval_request_id"`
}

// functionCallItem is a client tool call waiting for its output.
type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// approvalRequestItem is a call waiting for approval; its id is the call
// id an mcp_approval_response names.
type approvalRequestItem struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	ServerLabel string `json:"server_label"`
	Name        string `json:"name"`
	Arguments   string `json:"arguments"`
}

// streamEvent is one event of a response stream; fields a type lacks are
// left out.
type streamEvent struct {
	Type           string    `json:"type"`
	SequenceNumber int64     `json:"sequence_number"`
	Response       *Response `json:"response,omitempty"`
	OutputIndex    *int      `json:"output_index,omitempty"`
	ItemID         string    `json:"item_id,omitempty"`
	ContentIndex   *int      `json:"content_index,omitempty"`
	SummaryIndex   *int      `json:"summary_index,omitempty"`
	Item           any       `json:"item,omitempty"`
	Part           any       `json:"part,omitempty"`
	Delta          *string   `json:"delta,omitempty"`
	Text           *string   `json:"text,omitempty"`
	Arguments      *string   `json:"arguments,omitempty"`
	Name           string    `json:"name,omitempty"`
	Logprobs       *[]any    `json:"logprobs,omitempty"`
	// error events
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// arguments renders a call's JSON arguments as the string OpenAI sends.
// Arguments a model sent that were not JSON are stored as a JSON string
// (the engine keeps them so, and fails the call): they show as the text
// the model sent, not quoted again.
func arguments(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	if raw[0] == '"' {
		var text string
		if json.Unmarshal(raw, &text) == nil {
			return text
		}
	}
	return string(raw)
}
