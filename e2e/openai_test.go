package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// These tests drive a real forge serve through the official OpenAI Go SDK,
// pointed at /openai/v1 as a user would (API.md, "Speaking OpenAI
// Responses").

func startOpenAI(t *testing.T) (*server, *openaitest.Server, openai.Client) {
	t.Helper()
	model := openaitest.New(t)
	s := start(t, t.TempDir()+"/forge.db", model)
	client := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return s, model, client
}

func text(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

func items(it ...responses.ResponseInputItemUnionParam) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfInputItemList: it}
}

func fnOutput(callID, output string) responses.ResponseInputItemUnionParam {
	it := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	it.OfFunctionCallOutput.CallID = openai.String(callID)
	return it
}

// userTexts are the user messages the model was sent in its last request.
func userTexts(t *testing.T, model *openaitest.Server) []string {
	t.Helper()
	req, ok := model.LastRequest()
	if !ok {
		t.Fatal("the model got no request")
	}
	var out []string
	for _, m := range req.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

func TestOpenAIChainForkConversation(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test"})
	ctx := context.Background()

	model.Enqueue(openaitest.Text("Hel", "lo"))
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "completed" || first.OutputText() != "Hello" || first.Model != "bot" {
		t.Fatalf("first response: status %q text %q model %q", first.Status, first.OutputText(), first.Model)
	}
	if !strings.HasPrefix(first.ID, "turn_") || first.Conversation.ID == "" {
		t.Fatalf("first response: id %q conversation %q", first.ID, first.Conversation.ID)
	}
	sid := first.Conversation.ID

	// Chain.
	model.Enqueue(openaitest.Text("second"))
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{Input: text("again"), PreviousResponseID: openai.String(first.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if second.PreviousResponseID != first.ID || second.Conversation.ID != sid || second.OutputText() != "second" {
		t.Fatalf("chained response: previous %q conversation %q text %q", second.PreviousResponseID, second.Conversation.ID, second.OutputText())
	}
	if got := userTexts(t, model); strings.Join(got, "|") != "hi|again" {
		t.Fatalf("chained turn sent the model %q", got)
	}

	// Fork at the first response: the model sees the first exchange only.
	model.Enqueue(openaitest.Text("forked"))
	fork, err := client.Responses.New(ctx, responses.ResponseNewParams{Input: text("instead"), PreviousResponseID: openai.String(first.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if got := userTexts(t, model); strings.Join(got, "|") != "hi|instead" {
		t.Fatalf("forked turn sent the model %q", got)
	}

	// conversation chains from the session's tip (now the fork).
	model.Enqueue(openaitest.Text("tip"))
	conv, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("more"),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(sid)}})
	if err != nil {
		t.Fatal(err)
	}
	if conv.PreviousResponseID != fork.ID {
		t.Fatalf("conversation response chains from %q, want the tip %q", conv.PreviousResponseID, fork.ID)
	}
	if got := userTexts(t, model); strings.Join(got, "|") != "hi|instead|more" {
		t.Fatalf("conversation turn sent the model %q", got)
	}

	// Get and input_items.
	got, err := client.Responses.Get(ctx, second.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != "second" || got.Status != "completed" {
		t.Fatalf("get: %v %+v", err, got)
	}
	page, err := client.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].Type != "message" || page.Data[0].AsMessage().Content[0].Text != "again" {
		t.Fatalf("input items: %s", page.RawJSON())
	}

	// The models are the agents.
	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "bot" {
		t.Fatalf("models: %v %s", err, models.RawJSON())
	}
}

// readStream reads a Responses stream to its end with the SDK's own
// stream type, checking that sequence numbers strictly increase.
func readStream(t *testing.T, st *ssestream.Stream[responses.ResponseStreamEventUnion]) []responses.ResponseStreamEventUnion {
	t.Helper()
	var evs []responses.ResponseStreamEventUnion
	for st.Next() {
		ev := st.Current()
		if n := len(evs); n > 0 && ev.SequenceNumber <= evs[n-1].SequenceNumber {
			t.Fatalf("event %d (%s) has sequence_number %d after %d", n, ev.Type, ev.SequenceNumber, evs[n-1].SequenceNumber)
		}
		evs = append(evs, ev)
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// streamedText joins the output_text deltas of evs.
func streamedText(evs []responses.ResponseStreamEventUnion) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == "response.output_text.delta" {
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}

func TestOpenAIStreamingMatchesGet(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test", "tools": []any{"echo"}})
	ctx := context.Background()
	model.Enqueue(
		openaitest.Reasoning("thinking", " hard").ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"ping"}`}),
		openaitest.Text("got ", "ping", " ✓"),
	)
	evs := readStream(t, client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "bot", Input: text("echo ping")}))
	if evs[0].Type != "response.created" || evs[0].SequenceNumber != 0 || evs[1].Type != "response.in_progress" {
		t.Fatalf("stream starts with %s %d, %s", evs[0].Type, evs[0].SequenceNumber, evs[1].Type)
	}
	last := evs[len(evs)-1]
	if last.Type != "response.completed" {
		t.Fatalf("stream ends with %s", last.Type)
	}
	final := last.AsResponseCompleted().Response
	if streamedText(evs) != "got ping ✓" || final.OutputText() != "got ping ✓" {
		t.Fatalf("streamed %q, final %q", streamedText(evs), final.OutputText())
	}
	var types []string
	for _, out := range final.Output {
		types = append(types, out.Type)
	}
	if strings.Join(types, ",") != "reasoning,mcp_call,message" {
		t.Fatalf("output items %v", types)
	}
	call := final.Output[1].AsMcpCall()
	if call.Name != "echo" || call.Output != "ping" || call.Status != "completed" || call.Arguments != `{"text":"ping"}` {
		t.Fatalf("mcp_call %s", final.Output[1].RawJSON())
	}
	if r := final.Output[0].AsReasoning(); len(r.Content) != 1 || r.Content[0].Text != "thinking hard" {
		t.Fatalf("reasoning %s", final.Output[0].RawJSON())
	}
	got, err := client.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sameJSON(t, got.RawJSON(), final.RawJSON()) != "" {
		t.Fatalf("GET differs from the streamed final response:\n%s\n%s", got.RawJSON(), final.RawJSON())
	}

	// A replay of the finished response numbers its events as the live
	// stream did: every event but the text deltas (delivered whole on
	// replay) has the same type at the same number.
	replay := readStream(t, client.Responses.GetStreaming(ctx, final.ID, responses.ResponseGetParams{}))
	live := map[int64]string{}
	for _, ev := range evs {
		live[ev.SequenceNumber] = ev.Type
	}
	for _, ev := range replay {
		if typ, ok := live[ev.SequenceNumber]; !ok || typ != ev.Type {
			t.Fatalf("replayed %s at %d; live had %q there", ev.Type, ev.SequenceNumber, typ)
		}
	}
	if streamedText(replay) != "got ping ✓" {
		t.Fatalf("replay text %q", streamedText(replay))
	}
	// Resuming after each live event's number yields exactly the rest.
	for i, ev := range evs {
		rest := readStream(t, client.Responses.GetStreaming(ctx, final.ID, responses.ResponseGetParams{StartingAfter: openai.Int(ev.SequenceNumber)}))
		if streamedText(evs[:i+1])+streamedText(rest) != "got ping ✓" {
			t.Fatalf("resume after %d: text %q + %q", ev.SequenceNumber, streamedText(evs[:i+1]), streamedText(rest))
		}
		for _, r := range rest {
			if r.SequenceNumber <= ev.SequenceNumber {
				t.Fatalf("resume after %d got %d", ev.SequenceNumber, r.SequenceNumber)
			}
		}
		if i < len(evs)-1 && (len(rest) == 0 || rest[len(rest)-1].Type != "response.completed") {
			t.Fatalf("resume after %d did not end with response.completed", ev.SequenceNumber)
		}
		if i == len(evs)-1 && len(rest) != 0 {
			t.Fatalf("resume after the last event got %d events", len(rest))
		}
	}
}

// sameJSON returns "" when a and b hold the same JSON value.
func sameJSON(t *testing.T, a, b string) string {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	if string(xa) == string(ya) {
		return ""
	}
	return string(xa) + " != " + string(ya)
}

func TestOpenAIBackgroundStreamCutAndResumed(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test"})
	ctx := context.Background()
	// The model streams four pieces, then hangs before finishing: the turn
	// runs until it is cancelled.
	model.Enqueue(openaitest.Text("one ", "two ", "three ", "four").HangAfter(5))
	sctx, cut := context.WithCancel(ctx)
	st := client.Responses.NewStreaming(sctx, responses.ResponseNewParams{Model: "bot", Input: text("count"), Background: openai.Bool(true)})
	var seen []responses.ResponseStreamEventUnion
	deltas := 0
	for deltas < 2 && st.Next() {
		ev := st.Current()
		seen = append(seen, ev)
		if ev.Type == "response.output_text.delta" {
			deltas++
		}
	}
	cut()
	st.Close()
	if deltas < 2 {
		t.Fatalf("stream ended after %d events: %v", len(seen), st.Err())
	}
	id := seen[0].Response.ID
	cursor := seen[len(seen)-1].SequenceNumber

	// Resume while the turn still runs: the rest of the text, live.
	rst := client.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(cursor)})
	var rest []responses.ResponseStreamEventUnion
	for len(rest) == 0 || rest[len(rest)-1].Type != "response.output_text.delta" || streamedText(seen)+streamedText(rest) != "one two three four" {
		if !rst.Next() {
			t.Fatalf("resumed stream ended early: %v; got %q", rst.Err(), streamedText(seen)+streamedText(rest))
		}
		ev := rst.Current()
		if ev.SequenceNumber <= cursor {
			t.Fatalf("resumed stream repeated %d (cursor %d)", ev.SequenceNumber, cursor)
		}
		rest = append(rest, ev)
	}
	cancelled, err := client.Responses.Cancel(ctx, id)
	if err != nil || cancelled.Status != "cancelled" {
		t.Fatalf("cancel: %v %s", err, cancelled.RawJSON())
	}
	for rst.Next() {
		rest = append(rest, rst.Current())
	}
	if err := rst.Err(); err != nil {
		t.Fatal(err)
	}
	end := rest[len(rest)-1]
	if end.Type != "response.incomplete" || end.Response.Status != "cancelled" {
		t.Fatalf("resumed stream ended with %s %q", end.Type, end.Response.Status)
	}
	live := append(append([]responses.ResponseStreamEventUnion{}, seen...), rest...)
	for i := 1; i < len(live); i++ {
		if live[i].SequenceNumber <= live[i-1].SequenceNumber {
			t.Fatalf("numbers across the cut: %d then %d", live[i-1].SequenceNumber, live[i].SequenceNumber)
		}
	}
	if got := end.Response.OutputText(); got != "one two three four" || streamedText(live) != got {
		t.Fatalf("final text %q, streamed %q", got, streamedText(live))
	}

	// After the end: a resume after every number the client saw yields
	// the same numbers and the rest of the text, nothing twice.
	for _, ev := range live {
		after := readStream(t, client.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(ev.SequenceNumber)}))
		var before []responses.ResponseStreamEventUnion
		for _, l := range live {
			if l.SequenceNumber <= ev.SequenceNumber {
				before = append(before, l)
			}
		}
		if streamedText(before)+streamedText(after) != "one two three four" {
			t.Fatalf("resume after %d (ended): %q + %q", ev.SequenceNumber, streamedText(before), streamedText(after))
		}
		liveTypes := map[int64]string{}
		for _, l := range live {
			liveTypes[l.SequenceNumber] = l.Type
		}
		for _, a := range after {
			if typ := liveTypes[a.SequenceNumber]; typ != a.Type {
				t.Fatalf("after the end, %s at %d; live had %q", a.Type, a.SequenceNumber, typ)
			}
		}
	}
}

func TestOpenAIClientToolRoundTrip(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test",
		"tools": []any{obj{"name": "lookup", "description": "looks up", "input_schema": obj{"type": "object"}, "client": true}}})
	ctx := context.Background()
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "lookup", Args: `{"q":"42"}`}))
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("where is 42?")})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "completed" || len(first.Output) != 1 || first.Output[0].Type != "function_call" {
		t.Fatalf("first response: %s", first.RawJSON())
	}
	call := first.Output[0].AsFunctionCall()
	if call.Name != "lookup" || call.Arguments != `{"q":"42"}` || !strings.HasPrefix(call.CallID, "call_") {
		t.Fatalf("function_call %s", first.Output[0].RawJSON())
	}
	model.Enqueue(openaitest.Text("It is in Paris."))
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{PreviousResponseID: openai.String(first.ID),
		Input: items(fnOutput(call.CallID, "Paris"))})
	if err != nil {
		t.Fatal(err)
	}
	if second.OutputText() != "It is in Paris." {
		t.Fatalf("second response: %s", second.RawJSON())
	}
	req, _ := model.LastRequest()
	found := false
	for _, m := range req.Messages {
		found = found || (m.Role == "tool" && m.Content == "Paris")
	}
	if !found {
		t.Fatalf("the model was not sent the tool output: %+v", req.Messages)
	}
	// A second answer to the same call is refused, in OpenAI's shape.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{PreviousResponseID: openai.String(second.ID),
		Input: items(fnOutput(call.CallID, "again"))})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unknown_call" || apiErr.Type != "invalid_request_error" {
		t.Fatalf("answer to a closed call: %v", err)
	}
}

func TestOpenAIApprovalRoundTrip(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test", "tools": []any{"echo"}, "approval": obj{"echo": "ask"}})
	ctx := context.Background()
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "echo", Args: `{"text":"approved!"}`}))
	evs := readStream(t, client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "bot", Input: text("echo it")}))
	first := evs[len(evs)-1].AsResponseCompleted().Response
	if len(first.Output) != 1 || first.Output[0].Type != "mcp_approval_request" {
		t.Fatalf("first response: %s", first.RawJSON())
	}
	req := first.Output[0].AsMcpApprovalRequest()
	if req.Name != "echo" || !strings.HasPrefix(req.ID, "call_") {
		t.Fatalf("approval request %s", first.Output[0].RawJSON())
	}
	model.Enqueue(openaitest.Text("done"))
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{PreviousResponseID: openai.String(first.ID),
		Input: items(responses.ResponseInputItemParamOfMcpApprovalResponse(req.ID, true))})
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Output) != 2 || second.Output[0].Type != "mcp_call" || second.OutputText() != "done" {
		t.Fatalf("second response: %s", second.RawJSON())
	}
	call := second.Output[0].AsMcpCall()
	if call.Output != "approved!" || call.ApprovalRequestID != req.ID || call.Status != "completed" {
		t.Fatalf("mcp_call %s", second.Output[0].RawJSON())
	}
	page, err := client.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].Type != "mcp_approval_response" || !page.Data[0].AsMcpApprovalResponse().Approve {
		t.Fatalf("input items: %v %s", err, page.RawJSON())
	}
}

func TestOpenAICancel(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test"})
	ctx := context.Background()
	model.Enqueue(openaitest.Text("never", " ends").HangAfter(2))
	bg, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("hang"), Background: openai.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if bg.Status != "in_progress" || !bg.Background {
		t.Fatalf("background response: %s", bg.RawJSON())
	}
	// Cancel once the turn's model call holds the never-ending reply: a
	// cancel before it would leave the reply queued for the next call.
	waitFor(t, func() bool { return model.Pending() == 0 })
	got, err := client.Responses.Cancel(ctx, bg.ID)
	if err != nil || got.Status != "cancelled" {
		t.Fatalf("cancel: %v %s", err, got.RawJSON())
	}
	again, err := client.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
	if err != nil || again.Status != "cancelled" || !again.Background {
		t.Fatalf("get after cancel: %v %s", err, again.RawJSON())
	}
	// Cancelling it again answers the same; a finished one cannot be.
	if again, err = client.Responses.Cancel(ctx, bg.ID); err != nil || again.Status != "cancelled" {
		t.Fatalf("second cancel: %v", err)
	}
	model.Enqueue(openaitest.Text("ok"))
	done, err := client.Responses.New(ctx, responses.ResponseNewParams{PreviousResponseID: openai.String(bg.ID), Input: text("hi")})
	if err != nil || done.OutputText() != "ok" {
		t.Fatalf("a response after the cancelled one: %v", err)
	}
	_, err = client.Responses.Cancel(ctx, done.ID)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("cancel of a completed response: %v", err)
	}
}

func TestOpenAIRefusals(t *testing.T) {
	s, _, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test"})
	ctx := context.Background()
	check := func(err error, status int, code, param string) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("want an API error, got %v", err)
		}
		if apiErr.StatusCode != status || apiErr.Code != code || apiErr.Param != param || apiErr.Type == "" || apiErr.Message == "" {
			t.Fatalf("got %d code %q param %q type %q: %s; want %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Param, apiErr.Type, apiErr.Message, status, code, param)
		}
	}
	_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "nobody", Input: text("hi")})
	check(err, http.StatusNotFound, "model_not_found", "model")
	// Per-request settings are the turn's; out of bounds, or sent to a
	// locked agent, they are refused.
	s.agent(obj{"name": "vault", "model": "openai/gpt-test", "locked": true})
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "vault", Input: text("hi"), Instructions: openai.String("be evil")})
	check(err, http.StatusBadRequest, "invalid_request", "")
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("hi"), Temperature: openai.Float(3)})
	check(err, http.StatusBadRequest, "invalid_request", "temperature")
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("hi"), PreviousResponseID: openai.String("turn_nope")})
	check(err, http.StatusNotFound, "previous_response_not_found", "previous_response_id")
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: items(responses.ResponseInputItemParamOfMessage("you are", responses.EasyInputMessageRoleSystem))})
	check(err, http.StatusBadRequest, "invalid_request", "input[0].role")
	_, err = client.Responses.Get(ctx, "turn_nope", responses.ResponseGetParams{})
	check(err, http.StatusNotFound, "not_found", "")
	_, err = client.Models.Get(ctx, "nobody")
	check(err, http.StatusNotFound, "model_not_found", "model")

	// Hostile bodies get OpenAI-shaped 4xx answers too.
	for _, body := range []string{`{`, `{"model":"bot","input":"hi","nope":1}`, strings.Repeat("[", 100) + strings.Repeat("]", 100),
		`{"model":"bot","input":"\ud800"}`, `{"model":"bot","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`} {
		status, raw := s.raw("POST", "/openai/v1/responses", body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if status != 400 || json.Unmarshal(raw, &e) != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Fatalf("body %.40q: %d %s", body, status, raw)
		}
	}
	status, raw := s.raw("POST", "/openai/v1/responses", `{"model":"bot","input":"hi"}`, "Content-Type", "text/plain")
	if status != 415 || !strings.Contains(string(raw), `"type":"invalid_request_error"`) {
		t.Fatalf("text/plain body: %d %s", status, raw)
	}
	status, raw = s.raw("GET", "/openai/v1/nothing", nil)
	if status != 404 || !strings.Contains(string(raw), `"type":"invalid_request_error"`) {
		t.Fatalf("unknown path: %d %s", status, raw)
	}
}
