package openaitest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

const userInput = `"input":[{"role":"user","content":"hi"}]`

func postResponses(t *testing.T, srv *openaitest.Server, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+"/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return res, string(b)
}

var createdAtRE = regexp.MustCompile(`"created_at":\d+`)

func TestResponsesWireFormat(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("Hel", "lo \"q\"\n").Usage(3, 2))
	res, got := postResponses(t, srv, `{"model":"gpt-x","stream":true,"store":false,`+userInput+`}`)
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	obj := func(status, output, usage string) string {
		return `{"id":"resp_otest0000000000000000000001","object":"response","created_at":0,"status":"` + status +
			`","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"model":"gpt-x","output":[` +
			output + `],"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":null,"reasoning":{"effort":null,"summary":null},"safety_identifier":null,"service_tier":"default","store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1.0,"truncation":"disabled","usage":` +
			usage + `,"user":null,"metadata":{}}`
	}
	const item = `"item_id":"msg_otest0000000000000000000002","output_index":0,"content_index":0`
	const done = `{"id":"msg_otest0000000000000000000002","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello \"q\"\n"}],"role":"assistant"}`
	want := []string{
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":" + obj("in_progress", "", "null") + "}",
		"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":" + obj("in_progress", "", "null") + "}",
		`event: response.output_item.added` + "\n" + `data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_otest0000000000000000000002","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`event: response.content_part.added` + "\n" + `data: {"type":"response.content_part.added","sequence_number":3,` + item + `,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}`,
		`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":4,` + item + `,"delta":"Hel","logprobs":[],"obfuscation":"dKrY5CjQx4bIp"}`,
		`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":5,` + item + `,"delta":"lo \"q\"\n","logprobs":[],"obfuscation":"hOv29GnU1"}`,
		`event: response.output_text.done` + "\n" + `data: {"type":"response.output_text.done","sequence_number":6,` + item + `,"text":"Hello \"q\"\n","logprobs":[]}`,
		`event: response.content_part.done` + "\n" + `data: {"type":"response.content_part.done","sequence_number":7,` + item + `,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello \"q\"\n"}}`,
		`event: response.output_item.done` + "\n" + `data: {"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":` + done + `}`,
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":9,\"response\":" +
			obj("completed", done, `{"input_tokens":3,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":5}`) + "}",
	}
	wantS := strings.Join(want, "\n\n") + "\n\n"
	if got = createdAtRE.ReplaceAllString(got, `"created_at":0`); got != wantS {
		t.Errorf("stream:\n%s\nwant:\n%s", got, wantS)
	}
	for _, ev := range strings.Split(strings.TrimSpace(got), "\n\n") {
		_, data, _ := strings.Cut(ev, "\ndata: ")
		if !json.Valid([]byte(data)) {
			t.Errorf("invalid JSON: %s", data)
		}
	}
}

// TestResponsesSDKDecodes reads the fake's streams with the SDK's own
// Responses client: every event decodes into its typed variant with the
// expected fields, in sequence.
func TestResponsesSDKDecodes(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Reasoning("Th", "ink").Text("Hi").ToolCalls(
		openaitest.Call{ID: "call_1", Name: "get_weather", Args: `{"city":"Paris"}`},
		openaitest.Call{ID: "call_2", Name: "now"},
	).Tokens(openaitest.Tokens{Input: 11, Output: 7, Cached: 4, Reasoning: 3}))
	svc := responses.NewResponseService(option.WithBaseURL(srv.URL()), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	stream := svc.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model:   "gpt-5",
		Input:   responses.ResponseNewParamsInputUnion{OfString: sdk.String("hi")},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	})
	defer stream.Close()
	var types []string
	var text, summary, args strings.Builder
	var enc string
	var calls []string
	var usage responses.ResponseUsage
	var output int
	seq := int64(0)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Errorf("event %s: sequence_number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		types = append(types, ev.Type)
		switch e := ev.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			text.WriteString(e.Delta)
		case responses.ResponseReasoningSummaryTextDeltaEvent:
			summary.WriteString(e.Delta)
		case responses.ResponseFunctionCallArgumentsDeltaEvent:
			args.WriteString(e.Delta)
		case responses.ResponseOutputItemDoneEvent:
			switch it := e.Item.AsAny().(type) {
			case responses.ResponseReasoningItem:
				enc = it.EncryptedContent
				if len(it.Summary) != 1 || it.Summary[0].Text != "Think" {
					t.Errorf("reasoning item %+v", it)
				}
			case responses.ResponseFunctionToolCall:
				calls = append(calls, it.CallID+" "+it.Name+" "+it.Arguments+" "+string(it.Status))
			case responses.ResponseOutputMessage:
				if it.Content[0].Text != "Hi" || it.Status != "completed" {
					t.Errorf("message %+v", it)
				}
			}
		case responses.ResponseCompletedEvent:
			usage = e.Response.Usage
			output = len(e.Response.Output)
			if e.Response.Status != "completed" || e.Response.ID == "" || e.Response.Model != "gpt-5" {
				t.Errorf("completed response %+v", e.Response)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	wantTypes := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_summary_part.added",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.output_item.done", "response.completed"}
	if strings.Join(types, " ") != strings.Join(wantTypes, " ") {
		t.Errorf("event types:\n%q\nwant\n%q", types, wantTypes)
	}
	if text.String() != "Hi" || summary.String() != "Think" || args.String() != `{"city":"Paris"}{}` {
		t.Errorf("text %q summary %q args %q", text.String(), summary.String(), args.String())
	}
	if want := []string{`call_1 get_weather {"city":"Paris"} completed`, `call_2 now {} completed`}; strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q", calls)
	}
	if !strings.HasPrefix(enc, "gAAAAA") {
		t.Errorf("encrypted_content %q", enc)
	}
	if usage.InputTokens != 11 || usage.OutputTokens != 7 || usage.TotalTokens != 18 ||
		usage.InputTokensDetails.CachedTokens != 4 || usage.OutputTokensDetails.ReasoningTokens != 3 || output != 4 {
		t.Errorf("usage %+v, %d output items", usage, output)
	}
}

func TestResponsesTerminalEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp openaitest.Response
		last string // the last event's data, in part
	}{
		{"length", openaitest.Text("a").Finish("length"), `"type":"response.incomplete","sequence_number":8,"response":{"id":"resp_otest`},
		{"content filter", openaitest.Text("a").Finish("content_filter"), `"status":"incomplete","background":false,"error":null,"incomplete_details":{"reason":"content_filter"}`},
		{"no terminal event", openaitest.Text("a").Finish(""), `"type":"response.output_item.done","sequence_number":7`},
		{"error after", openaitest.Text("a", "b").ErrorAfter(5, "overloaded"),
			`"type":"response.failed","sequence_number":5,"response":{"id":"resp_otest0000000000000000000001","object":"response","created_at":0,"status":"failed","background":false,"error":{"code":"server_error","message":"overloaded"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t)
			srv.Enqueue(tt.resp)
			_, got := postResponses(t, srv, `{"model":"m","stream":true,`+userInput+`}`)
			got = createdAtRE.ReplaceAllString(got, `"created_at":0`)
			events := strings.Split(strings.TrimSpace(got), "\n\n")
			if last := events[len(events)-1]; !strings.Contains(last, tt.last) {
				t.Errorf("last event %s\nwant it to contain %s", last, tt.last)
			}
			if tt.name == "error after" && len(events) != 6 {
				t.Errorf("%d events", len(events))
			}
		})
	}
}

func TestResponsesEncryptedContentOnlyWhenIncluded(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Reasoning("r").Text("t"), openaitest.Reasoning("r").Text("t"))
	_, without := postResponses(t, srv, `{"model":"m","stream":true,"store":false,`+userInput+`}`)
	_, with := postResponses(t, srv, `{"model":"m","stream":true,"store":false,"include":["reasoning.encrypted_content"],`+userInput+`}`)
	if strings.Contains(without, "encrypted_content") {
		t.Errorf("encrypted_content sent without include")
	}
	id := regexp.MustCompile(`"id":"(rs_[^"]+)","type":"reasoning","encrypted_content":"([^"]+)"`).FindStringSubmatch(with)
	if id == nil || id[2] != openaitest.EncryptedContent(id[1]) {
		t.Errorf("no encrypted_content in %s", with)
	}
}

func TestResponsesValidation(t *testing.T) {
	t.Parallel()
	enc := openaitest.EncryptedContent("rs_1")
	tests := []struct {
		name    string
		body    string
		status  int
		message string
	}{
		{"no model", `{` + userInput + `}`, 400, "Missing required parameter: 'model'"},
		{"no input", `{"model":"m"}`, 400, "Missing required parameter: 'input'"},
		{"previous response", `{"model":"m","previous_response_id":"resp_1",` + userInput + `}`, 400, "Previous response with id 'resp_1' not found"},
		{"bad include", `{"model":"m","include":["reasoning"],` + userInput + `}`, 400, "Invalid value: 'reasoning'"},
		{"output without call", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"call_1","output":"r"}]}`,
			400, "No tool call found for function call output with call_id call_1"},
		{"call without output", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},{"role":"user","content":"y"}]}`,
			400, "No tool output found for function call call_1"},
		{"null content", `{"model":"m","input":[{"role":"assistant","content":null}]}`, 400, "Missing required parameter: 'input[0].content'"},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, 400, "Invalid value: 'tool'"},
		{"reasoning without state, stateless", `{"model":"m","store":false,"input":[{"type":"reasoning","id":"rs_1","summary":[]},{"role":"assistant","content":"a"}]}`,
			404, "Items are not persisted when `store` is set to false"},
		{"reasoning forged", `{"model":"m","store":false,"input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAAx"},{"role":"assistant","content":"a"}]}`,
			400, "could not be verified"},
		{"reasoning alone", `{"model":"m","store":false,"input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"` + enc + `"},{"role":"user","content":"a"}]}`,
			400, "without its required following item"},
		{"strict by default", `{"model":"m",` + userInput + `,"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}]}`,
			400, "'additionalProperties' is required to be supplied and to be false"},
		{"strict, property not required", `{"model":"m",` + userInput + `,"tools":[{"type":"function","name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}}]}`,
			400, "Missing 'a'"},
		{"schema not an object", `{"model":"m",` + userInput + `,"tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"string"}}]}`,
			400, "schema must be a JSON Schema of 'type: \"object\"'"},
		{"chat-style tool", `{"model":"m",` + userInput + `,"tools":[{"type":"function","function":{"name":"f"}}]}`,
			400, "does not match pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t)
			srv.Enqueue(openaitest.Text("queued"))
			res, body := postResponses(t, srv, tt.body)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			if res.StatusCode != tt.status || !strings.Contains(e.Error.Message, tt.message) || e.Error.Type != "invalid_request_error" {
				t.Errorf("%d %s, want %d ~ %q", res.StatusCode, body, tt.status, tt.message)
			}
			if srv.Pending() != 1 {
				t.Error("a refused request consumed the queued response")
			}
			if len(srv.ResponsesRequests()) != 1 {
				t.Error("refused request not recorded")
			}
		})
	}
	// A valid stateless round trip passes.
	srv := openaitest.New(t)
	res, body := postResponses(t, srv, `{"model":"m","store":false,"stream":true,"tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"object","properties":{"a":{}}}}],"input":[
	  {"role":"user","content":[{"type":"input_text","text":"x"}]},
	  {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"`+enc+`"},
	  {"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},
	  {"type":"function_call_output","call_id":"call_1","output":"r"}]}`)
	if res.StatusCode != 200 || !strings.Contains(body, "response.completed") {
		t.Errorf("%d %s", res.StatusCode, body)
	}
}

func TestResponsesRequestsRecorded(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.SetAPIKey("sk-1")
	if res, _ := postResponses(t, srv, `{"model":"m",`+userInput+`}`); res.StatusCode != 401 {
		t.Errorf("status %d without a key", res.StatusCode)
	}
	body := `{"model":"m","stream":true,"store":false,"instructions":"s","max_output_tokens":5,"temperature":0.5,
	  "reasoning":{"effort":"low","summary":"auto"},"include":["reasoning.encrypted_content"],
	  "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
	    {"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"x\":1}"},
	    {"type":"function_call_output","call_id":"call_1","output":"out"}],
	  "tools":[{"type":"function","name":"f","description":"d","strict":false,"parameters":{"type":"object","properties":{}}}]}`
	postResponses(t, srv, body, "Authorization", "Bearer sk-1")
	reqs := srv.ResponsesRequests()
	if len(reqs) != 1 || len(srv.Requests()) != 0 {
		t.Fatalf("%d responses requests, %d chat requests", len(reqs), len(srv.Requests()))
	}
	r := reqs[0]
	if r.Header.Get("Authorization") != "Bearer sk-1" || string(r.Body) != body {
		t.Errorf("header/body not kept")
	}
	if r.Model != "m" || !r.Stream || r.Store == nil || *r.Store || r.Instructions != "s" || *r.MaxOutputTokens != 5 ||
		*r.Temperature != 0.5 || r.Reasoning.Effort != "low" || r.Reasoning.Summary != "auto" || r.Include[0] != "reasoning.encrypted_content" {
		t.Errorf("params: %+v", r)
	}
	in := r.Input
	if len(in) != 3 || in[0].Type != "message" || in[0].Content != "ab" || in[1].Arguments != `{"x":1}` ||
		in[2].CallID != "call_1" || in[2].Output != "out" {
		t.Errorf("input: %+v", in)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "f" || r.Tools[0].Strict == nil || *r.Tools[0].Strict {
		t.Errorf("tools: %+v", r.Tools)
	}
	if last, ok := srv.LastResponsesRequest(); !ok || last.Model != "m" {
		t.Error("LastResponsesRequest")
	}
}

func TestResponsesNonStreaming(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Text("Hel", "lo").ToolCalls(openaitest.Call{ID: "call_1", Name: "f", Args: `{"a":1}`}).Usage(3, 4))
	res, body := postResponses(t, srv, `{"model":"m","input":"hi"}`)
	var r responses.Response
	if err := json.Unmarshal([]byte(body), &r); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %s %v", res.StatusCode, body, err)
	}
	if r.Object != "response" || r.Status != "completed" || r.OutputText() != "Hello" || len(r.Output) != 2 ||
		r.Output[1].Arguments.OfString != `{"a":1}` || r.Usage.InputTokens != 3 || r.Usage.OutputTokens != 4 || !strings.Contains(body, `"store":true`) {
		t.Errorf("response: %s", body)
	}
}

func TestResponsesRawAndStatus(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.Raw([]byte("event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n")),
		openaitest.Status(429, "").Header("Retry-After", "3"))
	if _, got := postResponses(t, srv, `{"model":"m","stream":true,`+userInput+`}`); got != "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n" {
		t.Errorf("raw replay: %q", got)
	}
	res, body := postResponses(t, srv, `{"model":"m","stream":true,`+userInput+`}`)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "3" || !strings.Contains(body, "rate_limit_exceeded") {
		t.Errorf("%d %v %s", res.StatusCode, res.Header, body)
	}
	res, _ = postResponses(t, srv, `{"model":"m",`+userInput+`}`)
	if res.StatusCode != 200 {
		t.Errorf("default answer: %d", res.StatusCode)
	}
}
