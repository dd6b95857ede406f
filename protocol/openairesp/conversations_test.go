package openairesp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

type itemPage struct {
	Data []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"data"`
	HasMore bool `json:"has_more"`
}

func listItems(t *testing.T, s *prototest.Stack, cid, query string) itemPage {
	t.Helper()
	status, raw := s.Do("GET", "/openai/v1/conversations/"+cid+"/items"+query, "")
	var p itemPage
	if status != 200 || json.Unmarshal([]byte(raw), &p) != nil {
		t.Fatalf("items: %d %s", status, raw)
	}
	return p
}

func texts(p itemPage) string {
	var b []string
	for _, it := range p.Data {
		for _, c := range it.Content {
			b = append(b, it.Role+":"+c.Text)
		}
	}
	return strings.Join(b, "|")
}

func TestConversations(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)

	// Created with initial items and metadata: pending until its first
	// response, which imports the items and runs only the new message.
	status, raw := s.Do("POST", "/openai/v1/conversations", `{"metadata":{"k":"v"},"items":[`+user("earlier")+`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"noted"}]}]}`)
	var conv struct {
		ID       string            `json:"id"`
		Object   string            `json:"object"`
		Metadata map[string]string `json:"metadata"`
	}
	if status != 200 || json.Unmarshal([]byte(raw), &conv) != nil || conv.Object != "conversation" || conv.Metadata["k"] != "v" {
		t.Fatalf("create: %d %s", status, raw)
	}
	if got := texts(listItems(t, s, conv.ID, "?order=asc")); got != "user:earlier|assistant:noted" {
		t.Fatalf("pending items: %q", got)
	}
	r1 := ok(t, s, `{"model":"bot","input":"now","conversation":"`+conv.ID+`"}`)
	if r1.Conversation.ID != conv.ID || turns(t, s, conv.ID) != 1 {
		t.Fatalf("first response: %+v", r1)
	}
	p := listItems(t, s, conv.ID, "?order=asc")
	if got := texts(p); got != "user:earlier|assistant:noted|user:now|assistant:echo: now" {
		t.Fatalf("items after the first response: %q", got)
	}
	var it struct{ ID string }
	_ = json.Unmarshal(r1.Output[0], &it)
	if p.Data[3].ID != it.ID {
		t.Fatalf("item id %q, the response's %q", p.Data[3].ID, it.ID)
	}
	if status, raw := s.Do("GET", "/openai/v1/conversations/"+conv.ID+"/items/"+it.ID, ""); status != 200 || !strings.Contains(raw, "echo: now") {
		t.Fatalf("item get: %d %s", status, raw)
	}
	if page := listItems(t, s, conv.ID, "?limit=1"); len(page.Data) != 1 || !page.HasMore || page.Data[0].ID != it.ID {
		t.Fatalf("newest first, paged: %+v", page)
	}
	// Adding the items it already holds (the Agents SDK after a run) stores
	// nothing; anything else is refused: the log is append-only by turns.
	if status, raw := s.Do("POST", "/openai/v1/conversations/"+conv.ID+"/items", `{"items":[`+user("now")+`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"echo: now"}]}]}`); status != 200 {
		t.Fatalf("adding held items: %d %s", status, raw)
	}
	if status, raw := s.Do("POST", "/openai/v1/conversations/"+conv.ID+"/items", `{"items":[`+user("new")+`]}`); status != 400 || !strings.Contains(raw, "append_only") {
		t.Fatalf("adding new items: %d %s", status, raw)
	}
	if status, raw := s.Do("DELETE", "/openai/v1/conversations/"+conv.ID+"/items/"+it.ID, ""); status != 400 || !strings.Contains(raw, "append-only") {
		t.Fatalf("item delete: %d %s", status, raw)
	}
	if n := len(listItems(t, s, conv.ID, "").Data); n != 4 || turns(t, s, conv.ID) != 1 {
		t.Fatalf("%d items after refused changes", n)
	}

	// A pending conversation is bound by the items of a run made without
	// it (the Agents SDK's OpenAIConversationsSession).
	_, raw = s.Do("POST", "/openai/v1/conversations", `{}`)
	var c2 struct{ ID string }
	_ = json.Unmarshal([]byte(raw), &c2)
	r2 := ok(t, s, `{"model":"bot","input":"solo"}`)
	if status, raw := s.Do("POST", "/openai/v1/conversations/"+c2.ID+"/items", `{"items":[`+user("solo")+`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"echo: solo"}]}]}`); status != 200 {
		t.Fatalf("binding items: %d %s", status, raw)
	}
	if got := texts(listItems(t, s, c2.ID, "?order=asc")); got != "user:solo|assistant:echo: solo" {
		t.Fatalf("bound items: %q", got)
	}
	if turns(t, s, r2.Conversation.ID) != 1 {
		t.Fatal("binding ran something")
	}

	// Delete: the conversation and its responses' session go.
	for _, id := range []string{conv.ID, c2.ID} {
		if status, raw := s.Do("DELETE", "/openai/v1/conversations/"+id, ""); status != 200 || !strings.Contains(raw, `"deleted":true`) {
			t.Fatalf("delete: %d %s", status, raw)
		}
		if status, _ := s.Do("GET", "/openai/v1/conversations/"+id, ""); status != 404 {
			t.Fatalf("deleted conversation: %d", status)
		}
	}
	_, raw = s.Do("POST", "/openai/v1/conversations", `{}`)
	var c3 struct{ ID string }
	_ = json.Unmarshal([]byte(raw), &c3)
	if status, _ := s.Do("DELETE", "/openai/v1/conversations/"+c3.ID, ""); status != 200 {
		t.Fatal("delete pending")
	}
	if status, _ := post(t, s, `{"model":"bot","input":"x","conversation":"`+c3.ID+`"}`); status != 404 {
		t.Fatalf("response in a deleted conversation: %d", status)
	}

	// Refusals.
	r2 = ok(t, s, `{"model":"bot","input":"live"}`)
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/openai/v1/conversations/ses_nothing", "", 404},
		{"GET", "/openai/v1/conversations/ses_nothing/items", "", 404},
		{"POST", "/openai/v1/conversations", `{"items":[{"type":"item_reference","id":"x"}]}`, 400},
		{"POST", "/openai/v1/conversations", `{"items":[` + user("a") + `,{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`, 400},
		{"POST", "/openai/v1/conversations", `{"items":42}`, 400},
		{"POST", "/openai/v1/conversations", `{"metadata":{"k":1}}`, 400},
		{"POST", "/openai/v1/conversations/" + r2.Conversation.ID, `{"metadata":{}}`, 400},
		{"GET", "/openai/v1/conversations/" + r2.Conversation.ID + "/items?limit=0", "", 400},
		{"GET", "/openai/v1/conversations/" + r2.Conversation.ID + "/items?after=nothing", "", 400},
		{"GET", "/openai/v1/conversations/" + r2.Conversation.ID + "/items/nothing", "", 404},
		{"POST", "/openai/v1/conversations/" + r2.Conversation.ID + "/items", `{"items":[]}`, 400},
		{"PUT", "/openai/v1/conversations", `{}`, 405},
	} {
		if status, raw := s.Do(c.method, c.path, c.body); status != c.status || !strings.Contains(raw, `"error"`) {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, status, raw, c.status)
		}
	}
}

func TestDeleteResponse(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	r1 := ok(t, s, `{"model":"bot","input":"one"}`)
	r2 := ok(t, s, `{"model":"bot","input":"two","previous_response_id":"`+r1.ID+`"}`)
	if status, raw := s.Do("DELETE", "/openai/v1/responses/"+r1.ID, ""); status != 200 || !strings.Contains(raw, `"deleted":true`) {
		t.Fatalf("delete: %d %s", status, raw)
	}
	var it struct{ ID string }
	_ = json.Unmarshal(r1.Output[0], &it)
	for _, c := range []struct {
		method, path, body string
	}{
		{"GET", "/openai/v1/responses/" + r1.ID, ""},
		{"GET", "/openai/v1/responses/" + r1.ID + "/input_items", ""},
		{"POST", "/openai/v1/responses/" + r1.ID + "/cancel", ""},
		{"DELETE", "/openai/v1/responses/" + r1.ID, ""},
		{"POST", "/openai/v1/responses", `{"model":"bot","input":"x","previous_response_id":"` + r1.ID + `"}`},
		{"POST", "/openai/v1/responses", `{"model":"bot","input":[{"type":"item_reference","id":"` + it.ID + `"},` + user("x") + `]}`},
	} {
		if status, raw := s.Do(c.method, c.path, c.body); status != 404 {
			t.Errorf("%s %s after delete: %d %s", c.method, c.path, status, raw)
		}
	}
	// The history stays: the next response still builds on it.
	if status, raw := s.Do("GET", "/openai/v1/responses/"+r2.ID, ""); status != 200 {
		t.Fatalf("the later response: %d %s", status, raw)
	}
	r3 := ok(t, s, `{"model":"bot","input":"three","previous_response_id":"`+r2.ID+`"}`)
	_, raw := s.Do("GET", "/v1/sessions/"+r3.Conversation.ID+"/messages", "")
	if !strings.Contains(raw, "echo: one") {
		t.Fatalf("history lost: %s", raw)
	}
	if status, _ := s.Do("GET", "/openai/v1/responses/"+r3.ID, ""); status != 200 {
		t.Fatal("r3")
	}
}
