package openaitest

// What the provider conformance suite (providertest) needs of the fake:
// replies in no API's terms, and the requests received in no API's terms.

import (
	"bytes"
	"encoding/json"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Respond queues replies given in no API's terms (see FromReply).
func (s *Server) Respond(replies ...fakeapi.Reply) {
	for _, r := range replies {
		s.Enqueue(FromReply(r))
	}
}

// SetDefaultReply sets the answer used when the queue is empty.
func (s *Server) SetDefaultReply(r fakeapi.Reply) { s.SetDefault(FromReply(r)) }

// InFlight is the number of requests being answered.
func (s *Server) InFlight() int { return s.lb.InFlight() }

// ChatReceived returns the chat requests received, in no API's terms.
func (s *Server) ChatReceived() []fakeapi.Request {
	var out []fakeapi.Request
	for _, r := range s.Requests() {
		out = append(out, r.Neutral())
	}
	return out
}

// ResponsesReceived returns the Responses API requests received, in no
// API's terms.
func (s *Server) ResponsesReceived() []fakeapi.Request {
	var out []fakeapi.Request
	for _, r := range s.ResponsesRequests() {
		out = append(out, r.Neutral())
	}
	return out
}

// Neutral is r in no API's terms: system and developer messages make the
// system prompt, max_completion_tokens (or max_tokens) the token limit.
func (r Request) Neutral() fakeapi.Request {
	n := fakeapi.Request{Header: r.Header, Model: r.Model, Stream: r.Stream, MaxTokens: r.MaxCompletionTokens, Temperature: r.Temperature}
	if n.MaxTokens == nil {
		n.MaxTokens = r.MaxTokens
	}
	for _, m := range r.Messages {
		switch m.Role {
		case "system", "developer":
			n.System += m.Content
		case "tool":
			n.Add(fakeapi.Part{Role: "tool", Type: "tool_result", CallID: m.ToolCallID, Output: m.Content})
		default:
			if files := chatFiles(m.RawContent); files != nil {
				// Array content: its texts and files in order.
				for _, c := range files {
					if c.Files == nil && c.Text == "" {
						continue
					}
					c.Role = m.Role
					n.Add(c)
				}
			} else if m.Content != "" {
				n.Add(fakeapi.Part{Role: m.Role, Type: "text", Text: m.Content})
			}
			for _, c := range m.ToolCalls {
				n.Add(fakeapi.Part{Role: m.Role, Type: "tool_call", CallID: c.ID, Name: c.Function.Name,
					Arguments: fakeapi.Compact([]byte(c.Function.Arguments))})
			}
		}
	}
	for _, t := range r.Tools {
		n.Tools = append(n.Tools, fakeapi.Tool{Name: t.Function.Name, Description: t.Function.Description,
			Schema: t.Function.Parameters})
	}
	return n
}

// Neutral is r in no API's terms: the instructions (and system or
// developer input messages) make the system prompt; a reasoning item is a
// reasoning part whose text is its summary (or its reasoning text) and
// whose state is its encrypted content.
func (r ResponsesRequest) Neutral() fakeapi.Request {
	n := fakeapi.Request{Header: r.Header, Model: r.Model, System: r.Instructions, Stream: r.Stream,
		MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature}
	for _, it := range r.Input {
		switch it.Type {
		case "message":
			if it.Role == "system" || it.Role == "developer" {
				n.System += it.Content
			} else if files := responsesFiles(it.RawContent); files != nil {
				for _, c := range files {
					c.Role = it.Role
					n.Add(c)
				}
			} else {
				n.Add(fakeapi.Part{Role: it.Role, Type: "text", Text: it.Content})
			}
		case "function_call":
			n.Add(fakeapi.Part{Role: "assistant", Type: "tool_call", CallID: it.CallID, Name: it.Name,
				Arguments: fakeapi.Compact([]byte(it.Arguments))})
		case "function_call_output":
			p := fakeapi.Part{Role: "tool", Type: "tool_result", CallID: it.CallID, Output: it.Output}
			for _, c := range responsesFiles(it.RawOutput) {
				p.Files = append(p.Files, c.Files...)
			}
			n.Add(p)
		case "reasoning":
			text := it.Content
			for _, s := range it.Summary {
				text += s.Text
			}
			n.Add(fakeapi.Part{Role: "assistant", Type: "reasoning", Text: text, State: it.EncryptedContent})
		}
	}
	for _, t := range r.Tools {
		n.Tools = append(n.Tools, fakeapi.Tool{Name: t.Name, Description: t.Description, Schema: t.Parameters})
	}
	return n
}

// chatFiles is a Chat Completions array content as parts, in order: text
// parts and file parts (image_url, file); nil for content that is no
// array or holds no file (the neutral form then is its text, as always).
func chatFiles(raw json.RawMessage) []fakeapi.Part {
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
		File *struct {
			Filename string `json:"filename"`
			FileData string `json:"file_data"`
		} `json:"file"`
	}
	if c := bytes.TrimSpace(raw); len(c) == 0 || c[0] != '[' || json.Unmarshal(c, &parts) != nil {
		return nil
	}
	var out []fakeapi.Part
	files := false
	for _, p := range parts {
		switch {
		case p.Type == "text":
			out = append(out, fakeapi.Part{Type: "text", Text: p.Text})
		case p.Type == "image_url" && p.ImageURL != nil:
			if f, ok := fakeapi.DataURLFile(p.ImageURL.URL); ok {
				out, files = append(out, fakeapi.Part{Type: "file", Files: []fakeapi.File{f}}), true
			}
		case p.Type == "file" && p.File != nil:
			if f, ok := fakeapi.DataURLFile(p.File.FileData); ok {
				f.Name = p.File.Filename
				out, files = append(out, fakeapi.Part{Type: "file", Files: []fakeapi.File{f}}), true
			}
		}
	}
	if !files {
		return nil
	}
	return out
}

// responsesFiles is a Responses API content (or function_call_output
// output) array as parts, in order: input_text and file parts
// (input_image, input_file); nil when it is no array or holds no file.
func responsesFiles(raw json.RawMessage) []fakeapi.Part {
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL string `json:"image_url"`
		FileData string `json:"file_data"`
		Filename string `json:"filename"`
	}
	if c := bytes.TrimSpace(raw); len(c) == 0 || c[0] != '[' || json.Unmarshal(c, &parts) != nil {
		return nil
	}
	var out []fakeapi.Part
	files := false
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text":
			out = append(out, fakeapi.Part{Type: "text", Text: p.Text})
		case "input_image":
			if f, ok := fakeapi.DataURLFile(p.ImageURL); ok {
				out, files = append(out, fakeapi.Part{Type: "file", Files: []fakeapi.File{f}}), true
			}
		case "input_file":
			if f, ok := fakeapi.DataURLFile(p.FileData); ok {
				f.Name = p.Filename
				out, files = append(out, fakeapi.Part{Type: "file", Files: []fakeapi.File{f}}), true
			}
		}
	}
	if !files {
		return nil
	}
	return out
}
