package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/forge-runtime/forge"
)

// sdkParams is how this provider mapped a request onto the SDK's params
// before it wrote the body itself (body.go): the reference the written
// body is checked against.
func sdkParams(model string, req *forge.ModelRequest) (sdk.ChatCompletionNewParams, error) {
	msgs := make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, sdk.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		var texts []string
		var calls []sdk.ChatCompletionMessageToolCallUnionParam
		for _, part := range m.Parts {
			switch part.Type {
			case forge.ModelPartText:
				texts = append(texts, part.Text)
			case forge.ModelPartToolCall:
				args := string(part.Arguments)
				if strings.TrimSpace(args) == "" {
					args = "{}"
				}
				calls = append(calls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID: part.CallID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: part.Name, Arguments: args},
					}})
			case forge.ModelPartToolResult:
				msgs = append(msgs, sdk.ToolMessage(part.Output, part.CallID))
			case forge.ModelPartReasoning:
				// Chat Completions takes no reasoning back.
			}
		}
		switch m.Role {
		case forge.RoleUser:
			switch {
			case len(texts) == 1:
				msgs = append(msgs, sdk.UserMessage(texts[0]))
			case len(texts) > 1:
				parts := make([]sdk.ChatCompletionContentPartUnionParam, len(texts))
				for j, t := range texts {
					parts[j] = sdk.TextContentPart(t)
				}
				msgs = append(msgs, sdk.UserMessage(parts))
			}
		case forge.RoleAssistant:
			a := &sdk.ChatCompletionAssistantMessageParam{ToolCalls: calls}
			if text := strings.Join(texts, ""); text != "" || len(calls) == 0 {
				a.Content.OfString = sdk.String(text)
			}
			msgs = append(msgs, sdk.ChatCompletionMessageParamUnion{OfAssistant: a})
		case forge.RoleTool:
		default:
			return sdk.ChatCompletionNewParams{}, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	params := sdk.ChatCompletionNewParams{
		Model:         model,
		Messages:      msgs,
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	for _, t := range req.Tools {
		schema, err := toolParameters(t.InputSchema)
		if err != nil {
			return sdk.ChatCompletionNewParams{}, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			def.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(def))
	}
	mp := req.Params
	if mp.MaxTokens != nil {
		params.MaxCompletionTokens = sdk.Int(*mp.MaxTokens)
	}
	if mp.Temperature != nil {
		params.Temperature = sdk.Float(*mp.Temperature)
	}
	if mp.TopP != nil {
		params.TopP = sdk.Float(*mp.TopP)
	}
	if mp.ReasoningEffort != "" {
		params.ReasoningEffort = shared.ReasoningEffort(mp.ReasoningEffort)
	}
	if s := req.OutputSchema; s != nil {
		params.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
			Name: s.Name, Schema: s.Schema, Strict: sdk.Bool(s.Strict)}}
	}
	return params, nil
}

// capture is an http.Client that records the requests it is given and
// answers each with an empty stream.
type capture struct {
	bodies  [][]byte
	headers []http.Header
}

func (c *capture) RoundTrip(r *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body.Close()
	c.bodies = append(c.bodies, b)
	c.headers = append(c.headers, r.Header.Clone())
	return &http.Response{StatusCode: 200, Request: r,
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
			"data: [DONE]\n\n"))}, nil
}

// sdkRequest sends req the way the provider did before body.go, through
// the SDK's params (the token limit moved to max_tokens when maxTokens),
// and returns the body and headers the SDK sent.
func sdkRequest(t *testing.T, model string, req *forge.ModelRequest, maxTokens bool) ([]byte, http.Header, error) {
	t.Helper()
	params, err := sdkParams(model, req)
	if err != nil {
		return nil, nil, err
	}
	if maxTokens && params.MaxCompletionTokens.Valid() {
		params.MaxTokens, params.MaxCompletionTokens = params.MaxCompletionTokens, param.Opt[int64]{}
	}
	c := &capture{}
	_, opts := Config{BaseURL: "http://model.invalid/v1", APIKey: "sk-test", HTTPClient: &http.Client{Transport: c}}.requestOptions()
	var res *http.Response
	chat := sdk.NewChatCompletionService(opts...)
	_, err = chat.New(context.Background(), params,
		option.WithJSONSet("stream", true), option.WithResponseBodyInto(&res))
	if err != nil {
		return nil, nil, err
	}
	res.Body.Close()
	return c.bodies[0], c.headers[0], nil
}

// providerRequest sends req through the provider and returns the body and
// headers it sent; err is the stream's first error.
func providerRequest(t *testing.T, model string, req *forge.ModelRequest, maxTokens bool) ([]byte, http.Header, error) {
	t.Helper()
	c := &capture{}
	field := MaxCompletionTokens
	if maxTokens {
		field = MaxTokens
	}
	m := New(Config{BaseURL: "http://model.invalid/v1", APIKey: "sk-test", HTTPClient: &http.Client{Transport: c},
		MaxTokensField: field}).Model(model)
	for _, err := range m.Stream(context.Background(), req) {
		if err != nil {
			return nil, nil, err
		}
	}
	return c.bodies[0], c.headers[0], nil
}

// decode decodes a JSON body keeping numbers exact.
func decode(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

func text(s string) forge.ModelPart { return forge.ModelPart{Type: forge.ModelPartText, Text: s} }

func ptr[T any](v T) *T { return &v }

// bodyCases are requests covering every branch of the body's mapping.
func bodyCases() map[string]*forge.ModelRequest {
	user := func(parts ...forge.ModelPart) forge.ModelMessage {
		return forge.ModelMessage{Role: forge.RoleUser, Parts: parts}
	}
	assistant := func(parts ...forge.ModelPart) forge.ModelMessage {
		return forge.ModelMessage{Role: forge.RoleAssistant, Parts: parts}
	}
	call := func(id, name, args string) forge.ModelPart {
		return forge.ModelPart{Type: forge.ModelPartToolCall, CallID: id, Name: name, Arguments: json.RawMessage(args),
			Provider: json.RawMessage(`{"call_id":"x"}`)}
	}
	result := func(id, out string, isErr bool) forge.ModelPart {
		return forge.ModelPart{Type: forge.ModelPartToolResult, CallID: id, Name: "t", Output: out, IsError: isErr}
	}
	hostile := "<b>&\"quote\" \\ back\x00\x01\x1f\b\f\n\r\t \u2028\u2029 é 😀 \xff\xfe bad \xe2\x82 cut </script>"
	var long []forge.ModelMessage
	for i := range 100 {
		long = append(long, user(text(fmt.Sprintf("message %d", i))), assistant(text("ok")))
	}
	long = append(long, user(text("hi")))
	return map[string]*forge.ModelRequest{
		"hello":           {Messages: []forge.ModelMessage{user(text("Hello"))}},
		"system and long": {System: "be brief", Messages: long},
		"multi-part user": {Messages: []forge.ModelMessage{user(text("a"), text(""), text("c"))}},
		"user without text": {Messages: []forge.ModelMessage{
			user(forge.ModelPart{Type: forge.ModelPartReasoning, Text: "r"}), user(text("x"))}},
		"tool round trip": {System: "s", Messages: []forge.ModelMessage{
			user(text("read both")),
			assistant(forge.ModelPart{Type: forge.ModelPartReasoning, Text: "thinking", Provider: json.RawMessage(`{"sig":"1"}`)},
				text("Reading "), text("now."), call("c1", "read_file", `{"path":"a.txt"}`), call("c2", "read_file", "  ")),
			{Role: forge.RoleTool, Parts: []forge.ModelPart{result("c1", "contents", false), result("c2", "no such file", true)}},
			assistant(call("c3", "ls", "{}")),
			{Role: forge.RoleTool, Parts: []forge.ModelPart{result("c3", "", false)}},
			assistant(),
			assistant(text("")),
			user(result("c9", "late result in a user message", false), text("and a question")),
		}},
		"hostile strings": {System: hostile, Messages: []forge.ModelMessage{
			user(text(hostile)),
			assistant(text(hostile), call(hostile, hostile, `{"q":"`+hostile+`"}`)),
			{Role: forge.RoleTool, Parts: []forge.ModelPart{result(hostile, hostile, true)}},
		}, Tools: []forge.ToolDef{{Name: "t", Description: hostile}}},
		"tools": {Messages: []forge.ModelMessage{user(text("x"))}, Tools: []forge.ToolDef{
			{Name: "none"},
			{Name: "null", InputSchema: json.RawMessage(" null ")},
			{Name: "empty", Description: "d", InputSchema: json.RawMessage(`{}`)},
			{Name: "untyped", InputSchema: json.RawMessage(`{"properties":{"a":{"type":"string"}},"required":["a"]}`)},
			{Name: "object", InputSchema: json.RawMessage(`{ "type" : "object" , "additionalProperties": false }`)},
			{Name: "full", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number","minimum":1e-7,"maximum":100000000000000000000000}},"$defs":{"x":{"enum":["<",">","&"]}}}`)},
			{Name: "string", InputSchema: json.RawMessage(`{"type":"string"}`)},
		}},
		"params": {Messages: []forge.ModelMessage{user(text("x"))}, Params: forge.ModelParams{
			MaxTokens: ptr[int64](1234), Temperature: ptr(0.7), TopP: ptr(0.9), ReasoningEffort: "low", Script: json.RawMessage(`[1]`)}},
		"tiny temperature": {Messages: []forge.ModelMessage{user(text("x"))}, Params: forge.ModelParams{Temperature: ptr(1e-7)}},
		"zero temperature": {Messages: []forge.ModelMessage{user(text("x"))}, Params: forge.ModelParams{Temperature: ptr(0.0), MaxTokens: ptr[int64](0)}},
		"huge temperature": {Messages: []forge.ModelMessage{user(text("x"))}, Params: forge.ModelParams{Temperature: ptr(-3e21)}},
		"output schema": {Messages: []forge.ModelMessage{user(text("x"))}, OutputSchema: &forge.OutputSchema{
			Name: "triage", Schema: json.RawMessage(`{ "type": "object", "properties": {"p": {"enum": ["<", "a"]}} }`), Strict: true}},
		"output schema not strict": {Messages: []forge.ModelMessage{user(text("x"))}, OutputSchema: &forge.OutputSchema{
			Name: "n", Schema: json.RawMessage(`{"type":"integer"}`)}},
		"model on request":  {Model: "other-model", Messages: []forge.ModelMessage{user(text("x"))}},
		"no messages":       {System: "only a system prompt"},
		"empty system text": {System: "", Messages: []forge.ModelMessage{user(text(""))}},
	}
}

// TestChatBodyMatchesSDK: for every case, the body and headers the
// provider sends say exactly what the SDK sent when it built the body from
// its params.
func TestChatBodyMatchesSDK(t *testing.T) {
	t.Parallel()
	for name, req := range bodyCases() {
		for _, maxTokens := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/max_tokens=%v", name, maxTokens), func(t *testing.T) {
				t.Parallel()
				model := "gpt-x"
				if req.Model != "" {
					model = req.Model
				}
				want, wantH, err := sdkRequest(t, model, req, maxTokens)
				if err != nil {
					t.Fatal(err)
				}
				got, gotH, err := providerRequest(t, "gpt-x", req, maxTokens)
				if err != nil {
					t.Fatal(err)
				}
				if !json.Valid(got) {
					t.Fatalf("the body is not valid JSON: %s", got)
				}
				if g, w := decode(t, got), decode(t, want); !reflect.DeepEqual(g, w) {
					gj, _ := json.MarshalIndent(g, "", " ")
					wj, _ := json.MarshalIndent(w, "", " ")
					t.Errorf("body differs from the SDK's:\ngot:  %s\nwant: %s", gj, wj)
				}
				for _, h := range []http.Header{gotH, wantH} {
					h.Del("Content-Length")
				}
				if !reflect.DeepEqual(gotH, wantH) {
					t.Errorf("headers differ from the SDK's:\ngot:  %v\nwant: %v", gotH, wantH)
				}
			})
		}
	}
}

// TestChatBodyRefusals: what the SDK could not send is refused before any
// request, with the SDK's reasons where it had one.
func TestChatBodyRefusals(t *testing.T) {
	t.Parallel()
	for name, req := range map[string]*forge.ModelRequest{
		"unknown role": {Messages: []forge.ModelMessage{{Role: "system", Parts: []forge.ModelPart{text("x")}}}},
		"bad schema":   {Messages: []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{text("x")}}}, Tools: []forge.ToolDef{{Name: "t", InputSchema: json.RawMessage(`[1]`)}}},
		"NaN":          {Messages: []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{text("x")}}}, Params: forge.ModelParams{Temperature: ptr(math.NaN())}},
		"infinity":     {Messages: []forge.ModelMessage{{Role: forge.RoleUser, Parts: []forge.ModelPart{text("x")}}}, Params: forge.ModelParams{Temperature: ptr(math.Inf(1))}},
	} {
		if _, _, err := sdkRequest(t, "m", req, false); err == nil {
			t.Errorf("%s: the SDK sent it", name)
		}
		_, _, err := providerRequest(t, "m", req, false)
		var me *forge.ModelError
		if err == nil || !errors.As(err, &me) || me.Retryable {
			t.Errorf("%s: err = %v, want a ModelError that is not retryable", name, err)
		}
	}
}

// FuzzAppendFloat: appendFloat writes what encoding/json writes.
func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, 1, -1, 0.7, 1e-7, 1e-6, 123456789, 1e20, 1e21, -3e21, 5e-324, math.MaxFloat64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat(nil, v); !bytes.Equal(got, want) {
			t.Errorf("appendFloat(%v) = %s, encoding/json: %s", v, got, want)
		}
	})
}

// BenchmarkChatBody compares the request body of a 200-message history
// written by body.go with the SDK's encoding of the same request.
func BenchmarkChatBody(b *testing.B) {
	req := bodyCases()["system and long"]
	b.Run("written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := appendChatBody(make([]byte, 0, bodySize(req)), "gpt-x", req, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := sdkParams("gpt-x", req)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
