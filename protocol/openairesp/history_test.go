package openairesp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

type resp struct {
	ID                 string              `json:"id"`
	Status             string              `json:"status"`
	PreviousResponseID *string             `json:"previous_response_id"`
	Conversation       struct{ ID string } `json:"conversation"`
	Output             []json.RawMessage   `json:"output"`
	Error              *struct {
		Code  string  `json:"code"`
		Param *string `json:"param"`
	} `json:"error"`
}

func post(t *testing.T, s *prototest.Stack, body string, header ...string) (int, resp) {
	t.Helper()
	status, raw := s.Do("POST", "/openai/v1/responses", body, header...)
	var r resp
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return status, r
}

func ok(t *testing.T, s *prototest.Stack, body string, header ...string) resp {
	t.Helper()
	status, r := post(t, s, body, header...)
	if status != 200 || r.Status != "completed" {
		t.Fatalf("%.200s: %d %+v", body, status, r)
	}
	return r
}

// turns counts a session's turns (nothing may run twice).
func turns(t *testing.T, s *prototest.Stack, sid string, header ...string) int {
	t.Helper()
	status, raw := s.Do("GET", "/v1/sessions/"+sid+"/turns?limit=100", "", header...)
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	if status != 200 || json.Unmarshal([]byte(raw), &page) != nil {
		t.Fatalf("turns: %d %s", status, raw)
	}
	return len(page.Data)
}

func user(text string) string { return `{"role":"user","content":"` + text + `"}` }

func TestResentHistory(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	r1 := ok(t, s, `{"model":"bot","input":"hi"}`)
	sid := r1.Conversation.ID
	item := string(r1.Output[0]) // the answer as the client got it, with its id

	// The SDKs' default: the whole conversation with the output items.
	r2 := ok(t, s, `{"model":"bot","input":[`+user("hi")+`,`+item+`,`+user("again")+`]}`)
	if r2.Conversation.ID != sid || r2.PreviousResponseID == nil || *r2.PreviousResponseID != r1.ID {
		t.Fatalf("resent with ids: %+v, want a chain from %s in %s", r2, r1.ID, sid)
	}
	// The same by content (ids dropped): forks from r1, as an edit does.
	// (Fields clients echo back on earlier items are not read.)
	r3 := ok(t, s, `{"model":"bot","input":[{"role":"user","content":"hi","echoed":true},{"role":"assistant","content":"echo: hi","phase":"final"},`+user("other")+`]}`)
	if r3.Conversation.ID != sid || *r3.PreviousResponseID != r1.ID {
		t.Fatalf("resent by content: %+v", r3)
	}
	// item_reference (the AI SDK's), with previous_response_id as well.
	var it struct{ ID string }
	_ = json.Unmarshal(r1.Output[0], &it)
	r4 := ok(t, s, `{"model":"bot","input":[`+user("hi")+`,{"type":"item_reference","id":"`+it.ID+`"},`+user("ref")+`]}`)
	if r4.Conversation.ID != sid || *r4.PreviousResponseID != r1.ID {
		t.Fatalf("item_reference: %+v", r4)
	}
	r5 := ok(t, s, `{"model":"bot","previous_response_id":"`+r4.ID+`","input":[{"type":"item_reference","id":"`+it.ID+`"},`+user("prev")+`]}`)
	if *r5.PreviousResponseID != r4.ID {
		t.Fatalf("previous_response_id with history: %+v", r5)
	}
	// A conversation that continued by content is found again by content.
	var it3 struct{ ID string }
	_ = json.Unmarshal(r3.Output[0], &it3)
	r6 := ok(t, s, `{"model":"bot","input":[`+user("hi")+`,{"role":"assistant","content":"echo: hi"},`+user("other")+`,{"role":"assistant","content":[{"type":"output_text","text":"echo: other"}]},`+user("more")+`]}`)
	if *r6.PreviousResponseID != r3.ID {
		t.Fatalf("second resend by content: %+v, want a chain from %s", r6, r3.ID)
	}
	if n := turns(t, s, sid); n != 6 {
		t.Fatalf("%d turns, want 6 (nothing run twice)", n)
	}

	// A conversation never seen is imported into a new session, not run.
	r7 := ok(t, s, `{"model":"bot","input":[`+user("a")+`,{"role":"assistant","content":"b"},`+user("c")+`]}`)
	if r7.Conversation.ID == sid || r7.PreviousResponseID != nil || turns(t, s, r7.Conversation.ID) != 1 {
		t.Fatalf("import: %+v", r7)
	}
	_, raw := s.Do("GET", "/v1/sessions/"+r7.Conversation.ID+"/messages", "")
	if !strings.Contains(raw, `"b"`) || !strings.Contains(raw, "echo: c") {
		t.Fatalf("imported messages: %s", raw)
	}
	// ... and resent with its answer, chains there.
	r8 := ok(t, s, `{"model":"bot","input":[`+user("a")+`,{"role":"assistant","content":"b"},`+user("c")+`,{"role":"assistant","content":"echo: c"},`+user("d")+`]}`)
	if r8.Conversation.ID != r7.Conversation.ID || *r8.PreviousResponseID != r7.ID {
		t.Fatalf("resent import: %+v", r8)
	}
	// In a named conversation, history it does not hold is refused.
	status, r := post(t, s, `{"model":"bot","conversation":"`+sid+`","input":[`+user("a")+`,{"role":"assistant","content":"b"},`+user("c")+`]}`)
	if status != 400 || r.Error == nil || r.Error.Code != "conversation_mismatch" {
		t.Fatalf("mismatch in a conversation: %d %+v", status, r)
	}
	status, r = post(t, s, `{"model":"bot","previous_response_id":"`+r7.ID+`","input":[`+user("hi")+`,`+item+`,`+user("x")+`]}`)
	if status != 400 || r.Error == nil || r.Error.Code != "conversation_mismatch" {
		t.Fatalf("items of another conversation: %d %+v", status, r)
	}
}

func TestResentHistoryHostile(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "a", "kb": "b"}, openairesp.Protocol{})
	for _, k := range []string{"ka", "kb"} {
		if status, body := s.Do("POST", "/v1/agents", `{"name":"bot","model":"scripted/echo"}`, "Authorization", "Bearer "+k); status != 201 {
			t.Fatal(status, body)
		}
	}
	a := ok(t, s, `{"model":"bot","input":"secret"}`, "Authorization", "Bearer ka")
	var it struct{ ID string }
	_ = json.Unmarshal(a.Output[0], &it)
	sessions := func() string {
		_, raw := s.Do("GET", "/v1/sessions", "", "Authorization", "Bearer kb")
		return raw
	}
	before := sessions()
	for _, c := range []struct {
		name, input string
		status      int
		param       string
	}{
		{"another tenant's item", `[{"type":"item_reference","id":"` + it.ID + `"},` + user("x") + `]`, 404, "input[0].id"},
		{"another tenant's item resent", `[` + user("secret") + `,` + string(a.Output[0]) + `,` + user("x") + `]`, 404, "input[1].id"},
		{"unknown reference", `[{"type":"item_reference","id":"nothing"},` + user("x") + `]`, 404, "input[0].id"},
		{"reference shaped like Forge's", `[{"type":"item_reference","id":"msg_01ZZZZZZZZZZZZZZZZZZZZZZZZ_01ZZZZZZZZZZZZZZZZZZZZZZZZ"},` + user("x") + `]`, 404, "input[0].id"},
		{"unseen history ending with outputs", `[` + user("a") + `,{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"o"}]`, 400, "input"},
		{"unseen call without output", `[` + user("a") + `,{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` + user("b") + `]`, 400, "input"},
		{"too many items", `[` + strings.Repeat(user("a")+`,`, 10000) + user("b") + `]`, 400, "input"},
	} {
		status, r := post(t, s, `{"model":"bot","input":`+c.input+`}`, "Authorization", "Bearer kb")
		if status != c.status || r.Error == nil || r.Error.Param == nil || *r.Error.Param != c.param {
			t.Errorf("%s: %d %+v, want %d about %s", c.name, status, r, c.status, c.param)
		}
	}
	if after := sessions(); after != before {
		t.Fatalf("a refused request stored a session: %s", after)
	}
}

// A streamed response records its conversation too, and streams the
// reasoning summary events.
func TestResentHistoryStreamed(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"reasoning":"hmm","text":"first"},{"text":"second"}]}}`)
	status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi","stream":true}`)
	evs := events(t, body)
	if status != 200 || evs[len(evs)-1].Type != "response.completed" {
		t.Fatalf("stream: %d %s", status, body)
	}
	first := evs[len(evs)-1].Response.ID
	var summary []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type, "response.reasoning_summary") {
			summary = append(summary, ev.Type+":"+ev.Delta)
		}
	}
	if strings.Join(summary, ",") != "response.reasoning_summary_part.added:,response.reasoning_summary_text.delta:hmm,response.reasoning_summary_text.done:,response.reasoning_summary_part.done:" {
		t.Fatalf("summary events %v", summary)
	}
	r := ok(t, s, `{"model":"bot","input":[`+user("hi")+`,{"role":"assistant","content":"first"},`+user("more")+`]}`)
	if r.PreviousResponseID == nil || *r.PreviousResponseID != first {
		t.Fatalf("resent after a stream: %+v, want a chain from %s", r, first)
	}
}
