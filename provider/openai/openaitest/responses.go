package openaitest

// The Responses API endpoint (POST /v1/responses) of the fake.
//
// It answers from the same queue, with the same Response builders, as
// /v1/chat/completions, rendered the way the Responses API streams:
// "event: <type>" and "data: {"type":...,"sequence_number":N,...}" pairs,
// response.created and response.in_progress first, then per output item
// output_item.added, its content (content_part.added, output_text.delta per
// Text piece, output_text.done, content_part.done for a message;
// reasoning_summary_part.added, reasoning_summary_text.delta per Reasoning
// piece, reasoning_summary_text.done, reasoning_summary_part.done for a
// reasoning item; function_call_arguments.delta in fragments and
// function_call_arguments.done for each call of ToolCalls), and
// output_item.done, and last response.completed with the usage (or
// response.incomplete when Finish is "length", reason max_output_tokens, or
// "content_filter"; Finish("") sends no terminal event). ErrorAfter ends the
// stream with response.failed (code server_error); Status, Header,
// DelayBetweenChunks, HangAfter, CutAfter and Raw apply as they do to chat
// streams, counting events.
//
// Reasoning items carry an encrypted_content when the request includes
// "reasoning.encrypted_content"; the server checks what comes back as the
// real service does: a reasoning item sent with store=false needs its
// encrypted_content, which must be one this server issued for that id, and
// must be followed by the item it led to. A function_call_output must answer
// an earlier function_call of the input and every function_call must have an
// output; function tools are strict unless "strict": false, and a strict
// tool's schema must set additionalProperties false and require every
// property. Requests are recorded as ResponsesRequests.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// ResponsesRequest is a Responses API request body the server received,
// decoded for assertions. Body keeps the exact bytes.
type ResponsesRequest struct {
	Header http.Header     `json:"-"`
	Body   json.RawMessage `json:"-"`

	Model        string `json:"model"`
	Instructions string `json:"instructions"`
	// Input is the input items; a string input is one user message.
	Input              []InputItem      `json:"-"`
	RawInput           json.RawMessage  `json:"input"`
	Tools              []ResponsesTool  `json:"tools"`
	ToolChoice         json.RawMessage  `json:"tool_choice"`
	Include            []string         `json:"include"`
	Store              *bool            `json:"store"`
	Stream             bool             `json:"stream"`
	MaxOutputTokens    *int64           `json:"max_output_tokens"`
	Temperature        *float64         `json:"temperature"`
	TopP               *float64         `json:"top_p"`
	Reasoning          *ReasoningConfig `json:"reasoning"`
	ParallelToolCalls  *bool            `json:"parallel_tool_calls"`
	PreviousResponseID string           `json:"previous_response_id"`
	Text               *TextConfig      `json:"text"`
}

// TextConfig is a Responses request's text object.
type TextConfig struct {
	Format *JSONSchema `json:"format"`
}

// ReasoningConfig is the request's reasoning object.
type ReasoningConfig struct {
	Effort  string `json:"effort"`
	Summary string `json:"summary"`
}

// ResponsesTool is a tool declared in a Responses request (function tools
// are flat: no "function" wrapper).
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// InputItem is one item of a Responses request's input. Type is "message"
// when the item only has a role.
type InputItem struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`

	// message
	Role  string `json:"role,omitempty"`
	Phase string `json:"phase,omitempty"`
	// Content is the text of a string content or the concatenated text
	// parts of an array content (for a reasoning item, its reasoning_text
	// parts); RawContent is the content as sent.
	Content    string          `json:"-"`
	RawContent json.RawMessage `json:"content,omitempty"`

	// function_call and function_call_output
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	// Output is the text of a string output (or of its text parts).
	Output    string          `json:"-"`
	RawOutput json.RawMessage `json:"output,omitempty"`

	// reasoning
	Summary          []SummaryText `json:"summary,omitempty"`
	EncryptedContent string        `json:"encrypted_content,omitempty"`
}

// SummaryText is a part of a reasoning item's summary.
type SummaryText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// UnmarshalJSON decodes an item, flattening content and output to text.
func (it *InputItem) UnmarshalJSON(b []byte) error {
	type plain InputItem
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*it = InputItem(p)
	if it.Type == "" && it.Role != "" {
		it.Type = "message"
	}
	var err error
	if it.Content, err = flatten(it.RawContent); err != nil {
		return fmt.Errorf("content: %w", err)
	}
	if it.Output, err = flatten(it.RawOutput); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// flatten returns the text of a string, or of an array of parts with text.
func flatten(raw json.RawMessage) (string, error) {
	c := strings.TrimSpace(string(raw))
	switch {
	case c == "" || c == "null":
		return "", nil
	case c[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case c[0] == '[':
		var parts []struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("must be a string, an array or null")
}

// ResponsesRequests returns the Responses API requests received so far, in
// arrival order (including those refused as invalid).
func (s *Server) ResponsesRequests() []ResponsesRequest { return s.responses.All() }

// LastResponsesRequest returns the most recent Responses API request; ok
// is false when there was none.
func (s *Server) LastResponsesRequest() (r ResponsesRequest, ok bool) { return s.responses.Last() }

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", fmt.Sprintf("Invalid method %s for /v1/responses, expected POST", r.Method))
		return
	}
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key", "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "could not read the request body: "+err.Error())
		return
	}
	var req ResponsesRequest
	err = json.Unmarshal(body, &req)
	if err == nil {
		err = req.decodeInput()
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "We could not parse the JSON body of your request. ("+err.Error()+")")
		return
	}
	if s.responses.On() {
		req.Header = r.Header.Clone()
		req.Body = body
		s.responses.Add(req)
	}
	if status, param, code, msg := req.validate(); msg != "" {
		writeError(w, status, "invalid_request_error", param, code, msg)
		return
	}

	resp := s.script.Next()

	for k, vs := range resp.header {
		w.Header()[k] = vs
	}
	if resp.status != 0 {
		s.writeStatus(w, resp, responsesOverflow)
		return
	}
	if !req.Stream {
		if resp.isRaw {
			writeError(w, http.StatusInternalServerError, "server_error", "", "", "openaitest: a Raw response can only answer a streaming request")
			return
		}
		rw := s.newResponseWriter(&req, len(body))
		rw.render(resp)
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(rw.final, '\n'))
		return
	}
	rw := s.newResponseWriter(&req, len(body))
	events := resp.raw
	if !resp.isRaw {
		rw.render(resp)
		events = rw.events
	}
	resp.delivery = resp.deliver(rw.marks, len(events))
	if n := resp.delivery.ErrAfter - 1; n >= 0 && n < len(events) {
		// The failure replaces the rest of the stream.
		rw.events, rw.seq = nil, n
		rw.fail(resp.errMsg)
		events = append(slices.Clip(events[:n]), rw.events...)
		resp.delivery.ErrAfter = 0
	}
	s.stream(w, r.Context(), resp, events)
}

func (r *ResponsesRequest) decodeInput() error {
	c := strings.TrimSpace(string(r.RawInput))
	switch {
	case c == "" || c == "null":
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(r.RawInput, &s); err != nil {
			return err
		}
		r.Input = []InputItem{{Type: "message", Role: "user", Content: s, RawContent: r.RawInput}}
	default:
		if err := json.Unmarshal(r.RawInput, &r.Input); err != nil {
			return fmt.Errorf("input: %w", err)
		}
	}
	return nil
}

var knownIncludes = []string{
	"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
	"message.input_image.image_url", "computer_call_output.output.image_url",
	"code_interpreter_call.outputs", "reasoning.encrypted_content", "message.output_text.logprobs",
}

// validate applies the checks the real API makes on a Responses request.
func (r *ResponsesRequest) validate() (status int, param, code, msg string) {
	bad := func(param, msg string) (int, string, string, string) {
		return http.StatusBadRequest, param, "", msg
	}
	if r.Model == "" {
		return bad("model", "Missing required parameter: 'model'.")
	}
	if r.Text != nil && r.Text.Format != nil {
		switch f := r.Text.Format; f.Type {
		case "text", "json_object":
		case "json_schema":
			if p, m := f.problem("text.format"); p != "" {
				return bad(p, m)
			}
		default:
			return bad("text.format.type", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'text', 'json_schema' and 'json_object'.", f.Type))
		}
	}
	if r.PreviousResponseID != "" {
		return http.StatusBadRequest, "previous_response_id", "previous_response_not_found",
			fmt.Sprintf("Previous response with id '%s' not found.", r.PreviousResponseID)
	}
	if len(r.Input) == 0 {
		return bad("input", "Missing required parameter: 'input'.")
	}
	for i, it := range r.Input {
		if it.Type == "message" {
			if param, msg := responsesContentProblem(fmt.Sprintf("input[%d]", i), it.RawContent); msg != "" {
				return bad(param, msg)
			}
		}
	}
	for i, inc := range r.Include {
		if !slices.Contains(knownIncludes, inc) {
			return bad(fmt.Sprintf("include[%d]", i), fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s'.", inc, strings.Join(knownIncludes, "', '")))
		}
	}
	for i, t := range r.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return bad(p+".type", fmt.Sprintf("Invalid value: '%s'. openaitest supports only 'function' tools.", t.Type))
		}
		if !functionNameRE.MatchString(t.Name) {
			return bad(p+".name", fmt.Sprintf("Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", p))
		}
		var schema struct {
			Type                 any             `json:"type"`
			Properties           map[string]any  `json:"properties"`
			Required             []string        `json:"required"`
			AdditionalProperties json.RawMessage `json:"additionalProperties"`
		}
		if len(t.Parameters) == 0 || json.Unmarshal(t.Parameters, &schema) != nil || schema.Type != "object" {
			return bad(p+".parameters", fmt.Sprintf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%v\"'.", t.Name, schema.Type))
		}
		if t.Strict == nil || *t.Strict {
			if strings.TrimSpace(string(schema.AdditionalProperties)) != "false" {
				return bad(p+".parameters", fmt.Sprintf("Invalid schema for function '%s': In context=(), 'additionalProperties' is required to be supplied and to be false.", t.Name))
			}
			for k := range schema.Properties {
				if !slices.Contains(schema.Required, k) {
					return bad(p+".parameters", fmt.Sprintf("Invalid schema for function '%s': In context=(), 'required' is required to be supplied and to be an array including every key in properties. Missing '%s'.", t.Name, k))
				}
			}
		}
	}
	store := r.Store == nil || *r.Store
	calls := map[string]bool{} // call_id -> answered
	var order []string
	for i, it := range r.Input {
		p := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "message":
			switch it.Role {
			case "user", "assistant", "system", "developer":
			default:
				return bad(p+".role", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'user', 'assistant', 'system', and 'developer'.", it.Role))
			}
			if c := strings.TrimSpace(string(it.RawContent)); c == "" || c == "null" {
				return bad(p+".content", fmt.Sprintf("Missing required parameter: '%s.content'.", p))
			}
		case "function_call":
			if it.CallID == "" {
				return bad(p+".call_id", fmt.Sprintf("Missing required parameter: '%s.call_id'.", p))
			}
			if it.Name == "" {
				return bad(p+".name", fmt.Sprintf("Missing required parameter: '%s.name'.", p))
			}
			if _, ok := calls[it.CallID]; !ok {
				order = append(order, it.CallID)
			}
			calls[it.CallID] = false
		case "function_call_output":
			if it.CallID == "" {
				return bad(p+".call_id", fmt.Sprintf("Missing required parameter: '%s.call_id'.", p))
			}
			if _, ok := calls[it.CallID]; !ok {
				return bad("input", fmt.Sprintf("No tool call found for function call output with call_id %s.", it.CallID))
			}
			calls[it.CallID] = true
		case "reasoning":
			if it.ID == "" {
				return bad(p+".id", fmt.Sprintf("Missing required parameter: '%s.id'.", p))
			}
			if it.EncryptedContent == "" {
				m := fmt.Sprintf("Item with id '%s' not found.", it.ID)
				if !store {
					m += " Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."
				}
				return http.StatusNotFound, "input", "", m
			}
			if it.EncryptedContent != EncryptedContent(it.ID) {
				return http.StatusBadRequest, "input", "invalid_encrypted_content",
					fmt.Sprintf("The encrypted content for item %s could not be verified.", it.ID)
			}
			if i+1 == len(r.Input) || !followsReasoning(r.Input[i+1]) {
				return bad("input", fmt.Sprintf("Item '%s' of type 'reasoning' was provided without its required following item.", it.ID))
			}
		default:
			return bad(p+".type", fmt.Sprintf("Invalid value: '%s'. openaitest supports 'message', 'function_call', 'function_call_output' and 'reasoning' items.", it.Type))
		}
	}
	for _, id := range order {
		if !calls[id] {
			return bad("input", fmt.Sprintf("No tool output found for function call %s.", id))
		}
	}
	return 0, "", "", ""
}

func followsReasoning(it InputItem) bool {
	return it.Type == "function_call" || (it.Type == "message" && it.Role == "assistant")
}

// EncryptedContent is the opaque reasoning state the server issues for a
// reasoning item id, and the only one it accepts back for that id.
func EncryptedContent(id string) string {
	return "gAAAAA" + base64.RawURLEncoding.EncodeToString([]byte("openaitest reasoning state of "+id))
}

// responseWriter renders the events of one response.
type responseWriter struct {
	s        *Server
	req      *ResponsesRequest
	bodyLen  int
	id       string
	created  int64
	seq      int
	events   [][]byte
	output   [][]byte // the done items, for the final response object
	final    []byte   // the final response object
	outChars int
	marks    fakeapi.Marks
}

func (s *Server) newResponseWriter(req *ResponsesRequest, bodyLen int) *responseWriter {
	return &responseWriter{s: s, req: req, bodyLen: bodyLen,
		id: fmt.Sprintf("resp_otest%022d", s.seq.Add(1)), created: s.created}
}

// event appends "event: typ" with data {"type":typ,"sequence_number":N,fields}.
func (w *responseWriter) event(typ string, fields ...[]byte) {
	n := 0
	for _, f := range fields {
		n += len(f)
	}
	b := make([]byte, 0, 2*len(typ)+n+64)
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(w.seq), 10)
	w.seq++
	for _, f := range fields {
		b = append(b, f...)
	}
	b = append(b, "}\n\n"...)
	w.events = append(w.events, b)
}

func (w *responseWriter) newID(prefix string) string {
	return fmt.Sprintf("%s_otest%022d", prefix, w.s.seq.Add(1))
}

// obfuscation is the padding field OpenAI adds to delta events.
func obfuscation(b []byte, delta string) []byte {
	const alphabet = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	n := 16 - len(delta)%16
	b = append(b, `,"obfuscation":"`...)
	for i := range n {
		b = append(b, alphabet[(i*7+len(delta))%len(alphabet)])
	}
	return append(b, '"')
}

func (w *responseWriter) itemEvent(typ string, index int, item []byte) {
	b := []byte(`,"output_index":`)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"item":`...)
	w.event(typ, b, item)
}

// itemRef is `,"item_id":"...","output_index":N`.
func itemRef(id string, index int) []byte {
	b := appendString([]byte(`,"item_id":`), id)
	b = append(b, `,"output_index":`...)
	return strconv.AppendInt(b, int64(index), 10)
}

func (w *responseWriter) render(resp Response) {
	created := w.object("in_progress", nil, nil, "", nil)
	w.event("response.created", []byte(`,"response":`), created)
	w.event("response.in_progress", []byte(`,"response":`), created)
	encrypted := slices.Contains(w.req.Include, "reasoning.encrypted_content")
	index := 0
	for _, it := range resp.items {
		switch it.kind {
		case itemText:
			w.message(index, it.pieces)
			index++
		case itemReasoning:
			w.reasoning(index, it.pieces, encrypted)
			index++
		case itemCalls:
			for _, c := range it.calls {
				w.call(index, c)
				index++
			}
		}
	}
	t := Tokens{Input: max(1, w.bodyLen/4), Output: max(1, w.outChars/4)}
	if resp.tokens != nil {
		t = *resp.tokens
	}
	finish := "stop"
	if resp.finish != nil {
		finish = *resp.finish
	}
	if resp.unfinished {
		finish = ""
	}
	w.marks.Finish = len(w.events)
	defer func() { w.marks.Finished = len(w.events) }()
	switch finish {
	case "":
		// No terminal event: the stream just ends.
		w.final = w.object("in_progress", w.output, nil, "", nil)
	case "length", "max_output_tokens":
		w.final = w.object("incomplete", w.output, &t, "max_output_tokens", nil)
		w.event("response.incomplete", []byte(`,"response":`), w.final)
	case "content_filter":
		w.final = w.object("incomplete", w.output, &t, "content_filter", nil)
		w.event("response.incomplete", []byte(`,"response":`), w.final)
	default:
		w.final = w.object("completed", w.output, &t, "", nil)
		w.event("response.completed", []byte(`,"response":`), w.final)
	}
}

func (w *responseWriter) message(index int, pieces []string) {
	id := w.newID("msg")
	head := slices.Clip(appendString([]byte(`{"id":`), id))
	w.itemEvent("response.output_item.added", index, append(head, `,"type":"message","status":"in_progress","content":[],"role":"assistant"}`...))
	ref := itemRef(id, index)
	ref = append(ref, `,"content_index":0`...)
	w.event("response.content_part.added", ref, []byte(`,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`))
	var text strings.Builder
	for _, p := range pieces {
		d := appendString([]byte(`,"delta":`), p)
		d = append(d, `,"logprobs":[]`...)
		w.event("response.output_text.delta", ref, obfuscation(d, p))
		w.marks.Delta(len(w.events))
		text.WriteString(p)
	}
	w.outChars += text.Len()
	w.event("response.output_text.done", ref, appendString([]byte(`,"text":`), text.String(), []byte(`,"logprobs":[]`)...))
	part := appendString([]byte(`{"type":"output_text","annotations":[],"logprobs":[],"text":`), text.String(), '}')
	w.event("response.content_part.done", ref, []byte(`,"part":`), part)
	item := append(head, `,"type":"message","status":"completed","content":[`...)
	item = append(item, part...)
	item = append(item, `],"role":"assistant"}`...)
	w.itemEvent("response.output_item.done", index, item)
	w.output = append(w.output, item)
}

func (w *responseWriter) reasoning(index int, pieces []string, encrypted bool) {
	id := w.newID("rs")
	head := appendString([]byte(`{"id":`), id)
	head = slices.Clip(append(head, `,"type":"reasoning"`...))
	w.itemEvent("response.output_item.added", index, append(head, `,"summary":[]}`...))
	ref := itemRef(id, index)
	ref = append(ref, `,"summary_index":0`...)
	var text strings.Builder
	if len(pieces) > 0 {
		w.event("response.reasoning_summary_part.added", ref, []byte(`,"part":{"type":"summary_text","text":""}`))
		for _, p := range pieces {
			w.event("response.reasoning_summary_text.delta", ref, obfuscation(appendString([]byte(`,"delta":`), p), p))
			w.marks.Delta(len(w.events))
			text.WriteString(p)
		}
		w.event("response.reasoning_summary_text.done", ref, appendString([]byte(`,"text":`), text.String()))
		w.event("response.reasoning_summary_part.done", ref, appendString([]byte(`,"part":{"type":"summary_text","text":`), text.String(), '}'))
	}
	w.outChars += text.Len()
	item := head
	if encrypted {
		item = appendString(append(item, `,"encrypted_content":`...), EncryptedContent(id))
	}
	item = append(item, `,"summary":[`...)
	if len(pieces) > 0 {
		item = appendString(append(item, `{"type":"summary_text","text":`...), text.String(), '}')
	}
	item = append(item, "]}"...)
	w.itemEvent("response.output_item.done", index, item)
	w.output = append(w.output, item)
}

func (w *responseWriter) call(index int, c Call) {
	id := w.newID("fc")
	if c.ID == "" {
		c.ID = fmt.Sprintf("call_otest%014d", w.s.seq.Add(1))
	}
	args := c.Args
	if args == "" {
		args = "{}"
	}
	w.outChars += len(c.Name) + len(args)
	item := func(status, args string) []byte {
		b := appendString([]byte(`{"id":`), id)
		b = append(b, `,"type":"function_call","status":`...)
		b = appendString(b, status)
		b = appendString(append(b, `,"arguments":`...), args)
		b = appendString(append(b, `,"call_id":`...), c.ID)
		b = appendString(append(b, `,"name":`...), c.Name)
		return append(b, '}')
	}
	w.itemEvent("response.output_item.added", index, item("in_progress", ""))
	ref := itemRef(id, index)
	for _, frag := range fakeapi.Fragments(args, 7) {
		w.event("response.function_call_arguments.delta", ref, obfuscation(appendString([]byte(`,"delta":`), frag), frag))
	}
	w.event("response.function_call_arguments.done", ref, appendString([]byte(`,"arguments":`), args))
	done := item("completed", args)
	w.itemEvent("response.output_item.done", index, done)
	w.output = append(w.output, done)
}

// fail appends a response.failed event.
func (w *responseWriter) fail(msg string) {
	e := appendString([]byte(`{"code":"server_error","message":`), msg, '}')
	w.final = w.object("failed", nil, nil, "", e)
	w.event("response.failed", []byte(`,"response":`), w.final)
}

// object renders a response object.
func (w *responseWriter) object(status string, output [][]byte, usage *Tokens, incomplete string, errObj []byte) []byte {
	r := w.req
	b := make([]byte, 0, 1024)
	b = appendString(append(b, `{"id":`...), w.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, w.created, 10)
	b = appendString(append(b, `,"status":`...), status)
	b = append(b, `,"background":false,"error":`...)
	if errObj != nil {
		b = append(b, errObj...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if incomplete != "" {
		b = appendString(append(b, `{"reason":`...), incomplete, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	b = appendNullable(b, r.Instructions)
	b = append(b, `,"max_output_tokens":`...)
	if r.MaxOutputTokens != nil {
		b = strconv.AppendInt(b, *r.MaxOutputTokens, 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_tool_calls":null,"model":`...)
	b = appendString(b, r.Model)
	b = append(b, `,"output":[`...)
	for i, it := range output {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	b = append(b, `],"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, r.ParallelToolCalls == nil || *r.ParallelToolCalls)
	b = append(b, `,"previous_response_id":null,"prompt_cache_key":null,"reasoning":{"effort":`...)
	var effort, summary string
	if r.Reasoning != nil {
		effort, summary = r.Reasoning.Effort, r.Reasoning.Summary
	}
	b = appendNullable(b, effort)
	b = append(b, `,"summary":`...)
	b = appendNullable(b, summary)
	b = append(b, `},"safety_identifier":null,"service_tier":"default","store":`...)
	b = strconv.AppendBool(b, r.Store == nil || *r.Store)
	b = append(b, `,"temperature":`...)
	temp := 1.0
	if r.Temperature != nil {
		temp = *r.Temperature
	}
	b = strconv.AppendFloat(b, temp, 'f', -1, 64)
	if temp == float64(int64(temp)) {
		b = append(b, ".0"...)
	}
	b = append(b, `,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":`...)
	if tools, err := json.Marshal(r.Tools); err == nil && len(r.Tools) > 0 {
		b = append(b, tools...)
	} else {
		b = append(b, "[]"...)
	}
	b = append(b, `,"top_logprobs":0,"top_p":`...)
	topP := 1.0
	if r.TopP != nil {
		topP = *r.TopP
	}
	b = strconv.AppendFloat(b, topP, 'f', -1, 64)
	if topP == float64(int64(topP)) {
		b = append(b, ".0"...)
	}
	b = append(b, `,"truncation":"disabled","usage":`...)
	if usage != nil {
		t := *usage
		b = append(b, `{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(t.Input), 10)
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(t.Cached), 10)
		b = append(b, `},"output_tokens":`...)
		b = strconv.AppendInt(b, int64(t.Output), 10)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(t.Reasoning), 10)
		b = append(b, `},"total_tokens":`...)
		b = strconv.AppendInt(b, int64(t.Input+t.Output), 10)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	return append(b, `,"user":null,"metadata":{}}`...)
}
