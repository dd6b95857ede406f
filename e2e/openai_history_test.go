package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// Resent history, conversations and deleted responses through the
// official Go SDK (API.md, "Stateless clients and Chat Completions").

func userMsg(s string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemParamOfMessage(s, responses.EasyInputMessageRoleUser)
}

func assistantMsg(s string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemParamOfMessage(s, responses.EasyInputMessageRoleAssistant)
}

// outputs are a response's output items as input items, as a client that
// keeps the history resends them.
func outputs(t *testing.T, r *responses.Response) []responses.ResponseInputItemUnionParam {
	t.Helper()
	var out []responses.ResponseInputItemUnionParam
	for _, o := range r.Output {
		switch o.Type {
		case "message":
			p := o.AsMessage().ToParam()
			out = append(out, responses.ResponseInputItemUnionParam{OfOutputMessage: &p})
		case "function_call":
			p := o.AsFunctionCall().ToParam()
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCall: &p})
		case "reasoning":
			p := o.AsReasoning().ToParam()
			out = append(out, responses.ResponseInputItemUnionParam{OfReasoning: &p})
		default:
			t.Fatalf("output item %s", o.RawJSON())
		}
	}
	return out
}

func join(parts ...[]responses.ResponseInputItemUnionParam) responses.ResponseNewParamsInputUnion {
	var all []responses.ResponseInputItemUnionParam
	for _, p := range parts {
		all = append(all, p...)
	}
	return items(all...)
}

// apiMessage is an SDK error with the body's message.
func apiMessage(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.Error() + ": " + apiErr.Message
	}
	return err.Error()
}

func one(it ...responses.ResponseInputItemUnionParam) []responses.ResponseInputItemUnionParam {
	return it
}

func (s *server) turnCount(t *testing.T, sid string) int {
	t.Helper()
	status, body := s.call("GET", "/v1/sessions/"+sid+"/turns?limit=100", nil)
	if status != 200 {
		t.Fatalf("turns: %d %v", status, body)
	}
	return len(body["data"].([]any))
}

func TestOpenAIResentHistory(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test",
		"tools": []any{obj{"name": "lookup", "description": "looks up", "input_schema": obj{"type": "object"}, "client": true}}})
	ctx := context.Background()

	model.Enqueue(openaitest.Reasoning("thinking").Text("Hello"))
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("hi")})
	if err != nil {
		t.Fatal(err)
	}
	sid := first.Conversation.ID
	// Reasoning is also its summary, for clients that read only that.
	if r := first.Output[0].AsReasoning(); len(r.Summary) != 1 || r.Summary[0].Text != "thinking" || r.Summary[0].Type != "summary_text" {
		t.Fatalf("reasoning summary: %s", first.Output[0].RawJSON())
	}

	// The whole history resent with the output items: chains.
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "lookup", Args: `{"q":"x"}`}))
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot",
		Input: join(one(userMsg("hi")), outputs(t, first), one(userMsg("look it up")))})
	if err != nil {
		t.Fatal(err)
	}
	if second.Conversation.ID != sid || second.PreviousResponseID != first.ID {
		t.Fatalf("resent history: conversation %s previous %q", second.Conversation.ID, second.PreviousResponseID)
	}
	if got := strings.Join(userTexts(t, model), "|"); got != "hi|look it up" {
		t.Fatalf("the model got user messages %q (history doubled?)", got)
	}
	// A function_call_output after the resent history resolves the call.
	call := second.Output[0].AsFunctionCall()
	model.Enqueue(openaitest.Text("found"))
	third, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot",
		Input: join(one(userMsg("hi")), outputs(t, first), one(userMsg("look it up")), outputs(t, second), one(fnOutput(call.CallID, "42")))})
	if err != nil {
		t.Fatal(err)
	}
	if third.OutputText() != "found" || third.PreviousResponseID != second.ID {
		t.Fatalf("third: %s", third.RawJSON())
	}

	// The same without ids (content only) and an edited last question: forks at first.
	model.Enqueue(openaitest.Text("forked"))
	fork, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot",
		Input: items(userMsg("hi"), assistantMsg("Hello"), userMsg("something else"))})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Conversation.ID != sid || fork.PreviousResponseID != first.ID {
		t.Fatalf("fork by content: conversation %s previous %q", fork.Conversation.ID, fork.PreviousResponseID)
	}
	// item_reference (the AI SDK's way), with Forge's item id.
	model.Enqueue(openaitest.Text("by reference"))
	ref, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot",
		Input: items(userMsg("hi"), responses.ResponseInputItemParamOfItemReference(first.Output[1].ID), userMsg("ref"))})
	if err != nil {
		t.Fatal(apiMessage(err))
	}
	if ref.PreviousResponseID != first.ID {
		t.Fatalf("item_reference: previous %q", ref.PreviousResponseID)
	}
	if n := s.turnCount(t, sid); n != 5 {
		t.Fatalf("%d turns, want 5: nothing runs twice", n)
	}

	// Hostile: an unknown reference, a huge input, are 4xx and store nothing.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot",
		Input: items(responses.ResponseInputItemParamOfItemReference("msg_01AAAAAAAAAAAAAAAAAAAAAAAA_01AAAAAAAAAAAAAAAAAAAAAAAA"), userMsg("x"))})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "item_not_found" {
		t.Fatalf("unknown item_reference: %v", err)
	}
	huge := make([]responses.ResponseInputItemUnionParam, 10001)
	for i := range huge {
		huge[i] = userMsg("a")
	}
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: items(huge...)})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("huge input: %v", err)
	}
	if n := s.turnCount(t, sid); n != 5 {
		t.Fatalf("%d turns after refusals", n)
	}

	// A conversation never seen: imported, one turn runs.
	model.Enqueue(openaitest.Text("imported"))
	imp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot",
		Input: items(userMsg("old q"), assistantMsg("old a"), userMsg("new q"))})
	if err != nil {
		t.Fatal(err)
	}
	if imp.Conversation.ID == sid || s.turnCount(t, imp.Conversation.ID) != 1 {
		t.Fatalf("import: %s", imp.RawJSON())
	}
	if got := strings.Join(userTexts(t, model), "|"); got != "old q|new q" {
		t.Fatalf("the imported history sent to the model: %q", got)
	}
}

func TestOpenAIConversationsAndDelete(t *testing.T) {
	s, model, client := startOpenAI(t)
	s.agent(obj{"name": "bot", "model": "openai/gpt-test"})
	ctx := context.Background()

	conv, err := client.Conversations.New(ctx, conversations.ConversationNewParams{
		Items:    []responses.ResponseInputItemUnionParam{userMsg("my name is Ada"), assistantMsg("Hi Ada")},
		Metadata: map[string]string{"topic": "names"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.Conversations.Get(ctx, conv.ID)
	if err != nil || got.ID != conv.ID {
		t.Fatalf("get: %v %+v", err, got)
	}
	model.Enqueue(openaitest.Text("You are Ada"))
	r1, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("who am I?"),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Conversation.ID != conv.ID {
		t.Fatalf("response conversation %q", r1.Conversation.ID)
	}
	if got := strings.Join(userTexts(t, model), "|"); got != "my name is Ada|who am I?" {
		t.Fatalf("the model got %q", got)
	}
	page, err := client.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, it := range page.Data {
		kinds = append(kinds, it.Type+":"+it.Role)
	}
	if strings.Join(kinds, ",") != "message:user,message:assistant,message:user,message:assistant" || page.Data[3].ID != r1.Output[0].ID {
		t.Fatalf("items %v %s", kinds, page.RawJSON())
	}
	item, err := client.Conversations.Items.Get(ctx, conv.ID, r1.Output[0].ID, conversations.ItemGetParams{})
	if err != nil || item.ID != r1.Output[0].ID {
		t.Fatalf("item get: %v", err)
	}
	var apiErr *openai.Error
	if _, err := client.Conversations.Items.Delete(ctx, conv.ID, item.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("item delete: %v", err)
	}

	// Delete a response: gone by id, its history kept.
	model.Enqueue(openaitest.Text("still Ada"))
	r2, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("again?"),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Responses.Delete(ctx, r1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("deleted response: %v", err)
	}
	if _, err := client.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{}); err != nil {
		t.Fatalf("the later response: %v", err)
	}
	// Cancelling a finished response says so in OpenAI's words.
	_, err = client.Responses.Cancel(ctx, r2.ID)
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "completed") {
		t.Fatalf("cancel a finished response: %v", err)
	}

	del, err := client.Conversations.Delete(ctx, conv.ID)
	if err != nil || !del.Deleted {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if _, err := client.Conversations.Get(ctx, conv.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("deleted conversation: %v", err)
	}
	if _, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "bot", Input: text("x"),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("response in a deleted conversation: %v", err)
	}
}
