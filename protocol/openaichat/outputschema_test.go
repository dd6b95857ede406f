package openaichat_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openaichat"
)

const responseFormat = `"response_format":{"type":"json_schema","json_schema":{"name":"triage","strict":true,"schema":{"type":"object","properties":{"priority":{"enum":["low","high"]}},"required":["priority"],"additionalProperties":false}}}`

// TestResponseFormatJSONSchema: response_format json_schema is the turn's
// output schema: an invalid answer is repaired and the completion's
// content is the valid JSON; the turn has output.json.
func TestResponseFormatJSONSchema(t *testing.T) {
	s := prototest.New(t, openaichat.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"high, I think"},{"text":"{\"priority\":\"high\"}"}]}}`)
	status, body := s.Do("POST", "/openai/v1/chat/completions", `{"model":"bot","messages":[{"role":"user","content":"site down"}],`+responseFormat+`}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var resp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Choices) != 1 {
		t.Fatalf("%s (%v)", body, err)
	}
	if c := resp.Choices[0].Message.Content; c != `{"priority":"high"}` {
		t.Fatalf("content %q", c)
	}
	sessions, _, err := s.Store.ListSessions(t.Context(), forge.DefaultTenant, forge.SessionQuery{})
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions %d %v", len(sessions), err)
	}
	turn, err := s.Store.GetTurn(t.Context(), forge.DefaultTenant, sessions[0].ID, *sessions[0].TipTurnID)
	if err != nil || turn.Output == nil || string(turn.Output.JSON) != `{"priority":"high"}` || turn.Iterations != 2 {
		t.Fatalf("turn %+v %v", turn, err)
	}
	// The client resends the answer it got: the conversation chains.
	next := `{"model":"bot","messages":[{"role":"user","content":"site down"},{"role":"assistant","content":"{\"priority\":\"high\"}"},{"role":"user","content":"and now?"}],` + responseFormat + `}`
	if status, body := s.Do("POST", "/openai/v1/chat/completions", next); status != 200 {
		t.Fatalf("resent conversation: %d %s", status, body)
	}
	if sessions, _, _ := s.Store.ListSessions(t.Context(), forge.DefaultTenant, forge.SessionQuery{}); len(sessions) != 1 {
		t.Fatalf("the resent conversation made a new session (%d)", len(sessions))
	}
}

// TestResponseFormatRefused: formats Forge does not take and bad schemas
// are 400s, and no session is made for them.
func TestResponseFormatRefused(t *testing.T) {
	s := prototest.New(t, openaichat.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x"}`)
	for name, f := range map[string]string{
		"json_object":    `{"type":"json_object"}`,
		"unknown type":   `{"type":"yaml"}`,
		"no json_schema": `{"type":"json_schema"}`,
		"bad schema":     `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"objekt"}}}`,
		"remote ref":     `{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"http://127.0.0.1/"}}}`,
		"bad name":       `{"type":"json_schema","json_schema":{"name":"a b","schema":{}}}`,
		"unknown field":  `{"type":"json_schema","json_schema":{"name":"x","schema":{}},"extra":1}`,
	} {
		status, body := s.Do("POST", "/openai/v1/chat/completions", `{"model":"bot","messages":[{"role":"user","content":"hi"}],"response_format":`+f+`}`)
		if status != 400 || !strings.Contains(body, "invalid_request") || !strings.Contains(body, "response_format") {
			t.Errorf("%s: %d %s", name, status, body)
		}
	}
	if sessions, _, _ := s.Store.ListSessions(t.Context(), forge.DefaultTenant, forge.SessionQuery{}); len(sessions) != 0 {
		t.Fatalf("refused requests made %d sessions", len(sessions))
	}
	if status, body := s.Do("POST", "/openai/v1/chat/completions", `{"model":"bot","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"text"}}`); status != 200 {
		t.Fatalf("text format: %d %s", status, body)
	}
}
