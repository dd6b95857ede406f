package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/jsonenc"
)

// The Chat Completions request body is written here, straight into bytes,
// and handed to the SDK as a raw body (option.WithRequestBody): the SDK's
// own encoding of ChatCompletionNewParams walks every message by
// reflection, and cost some 0.3 ms and hundreds of allocations for the
// hundred messages of a longer session, more than the rest of a model
// call. The SDK still makes the request: transport, auth and headers,
// errors. TestChatBodyMatchesSDK checks that, for a range of requests,
// this body says exactly what the SDK would have sent.

// appendChatBody appends the streaming Chat Completions request for req,
// addressed to model, to b; maxTokens sends the token limit as
// max_tokens rather than max_completion_tokens (see Config.MaxTokensField).
func appendChatBody(b []byte, model string, req *forge.ModelRequest, maxTokens bool) ([]byte, error) {
	b = append(b, `{"model":`...)
	b = jsonenc.AppendString(b, model)
	b = append(b, `,"stream":true,"stream_options":{"include_usage":true},"messages":[`...)
	first := true
	sep := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if req.System != "" {
		sep()
		b = append(b, `{"role":"system","content":`...)
		b = jsonenc.AppendString(b, req.System)
		b = append(b, '}')
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case forge.RoleUser, forge.RoleAssistant, forge.RoleTool:
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		// Tool results become tool messages, ahead of the message's own
		// text and calls (as they always have).
		texts, calls, resultFiles := 0, 0, 0
		for j := range m.Parts {
			p := &m.Parts[j]
			switch p.Type {
			case forge.ModelPartText:
				texts++
			case forge.ModelPartToolCall:
				calls++
			case forge.ModelPartToolResult:
				sep()
				b = append(b, `{"role":"tool","content":`...)
				b = jsonenc.AppendString(b, chatToolText(p))
				b = append(b, `,"tool_call_id":`...)
				b = jsonenc.AppendString(b, p.CallID)
				b = append(b, '}')
				resultFiles += countFiles(p.Content)
			}
		}
		if resultFiles > 0 {
			// A tool message holds text alone: the files of the results
			// follow in a user message (docs/decisions.md).
			sep()
			b = appendChatResultFiles(b, m.Parts)
		}
		switch m.Role {
		case forge.RoleUser:
			files := countFiles(m.Parts)
			if texts == 0 && files == 0 {
				continue
			}
			sep()
			b = append(b, `{"role":"user","content":`...)
			if texts == 1 && files == 0 {
				for j := range m.Parts {
					if m.Parts[j].Type == forge.ModelPartText {
						b = jsonenc.AppendString(b, m.Parts[j].Text)
					}
				}
			} else {
				b = append(b, '[')
				n := 0
				for j := range m.Parts {
					p := &m.Parts[j]
					if p.Type != forge.ModelPartText && p.Type != forge.ModelPartFile {
						continue
					}
					if n > 0 {
						b = append(b, ',')
					}
					n++
					b = appendChatBlock(b, p)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		case forge.RoleAssistant:
			sep()
			b = append(b, `{"role":"assistant"`...)
			// The texts joined; content is left out only for a message
			// that is nothing but tool calls.
			if calls == 0 || hasText(m.Parts) {
				b = append(b, `,"content":`...)
				b = appendJoinedText(b, m.Parts, texts)
			}
			if calls > 0 {
				b = append(b, `,"tool_calls":[`...)
				n := 0
				for j := range m.Parts {
					p := &m.Parts[j]
					if p.Type != forge.ModelPartToolCall {
						continue
					}
					if n > 0 {
						b = append(b, ',')
					}
					n++
					b = append(b, `{"id":`...)
					b = jsonenc.AppendString(b, p.CallID)
					b = append(b, `,"type":"function","function":{"name":`...)
					b = jsonenc.AppendString(b, p.Name)
					b = append(b, `,"arguments":`...)
					if args := string(p.Arguments); strings.TrimSpace(args) != "" {
						b = jsonenc.AppendString(b, args)
					} else {
						b = append(b, `"{}"`...)
					}
					b = append(b, "}}"...)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
	}
	b = append(b, ']')
	if len(req.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range req.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			schema, err := toolParameters(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("tool %q: %w", t.Name, err)
			}
			params, err := json.Marshal(schema)
			if err != nil {
				return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
			}
			b = append(b, `{"type":"function","function":{"name":`...)
			b = jsonenc.AppendString(b, t.Name)
			if t.Description != "" {
				b = append(b, `,"description":`...)
				b = jsonenc.AppendString(b, t.Description)
			}
			b = append(b, `,"parameters":`...)
			b = append(b, params...)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	mp := &req.Params
	if mp.MaxTokens != nil {
		if maxTokens {
			b = append(b, `,"max_tokens":`...)
		} else {
			b = append(b, `,"max_completion_tokens":`...)
		}
		b = strconv.AppendInt(b, *mp.MaxTokens, 10)
	}
	if mp.Temperature != nil {
		f := *mp.Temperature
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("temperature must be a finite number")
		}
		b = append(b, `,"temperature":`...)
		b = appendFloat(b, f)
	}
	if mp.TopP != nil {
		f := *mp.TopP
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("top_p must be a finite number")
		}
		b = append(b, `,"top_p":`...)
		b = appendFloat(b, f)
	}
	if mp.ReasoningEffort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = jsonenc.AppendString(b, mp.ReasoningEffort)
	}
	if s := req.OutputSchema; s != nil {
		schema, err := compactSchema(s.Schema)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		b = jsonenc.AppendString(b, s.Name)
		b = append(b, `,"schema":`...)
		b = append(b, schema...)
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, s.Strict)
		b = append(b, "}}"...)
	}
	return append(b, '}'), nil
}

// compactSchema is an output schema as sent: a JSON object, compacted.
func compactSchema(schema json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, schema); err != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, errors.New("output schema is not a JSON object")
	}
	return buf.Bytes(), nil
}

func hasText(parts []forge.ModelPart) bool {
	for j := range parts {
		if parts[j].Type == forge.ModelPartText && parts[j].Text != "" {
			return true
		}
	}
	return false
}

// appendJoinedText appends the texts of parts, joined, as one JSON string.
func appendJoinedText(b []byte, parts []forge.ModelPart, texts int) []byte {
	if texts == 1 {
		for j := range parts {
			if parts[j].Type == forge.ModelPartText {
				return jsonenc.AppendString(b, parts[j].Text)
			}
		}
	}
	var sb strings.Builder
	for j := range parts {
		if parts[j].Type == forge.ModelPartText {
			sb.WriteString(parts[j].Text)
		}
	}
	return jsonenc.AppendString(b, sb.String())
}

// bodySize estimates the size of req's body, so that it is written into
// one allocation.
func bodySize(req *forge.ModelRequest) int {
	n := 256 + len(req.System)
	for i := range req.Messages {
		for j := range req.Messages[i].Parts {
			p := &req.Messages[i].Parts[j]
			n += 64 + len(p.Text) + len(p.Output) + len(p.CallID) + len(p.Name) + len(p.Arguments)
			if p.File != nil {
				n += 128 + len(p.File.Filename) + base64.StdEncoding.EncodedLen(len(p.File.Data))
			}
			for k := range p.Content {
				if c := &p.Content[k]; c.File != nil {
					n += 256 + len(c.File.Filename) + base64.StdEncoding.EncodedLen(len(c.File.Data))
				} else {
					n += 64 + len(c.Text)
				}
			}
		}
	}
	for _, t := range req.Tools {
		n += 96 + len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return n + n/16 // escapes
}

// appendFloat writes f as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
