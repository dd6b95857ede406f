package providertest

import (
	"encoding/json"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// requestTests: what a provider sends, read back from its fake in no
// API's terms.
var requestTests = []test{
	{"Mapping", func(f *fixture) {
		// The system prompt, a history with text, parallel tool calls and
		// their results, a call without arguments, tools with schemas
		// the API would refuse as they are, and the token limit.
		maxTokens := int64(512)
		req := &forge.ModelRequest{
			System: "You are terse.",
			Messages: []forge.ModelMessage{
				user("Weather in Paris and Tokyo?"),
				assistant(
					// Reasoning without state this provider can send back
					// is left out.
					forge.ModelPart{Type: forge.ModelPartReasoning, Text: "two lookups"},
					textPart("Checking "), textPart("both."),
					callPart("call_1", "get_weather", `{"city":"Paris"}`),
					callPart("call_2", "get_weather", `{"city": "Tokyo"}`)),
				toolResults(resultPart("call_1", "18C sunny"), resultPart("call_2", "9C rain")),
				assistant(callPart("call_3", "now", "")),
				toolResults(resultPart("call_3", "12:00")),
				assistant(textPart("Paris: 18C.")),
				user("Thanks.", "And Rome?"),
			},
			Tools:  Tools(),
			Params: forge.ModelParams{MaxTokens: &maxTokens},
		}
		if r := f.call(req); r.err != nil {
			f.Fatal(r.err)
		}
		got := f.received(1)[0]
		got.Header = nil
		empty := json.RawMessage(`{"type":"object","properties":{}}`)
		f.sameJSON(got, fakeapi.Request{
			Model: f.p.ModelID, System: "You are terse.", Stream: true, MaxTokens: &maxTokens,
			Parts: []fakeapi.Part{
				{Role: "user", Type: "text", Text: "Weather in Paris and Tokyo?"},
				{Role: "assistant", Type: "text", Text: "Checking both."},
				{Role: "assistant", Type: "tool_call", CallID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
				{Role: "assistant", Type: "tool_call", CallID: "call_2", Name: "get_weather", Arguments: `{"city":"Tokyo"}`},
				{Role: "tool", Type: "tool_result", CallID: "call_1", Output: "18C sunny"},
				{Role: "tool", Type: "tool_result", CallID: "call_2", Output: "9C rain"},
				{Role: "assistant", Type: "tool_call", CallID: "call_3", Name: "now", Arguments: `{}`},
				{Role: "tool", Type: "tool_result", CallID: "call_3", Output: "12:00"},
				{Role: "assistant", Type: "text", Text: "Paris: 18C."},
				{Role: "user", Type: "text", Text: "Thanks.And Rome?"},
			},
			Tools: []fakeapi.Tool{
				{Name: "get_weather", Description: "Weather of a city",
					Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`)},
				{Name: "now", Schema: empty},
				{Name: "ping", Schema: empty},
				{Name: "untyped", Schema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}},"$defs":{"x":{}}}`)},
			},
		}, "the request received")
	}},
	{"ToolResultError", func(f *fixture) {
		req := &forge.ModelRequest{Messages: []forge.ModelMessage{user("go"), assistant(callPart("call_1", "x", "{}")),
			toolResults(forge.ModelPart{Type: forge.ModelPartToolResult, CallID: "call_1", Output: "denied", IsError: true})}}
		if r := f.call(req); r.err != nil {
			f.Fatal(r.err)
		}
		parts := f.received(1)[0].Parts
		f.sameJSON(parts[len(parts)-1], fakeapi.Part{Role: "tool", Type: "tool_result", CallID: "call_1", Output: "denied", IsError: true}, "the result")
	}},
	{"ToolResultImage", func(f *fixture) {
		// An image a tool returned (an MCP tool's, stored by the engine)
		// reaches the model with the result: as an image of the result
		// where the API takes one, in a user message right after the tool
		// messages where it does not (Chat Completions). Its bytes arrive
		// exactly as they were.
		img := TinyPNG()
		res := resultPart("call_1", "Here's the image you requested:")
		res.Content = []forge.ModelPart{{Type: forge.ModelPartFile,
			File: &forge.ModelFile{FileID: "file_1", Filename: "call_1-1.png", MimeType: "image/png", Data: img}}}
		req := &forge.ModelRequest{Messages: []forge.ModelMessage{user("Show me the logo."),
			assistant(callPart("call_1", "everything_get-tiny-image", "{}")), toolResults(res)}}
		if r := f.call(req); r.err != nil {
			f.Fatal(r.err)
		}
		file := []fakeapi.File{{MimeType: "image/png", Data: img}}
		want := []fakeapi.Part{
			{Role: "user", Type: "text", Text: "Show me the logo."},
			{Role: "assistant", Type: "tool_call", CallID: "call_1", Name: "everything_get-tiny-image", Arguments: "{}"},
			{Role: "tool", Type: "tool_result", CallID: "call_1", Output: "Here's the image you requested:", Files: file},
		}
		if f.p.ToolResultFilesAsUser {
			want[2].Output += "\n[the tool returned the file call_1-1.png (image/png): it follows in the next message]"
			want[2].Files = nil
			want = append(want, fakeapi.Part{Role: "user", Type: "text", Text: "The files tool call call_1 returned:"},
				fakeapi.Part{Role: "user", Type: "file", Files: file})
		}
		f.sameJSON(f.received(1)[0].Parts, want, "the parts sent")
	}},
	{"Temperature", func(f *fixture) {
		req := hello()
		temp := 0.2
		req.Params.Temperature = &temp
		if r := f.call(req); r.err != nil {
			f.Fatal(r.err)
		}
		if got := f.received(1)[0].Temperature; got == nil || *got != temp {
			f.Errorf("temperature %v, want 0.2", got)
		}
	}},
	{"NoParams", func(f *fixture) {
		// What the request does not set is not sent.
		if r := f.call(hello()); r.err != nil {
			f.Fatal(r.err)
		}
		got := f.received(1)[0]
		if got.Temperature != nil || len(got.Tools) != 0 {
			f.Errorf("temperature %v, tools %+v sent though not set", got.Temperature, got.Tools)
		}
	}},
	{"NoMaxTokens", func(f *fixture) {
		if r := f.call(hello()); r.err != nil {
			f.Fatal(r.err)
		}
		if got := f.received(1)[0].MaxTokens; got != nil {
			f.Errorf("max tokens %d sent though not set", *got)
		}
	}},
	{"ModelAndProviderName", func(f *fixture) {
		c := f.config()
		c.Name = "proxy"
		m := f.p.Model(c)
		f.respond(fakeapi.Failure(500, "kaput"))
		req := hello()
		req.Model = "other-model"
		if me := f.modelError(stream(f.Context(), m, req).err); me.Provider != "proxy" {
			f.Errorf("provider %q in the error, want the configured name", me.Provider)
		}
		if got := f.received(1)[0].Model; got != "other-model" {
			f.Errorf("model sent %q, want the request's", got)
		}
		if r := stream(f.Context(), m, hello()); r.err != nil {
			f.Fatal(r.err)
		}
		if got := f.received(2)[1].Model; got != f.p.ModelID {
			f.Errorf("model sent %q, want the provider's model id %q", got, f.p.ModelID)
		}
	}},
	{"ForeignReasoningDropped", func(f *fixture) {
		// Reasoning this provider cannot send back (plain text, another
		// provider's state) is left out.
		req := hello()
		req.Messages = append(req.Messages, assistant(
			forge.ModelPart{Type: forge.ModelPartReasoning, Text: "from another provider"},
			forge.ModelPart{Type: forge.ModelPartReasoning, Text: "odd state", Provider: json.RawMessage(`{"call_id":"x"}`)},
			textPart("Hi.")), user("Again"))
		if r := f.call(req); r.err != nil {
			f.Fatal(r.err)
		}
		f.sameJSON(f.received(1)[0].Parts, []fakeapi.Part{
			{Role: "user", Type: "text", Text: "Hello"},
			{Role: "assistant", Type: "text", Text: "Hi."},
			{Role: "user", Type: "text", Text: "Again"},
		}, "the parts sent")
	}},
	{"ReasoningReplay", func(f *fixture) {
		// The engine's tool loop: the reasoning of the first reply goes
		// back with the call it led to, its state as it came (the fake
		// refuses state it did not issue, or issued for other text).
		f.respond(fakeapi.Reasoning("I need ", "the weather.").Text("Checking.").
			Calls(fakeapi.Call{Name: "get_weather", Args: `{"city":"Paris"}`}),
			fakeapi.Text("Sunny."))
		req := hello()
		req.Params.ReasoningEffort = "medium"
		req.Tools = []forge.ToolDef{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
		first := f.call(req)
		if first.err != nil {
			f.Fatal(first.err)
		}
		msg := AssistantMessage(first.events)
		var state json.RawMessage
		for _, p := range msg.Parts {
			if p.Type == forge.ModelPartReasoning {
				state = p.Provider
			}
		}
		req.Messages = append(req.Messages, msg, toolResults(resultPart("call_1", "18C")))
		second := f.call(req)
		f.events(second, "text+", "text:Sunny.", "text-", second.got[len(second.got)-1])
		parts := f.received(2)[1].Parts
		if len(parts) != 5 || parts[1].Type != "reasoning" || !hasString(state, parts[1].State) {
			f.Fatalf("parts sent back %+v: want the reasoning first, with the state %s of the reply", parts, state)
		}
		parts[1].State = ""
		f.sameJSON(parts, []fakeapi.Part{
			{Role: "user", Type: "text", Text: "Hello"},
			{Role: "assistant", Type: "reasoning", Text: "I need the weather."},
			{Role: "assistant", Type: "text", Text: "Checking."},
			{Role: "assistant", Type: "tool_call", CallID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{Role: "tool", Type: "tool_result", CallID: "call_1", Output: "18C"},
		}, "the parts sent back")
	}},
}

// AssistantMessage is the message the engine stores from a reply's
// events: text and reasoning parts with their provider state, then the
// calls, with ids of the engine's own (call_1, ...).
func AssistantMessage(evs []forge.ModelEvent) forge.ModelMessage {
	m := forge.ModelMessage{Role: forge.RoleAssistant}
	var calls []forge.ModelPart
	var text strings.Builder
	for _, ev := range evs {
		switch ev.Type {
		case forge.TextStart, forge.ReasoningStart:
			text.Reset()
		case forge.TextDelta, forge.ReasoningDelta:
			text.WriteString(ev.Delta)
		case forge.TextEnd, forge.ReasoningEnd:
			typ := forge.ModelPartText
			if ev.Type == forge.ReasoningEnd {
				typ = forge.ModelPartReasoning
			}
			m.Parts = append(m.Parts, forge.ModelPart{Type: typ, Text: text.String(), Provider: ev.Provider})
		case forge.ToolCallEvent:
			calls = append(calls, forge.ModelPart{Type: forge.ModelPartToolCall, CallID: "call_" + string(rune('1'+len(calls))),
				Name: ev.ToolCall.Name, Arguments: ev.ToolCall.Arguments})
		}
	}
	m.Parts = append(m.Parts, calls...)
	return m
}
