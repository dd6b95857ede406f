package anthropictest

// What the provider conformance suite (providertest) needs of the fake:
// replies in no API's terms, and the requests received in no API's terms.

import "github.com/forge-runtime/forge/provider/internal/fakeapi"

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

// Received returns the requests received, in no API's terms.
func (s *Server) Received() []fakeapi.Request {
	var out []fakeapi.Request
	for _, r := range s.Requests() {
		out = append(out, r.Neutral())
	}
	return out
}

// Neutral is r in no API's terms: tool_result blocks are the tool role's
// parts; a thinking block is a reasoning part with its signature as the
// state, a redacted_thinking block one with its data.
func (r Request) Neutral() fakeapi.Request {
	n := fakeapi.Request{Header: r.Header, Model: r.Model, System: r.System, Stream: r.Stream,
		MaxTokens: r.MaxTokens, Temperature: r.Temperature}
	for _, m := range r.Messages {
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				n.Add(fakeapi.Part{Role: m.Role, Type: "text", Text: b.Text})
			case "thinking":
				p := fakeapi.Part{Role: m.Role, Type: "reasoning"}
				if b.Thinking != nil {
					p.Text = *b.Thinking
				}
				if b.Signature != nil {
					p.State = *b.Signature
				}
				n.Add(p)
			case "redacted_thinking":
				n.Add(fakeapi.Part{Role: m.Role, Type: "reasoning", State: b.Data})
			case "tool_use":
				n.Add(fakeapi.Part{Role: m.Role, Type: "tool_call", CallID: b.ID, Name: b.Name, Arguments: fakeapi.Compact(b.Input)})
			case "tool_result":
				n.Add(fakeapi.Part{Role: "tool", Type: "tool_result", CallID: b.ToolUseID, Output: b.Content,
					IsError: b.IsError != nil && *b.IsError, Files: b.Files})
			case "image", "document":
				if f, ok := b.File(); ok {
					n.Add(fakeapi.Part{Role: m.Role, Type: "file", Files: []fakeapi.File{f}})
				}
			}
		}
	}
	for _, t := range r.Tools {
		n.Tools = append(n.Tools, fakeapi.Tool{Name: t.Name, Description: t.Description, Schema: t.InputSchema})
	}
	return n
}
