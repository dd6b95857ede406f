package openai

// The OpenAI Responses API provider (POST /v1/responses), stateless: every
// request carries the whole history with store=false, so no response is
// kept on OpenAI's side and previous_response_id is never used.
//
// Request mapping: the system prompt is instructions; user text becomes
// user messages; an assistant message becomes, in part order, reasoning
// items (only those carrying the id and encrypted_content this provider
// kept on the part, and only when an item of the same message follows
// them, as the API requires), one assistant message per run of text parts
// and function_call items (call_id is the part's CallID); tool results
// become function_call_output items. Tools are function tools with
// strict=false. When Params.ReasoningEffort is set (and not "none"), the
// request asks for reasoning summaries ("auto") and for
// include=["reasoning.encrypted_content"], which is what lets a stateless
// request hand the model its earlier reasoning back.
//
// Stream normalization: output_text (and refusal) deltas are text
// start/delta/end per output item; reasoning summary deltas (or
// reasoning_text deltas, from servers that expose raw reasoning; the first
// kind seen in an item wins) are reasoning start/delta/end per reasoning
// item, summary parts separated by a blank line, and ReasoningEnd carries
// {"id","encrypted_content"} as Provider data. A reasoning item with
// encrypted content but no summary still yields an empty reasoning part
// with that data, so it round-trips. Function call arguments are
// accumulated and each call is emitted once, complete, at its
// response.output_item.done (calls still open when the response ends
// incomplete are emitted with what arrived). response.completed and
// response.incomplete give the finish reason and usage; response.failed
// and error events are *forge.ModelError. Events are read with gjson in
// one pass rather than decoded into the SDK's ResponseStreamEventUnion
// (see BenchmarkResponsesEventDecode), as the Chat Completions provider
// does.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/wire"
)

// ResponsesProvider makes Responses API calls for any model id.
type ResponsesProvider struct {
	name    string
	baseURL string // for error messages, without a password
	svc     responses.ResponseService
}

// NewResponses returns a Responses API provider for cfg (the same Config
// as New; nothing is read from the environment).
func NewResponses(cfg Config) *ResponsesProvider {
	cfg, opts := cfg.requestOptions()
	// NewResponseService, unlike NewClient, reads no environment.
	return &ResponsesProvider{name: cfg.Name, baseURL: wire.DisplayURL(cfg.BaseURL), svc: responses.NewResponseService(opts...)}
}

// Name is the provider's name.
func (p *ResponsesProvider) Name() string { return p.name }

// Model returns the model id (sent verbatim; ModelRequest.Model, when set,
// takes precedence).
func (p *ResponsesProvider) Model(id string) forge.Model { return &responsesModel{p: p, id: id} }

type responsesModel struct {
	p  *ResponsesProvider
	id string
}

// reasoningData is the Provider data of a reasoning part.
type reasoningData struct {
	ID               string `json:"id"`
	EncryptedContent string `json:"encrypted_content"`
}

// textData is the Provider data of a text part, kept only when the message
// had a phase (models that label commentary and final answers want it
// back).
type textData struct {
	Phase string `json:"phase"`
}

// Stream implements forge.Model.
func (m *responsesModel) Stream(ctx context.Context, req *forge.ModelRequest) iter.Seq2[forge.ModelEvent, error] {
	return func(yield func(forge.ModelEvent, error) bool) {
		p := m.p
		id := req.Model
		if id == "" {
			id = m.id
		}
		params, err := buildResponsesParams(id, req)
		if err != nil {
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name, Message: err.Error()})
			return
		}
		// The request NewStreaming makes, with the body left to us: the
		// events are read with gjson, not decoded into the SDK's union.
		wait := forge.ReportWaits(ctx)
		wait() // for the answer
		var res *http.Response
		_, err = p.svc.New(ctx, params,
			option.WithJSONSet("stream", true),
			option.WithResponseBodyInto(&res))
		if err != nil {
			yield(forge.ModelEvent{}, requestError(ctx, p.name, res, err))
			return
		}
		defer res.Body.Close()
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "application/json" {
			yield(forge.ModelEvent{}, jsonBodyError(ctx, p.name, res))
			return
		}
		body := wire.NewWaitingBody(res.Body, wait)
		res.Body = body
		dec := ssestream.NewDecoder(res)
		defer dec.Close()
		s := responsesState{p: p, yield: yield}
		var ev rsEvent
		for dec.Next() {
			e := dec.Event()
			if bytes.HasPrefix(e.Data, doneData) {
				break // not OpenAI's, but some proxies end with it
			}
			if err := ev.parse(e.Data); err != nil {
				yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name,
					Message: fmt.Sprintf("%v: %.200q", err, e.Data)})
				return
			}
			if ev.typ == "" {
				ev.typ = e.Type
			}
			if !s.event(&ev) {
				return
			}
			if s.err != nil {
				yield(forge.ModelEvent{}, s.err)
				return
			}
			if s.done {
				break
			}
		}
		if ctx.Err() != nil {
			yield(forge.ModelEvent{}, ctx.Err())
			return
		}
		if !s.done {
			msg := wire.StreamCut(p.baseURL, id, dec.Err(), []string{"response.completed"})
			yield(forge.ModelEvent{}, &forge.ModelError{Provider: p.name, Message: msg, Retryable: true})
			return
		}
		// Read the body to its end (briefly) so the connection is reused.
		body.Stop()
		t := time.AfterFunc(time.Second, func() { res.Body.Close() })
		io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		t.Stop()
		yield(forge.ModelEvent{Type: forge.FinishEvent, Finish: &forge.Finish{
			Reason: s.finishReason(), Usage: s.usage}}, nil)
	}
}

// rsEvent is what the provider reads of one Responses stream event.
// Strings are views of the event data, valid until the next event.
type rsEvent struct {
	typ          string
	itemID       string
	delta        string
	arguments    string
	outputIndex  int64
	summaryIndex int64
	contentIndex int64
	item         gjson.Result
	response     gjson.Result
	// error events
	code, message, errType string
	errObj                 gjson.Result
}

// parse reads data into e in one pass, without validating all of it (a
// cut event fails the brace check).
func (e *rsEvent) parse(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return errMalformed
	}
	*e = rsEvent{}
	raw := unsafe.String(unsafe.SliceData(data), len(data))
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			e.typ = v.Str
		case "item_id":
			e.itemID = v.Str
		case "delta":
			e.delta = v.Str
		case "arguments":
			e.arguments = v.Str
		case "output_index":
			e.outputIndex = v.Int()
		case "summary_index":
			e.summaryIndex = v.Int()
		case "content_index":
			e.contentIndex = v.Int()
		case "item":
			e.item = v
		case "response":
			e.response = v
		case "code":
			e.code = v.String()
		case "message":
			e.message = v.Str
		case "error":
			e.errObj = v
		}
		return true
	})
	return nil
}

// key identifies the output item an event is about: its id, or its
// output index for servers that send no ids.
func (e *rsEvent) key(id string) string {
	if id != "" {
		return id
	}
	return "#" + strconv.FormatInt(e.outputIndex, 10)
}

type rsCall struct {
	itemID   string
	callID   string
	name     string
	args     []byte
	argsDone bool // args are the final arguments
	emitted  bool
}

// responsesState turns events into forge events.
type responsesState struct {
	p     *ResponsesProvider
	yield func(forge.ModelEvent, error) bool

	open     int    // blockNone, blockText or blockReasoning
	openItem string // the item the open block belongs to
	// reasoning block: which delta kind feeds it (1 summary, 2 raw text)
	// and the summary/content index of the last delta
	rKind  int
	rIndex int64
	opened map[string]bool // items that had a block (for done fallbacks)

	calls   []*rsCall
	emitted int // calls emitted

	status     string // completed, incomplete
	incomplete string // incomplete_details.reason
	usage      forge.Usage
	done       bool
	err        error
}

func (s *responsesState) emit(t forge.ModelEventType, delta string) bool {
	return s.yield(forge.ModelEvent{Type: t, Delta: delta}, nil)
}

// enter makes b, for item, the open block.
func (s *responsesState) enter(b int, item string) bool {
	if s.open == b && s.openItem == item {
		return true
	}
	if !s.close(nil) {
		return false
	}
	s.open, s.openItem = b, strings.Clone(item)
	s.rKind, s.rIndex = 0, 0
	if s.opened == nil {
		s.opened = map[string]bool{}
	}
	s.opened[s.openItem] = true
	if b == blockText {
		return s.emit(forge.TextStart, "")
	}
	return s.emit(forge.ReasoningStart, "")
}

// close ends the open block, with provider data on its end event.
func (s *responsesState) close(provider json.RawMessage) bool {
	open := s.open
	s.open, s.openItem = blockNone, ""
	switch open {
	case blockText:
		return s.yield(forge.ModelEvent{Type: forge.TextEnd, Provider: provider}, nil)
	case blockReasoning:
		return s.yield(forge.ModelEvent{Type: forge.ReasoningEnd, Provider: provider}, nil)
	}
	return true
}

func (s *responsesState) call(itemID string) *rsCall {
	for i := len(s.calls) - 1; i >= 0; i-- {
		if s.calls[i].itemID == itemID {
			return s.calls[i]
		}
	}
	c := &rsCall{itemID: strings.Clone(itemID)}
	s.calls = append(s.calls, c)
	return c
}

// event handles one event; false means the consumer stopped. A failure
// is left in s.err.
func (s *responsesState) event(ev *rsEvent) bool {
	switch ev.typ {
	case "response.output_text.delta", "response.refusal.delta":
		if ev.delta == "" {
			return true
		}
		return s.enter(blockText, ev.key(ev.itemID)) && s.emit(forge.TextDelta, strings.Clone(ev.delta))
	case "response.reasoning_summary_text.delta":
		return s.reasoningDelta(ev.key(ev.itemID), 1, ev.summaryIndex, ev.delta)
	case "response.reasoning_text.delta":
		return s.reasoningDelta(ev.key(ev.itemID), 2, ev.contentIndex, ev.delta)
	case "response.output_item.added":
		if ev.item.Get("type").Str == "function_call" {
			c := s.call(ev.key(ev.item.Get("id").Str))
			c.callID = strings.Clone(ev.item.Get("call_id").Str)
			c.name = strings.Clone(ev.item.Get("name").Str)
			c.args = append(c.args[:0], ev.item.Get("arguments").Str...)
		}
	case "response.function_call_arguments.delta":
		c := s.call(ev.key(ev.itemID))
		if !c.argsDone {
			c.args = append(c.args, ev.delta...)
		}
	case "response.function_call_arguments.done":
		c := s.call(ev.key(ev.itemID))
		c.args = append(c.args[:0], ev.arguments...)
		c.argsDone = true
	case "response.output_item.done":
		return s.itemDone(ev, ev.item)
	case "response.completed", "response.incomplete":
		r := ev.response
		s.status = "completed"
		if ev.typ == "response.incomplete" || r.Get("status").Str == "incomplete" {
			s.status = "incomplete"
			s.incomplete = strings.Clone(r.Get("incomplete_details.reason").Str)
		}
		if u := r.Get("usage"); u.IsObject() {
			s.usage = forge.Usage{
				InputTokens:     u.Get("input_tokens").Int(),
				OutputTokens:    u.Get("output_tokens").Int(),
				CacheReadTokens: u.Get("input_tokens_details.cached_tokens").Int(),
				ReasoningTokens: u.Get("output_tokens_details.reasoning_tokens").Int(),
			}
		}
		s.done = true
		return s.flush()
	case "response.failed":
		e := ev.response.Get("error")
		msg := e.Get("message").Str
		if msg == "" {
			msg = "the response failed"
		}
		s.err = s.p.failure(e.Get("code").String(), e.Get("type").Str, msg)
	case "error":
		code, typ, msg := ev.code, "", ev.message
		if ev.errObj.IsObject() {
			code, typ, msg = ev.errObj.Get("code").String(), ev.errObj.Get("type").Str, ev.errObj.Get("message").Str
		}
		if msg == "" {
			msg = "error event without a message"
		}
		s.err = s.p.failure(code, typ, msg)
	}
	return true
}

func (s *responsesState) reasoningDelta(item string, kind int, index int64, delta string) bool {
	if delta == "" {
		return true
	}
	if !s.enter(blockReasoning, item) {
		return false
	}
	if s.rKind != 0 && s.rKind != kind {
		return true // the item is fed by the other kind
	}
	sep := s.rKind != 0 && index != s.rIndex
	s.rKind, s.rIndex = kind, index
	if sep && kind == 1 && !s.emit(forge.ReasoningDelta, "\n\n") {
		return false
	}
	return s.emit(forge.ReasoningDelta, strings.Clone(delta))
}

// itemDone ends an output item: closes its block, or emits its call.
func (s *responsesState) itemDone(ev *rsEvent, item gjson.Result) bool {
	id := ev.key(item.Get("id").Str)
	switch item.Get("type").Str {
	case "message":
		var provider json.RawMessage
		if phase := item.Get("phase").Str; phase != "" {
			provider, _ = json.Marshal(textData{Phase: phase})
		}
		if s.open == blockText && s.openItem == id {
			return s.close(provider)
		}
		if s.opened[id] {
			return true
		}
		// No deltas were streamed for it: take the text from the item.
		var text strings.Builder
		item.Get("content").ForEach(func(_, c gjson.Result) bool {
			switch c.Get("type").Str {
			case "output_text":
				text.WriteString(c.Get("text").Str)
			case "refusal":
				text.WriteString(c.Get("refusal").Str)
			}
			return true
		})
		if text.Len() == 0 {
			return true
		}
		return s.enter(blockText, id) && s.emit(forge.TextDelta, text.String()) && s.close(provider)
	case "reasoning":
		var provider json.RawMessage
		if enc, rid := item.Get("encrypted_content").Str, item.Get("id").Str; enc != "" && rid != "" {
			provider, _ = json.Marshal(reasoningData{ID: rid, EncryptedContent: enc})
		}
		if s.open == blockReasoning && s.openItem == id {
			return s.close(provider)
		}
		if s.opened[id] && provider == nil {
			return true
		}
		var parts []string
		if !s.opened[id] {
			for _, field := range [2]string{"summary", "content"} {
				item.Get(field).ForEach(func(_, c gjson.Result) bool {
					if t := c.Get("text").Str; t != "" {
						parts = append(parts, t)
					}
					return true
				})
				if len(parts) > 0 {
					break
				}
			}
		}
		if len(parts) == 0 && provider == nil {
			return true
		}
		if !s.enter(blockReasoning, id) {
			return false
		}
		if text := strings.Join(parts, "\n\n"); text != "" && !s.emit(forge.ReasoningDelta, text) {
			return false
		}
		return s.close(provider)
	case "function_call":
		c := s.call(id)
		if args := item.Get("arguments"); args.Type == gjson.String {
			c.args = append(c.args[:0], args.Str...)
		}
		if v := item.Get("call_id").Str; v != "" {
			c.callID = strings.Clone(v)
		}
		if v := item.Get("name").Str; v != "" {
			c.name = strings.Clone(v)
		}
		if !s.close(nil) {
			return false
		}
		return s.emitCall(c)
	}
	return true
}

func (s *responsesState) emitCall(c *rsCall) bool {
	if c.emitted {
		return true
	}
	c.emitted = true
	s.emitted++
	id := c.callID
	if id == "" && !strings.HasPrefix(c.itemID, "#") {
		id = c.itemID
	}
	if id == "" {
		id = "call_" + strconv.FormatUint(uint64(time.Now().UnixNano()), 36) + strconv.FormatUint(callSeq.Add(1), 36)
	}
	args := json.RawMessage(c.args)
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	return s.yield(forge.ModelEvent{Type: forge.ToolCallEvent,
		ToolCall: &forge.ToolCall{ID: id, Name: c.name, Arguments: args}}, nil)
}

// flush closes the open block and emits the calls not yet emitted (those
// a truncated response left open).
func (s *responsesState) flush() bool {
	if !s.close(nil) {
		return false
	}
	for _, c := range s.calls {
		if c.name == "" && len(c.args) == 0 {
			continue
		}
		if !s.emitCall(c) {
			return false
		}
	}
	return true
}

func (s *responsesState) finishReason() string {
	if s.status == "incomplete" {
		if s.incomplete == "content_filter" {
			return forge.FinishFilter
		}
		// max_output_tokens, or any other cut.
		return forge.FinishLength
	}
	if s.emitted > 0 {
		return forge.FinishToolCalls
	}
	return forge.FinishStop
}

// failure converts a response.failed or error event.
func (p *ResponsesProvider) failure(code, typ, msg string) *forge.ModelError {
	e := &forge.ModelError{Provider: p.name, Message: msg}
	switch {
	case isQuotaError(code, typ):
		// Not retryable: retrying cannot help.
		e.Message = quotaMessage(msg, code, typ)
		return e
	case isContextOverflow(code, typ, msg):
		e.ContextOverflow = true
	case code == "rate_limit_exceeded" || typ == "rate_limit_error" || typ == "tokens" || typ == "requests":
		e.Retryable = true
		e.RetryAfter = retryAfterMessage(msg)
	case code == "server_error" || typ == "server_error" || code == "server_is_overloaded" || code == "slow_down":
		e.Retryable = true
	}
	if code != "" && !strings.Contains(msg, code) {
		e.Message = msg + " (" + code + ")"
	}
	return e
}

// reasoningOn tells whether the request asks for reasoning.
func reasoningOn(mp forge.ModelParams) bool {
	return mp.ReasoningEffort != "" && mp.ReasoningEffort != "none"
}

// buildResponsesParams maps a forge request onto the wire.
func buildResponsesParams(model string, req *forge.ModelRequest) (responses.ResponseNewParams, error) {
	items := make(responses.ResponseInputParam, 0, len(req.Messages)+len(req.Messages)/2)
	for i, m := range req.Messages {
		switch m.Role {
		case forge.RoleUser:
			var texts []string
			for _, part := range m.Parts {
				if part.Type == forge.ModelPartText {
					texts = append(texts, part.Text)
				}
			}
			msg := &responses.EasyInputMessageParam{Role: responses.EasyInputMessageRoleUser, Type: responses.EasyInputMessageTypeMessage}
			switch {
			case countFiles(m.Parts) > 0:
				msg.Content.OfInputItemContentList = responsesContent(m.Parts)
			case len(texts) == 0:
				continue
			case len(texts) == 1:
				msg.Content.OfString = sdk.String(texts[0])
			default:
				list := make(responses.ResponseInputMessageContentListParam, len(texts))
				for j, t := range texts {
					list[j] = responses.ResponseInputContentParamOfInputText(t)
				}
				msg.Content.OfInputItemContentList = list
			}
			items = append(items, responses.ResponseInputItemUnionParam{OfMessage: msg})
		case forge.RoleAssistant:
			items = appendAssistant(items, m.Parts)
		case forge.RoleTool:
			for _, part := range m.Parts {
				if part.Type != forge.ModelPartToolResult {
					continue
				}
				out := &responses.ResponseInputItemFunctionCallOutputParam{CallID: sdk.String(part.CallID), Output: responsesOutput(part)}
				items = append(items, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: out})
			}
		default:
			return responses.ResponseNewParams{}, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	params := responses.ResponseNewParams{
		Model: shared.ResponsesModel(model),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items},
		Store: sdk.Bool(false),
	}
	if req.System != "" {
		params.Instructions = sdk.String(req.System)
	}
	for _, t := range req.Tools {
		schema, err := toolParameters(t.InputSchema)
		if err != nil {
			return responses.ResponseNewParams{}, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		fn := &responses.FunctionToolParam{Name: t.Name, Parameters: schema, Strict: sdk.Bool(false)}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: fn})
	}
	mp := req.Params
	if mp.MaxTokens != nil {
		params.MaxOutputTokens = sdk.Int(*mp.MaxTokens)
	}
	if mp.Temperature != nil {
		params.Temperature = sdk.Float(*mp.Temperature)
	}
	if mp.TopP != nil {
		params.TopP = sdk.Float(*mp.TopP)
	}
	if mp.ReasoningEffort != "" {
		params.Reasoning.Effort = shared.ReasoningEffort(mp.ReasoningEffort)
		if reasoningOn(mp) {
			params.Reasoning.Summary = shared.ReasoningSummaryAuto
			params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
		}
	}
	if os := req.OutputSchema; os != nil {
		schema, err := schemaObject(os.Schema)
		if err != nil {
			return responses.ResponseNewParams{}, err
		}
		params.Text.Format.OfJSONSchema = &responses.ResponseFormatTextJSONSchemaConfigParam{
			Name: os.Name, Schema: schema, Strict: sdk.Bool(os.Strict)}
	}
	return params, nil
}

// schemaObject is an output schema for the SDK: its members kept as raw
// JSON (the SDK would write a json.Number as a string).
func schemaObject(schema json.RawMessage) (map[string]any, error) {
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

// appendAssistant adds an assistant message's items in part order.
func appendAssistant(items responses.ResponseInputParam, parts []forge.ModelPart) responses.ResponseInputParam {
	var (
		text    strings.Builder
		inText  bool
		phase   string
		pending []*responses.ResponseReasoningItemParam // reasoning awaiting a following item
	)
	// push adds an item, after the reasoning items waiting for it.
	push := func(it responses.ResponseInputItemUnionParam) {
		for _, r := range pending {
			items = append(items, responses.ResponseInputItemUnionParam{OfReasoning: r})
		}
		pending = pending[:0]
		items = append(items, it)
	}
	endText := func() {
		if !inText {
			return
		}
		inText = false
		if text.Len() == 0 {
			return
		}
		msg := &responses.EasyInputMessageParam{Role: responses.EasyInputMessageRoleAssistant,
			Type: responses.EasyInputMessageTypeMessage}
		msg.Content.OfString = sdk.String(text.String())
		if phase != "" {
			msg.Phase = responses.EasyInputMessagePhase(phase)
		}
		text.Reset()
		phase = ""
		push(responses.ResponseInputItemUnionParam{OfMessage: msg})
	}
	for _, part := range parts {
		switch part.Type {
		case forge.ModelPartText:
			if !inText {
				inText = true
				var td textData
				if len(part.Provider) > 0 && json.Unmarshal(part.Provider, &td) == nil &&
					(td.Phase == "commentary" || td.Phase == "final_answer") {
					phase = td.Phase
				}
			}
			text.WriteString(part.Text)
		case forge.ModelPartReasoning:
			endText()
			var rd reasoningData
			if len(part.Provider) == 0 || json.Unmarshal(part.Provider, &rd) != nil ||
				rd.ID == "" || rd.EncryptedContent == "" {
				// Without its encrypted content a stateless request
				// cannot refer to it: reasoning from another provider,
				// or from a call made without reasoning.
				continue
			}
			r := &responses.ResponseReasoningItemParam{ID: rd.ID,
				Summary:          []responses.ResponseReasoningItemSummaryParam{},
				EncryptedContent: sdk.String(rd.EncryptedContent)}
			if part.Text != "" {
				r.Summary = append(r.Summary, responses.ResponseReasoningItemSummaryParam{Text: part.Text})
			}
			pending = append(pending, r)
		case forge.ModelPartToolCall:
			endText()
			args := string(part.Arguments)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			push(responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
				CallID: part.CallID, Name: part.Name, Arguments: args}})
		}
	}
	endText()
	// Reasoning left without a following item is dropped: the API refuses
	// a reasoning item without the item it led to.
	return items
}
