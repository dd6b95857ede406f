package openairesp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

const jsonSchemaFormat = `"text":{"format":{"type":"json_schema","name":"triage","strict":true,"schema":{"type":"object","properties":{"priority":{"enum":["low","high"]}},"required":["priority"],"additionalProperties":false}}}`

// TestTextFormatJSONSchema: text.format json_schema is the turn's output
// schema: an invalid answer is repaired, the valid JSON is the output text,
// the turn has output.json, and the response echoes the format.
func TestTextFormatJSONSchema(t *testing.T) {
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"high, I think"},{"text":"{\"priority\":\"high\"}"}]}}`)
	status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"site down",`+jsonSchemaFormat+`}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var resp struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		OutputText string `json:"output_text"`
		Output     []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Text struct {
			Format struct {
				Type   string          `json:"type"`
				Name   string          `json:"name"`
				Strict *bool           `json:"strict"`
				Schema json.RawMessage `json:"schema"`
			} `json:"format"`
		} `json:"text"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	last := resp.Output[len(resp.Output)-1]
	if resp.Status != "completed" || last.Type != "message" || last.Content[0].Text != `{"priority":"high"}` {
		t.Fatalf("response %s", body)
	}
	f := resp.Text.Format
	if f.Type != "json_schema" || f.Name != "triage" || f.Strict == nil || !*f.Strict || !strings.Contains(string(f.Schema), "priority") {
		t.Fatalf("text.format echoed %+v", f)
	}
	turn, err := s.Store.GetTurnByID(t.Context(), forge.DefaultTenant, resp.ID)
	if err != nil || turn.Output == nil || string(turn.Output.JSON) != `{"priority":"high"}` || turn.Iterations != 2 {
		t.Fatalf("turn %+v %v", turn, err)
	}
	// The stored response echoes the format too.
	if status, got := s.Do("GET", "/openai/v1/responses/"+resp.ID, ""); status != 200 || !strings.Contains(got, `"json_schema"`) {
		t.Fatalf("GET %d %s", status, got)
	}
}

// TestTextFormatInvalidAnswer: an answer still invalid after the repair
// step fails the response with output_invalid.
func TestTextFormatInvalidAnswer(t *testing.T) {
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"high"}]}}`)
	status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"site down",`+jsonSchemaFormat+`}`)
	if status != 200 || !strings.Contains(body, `"status":"failed"`) || !strings.Contains(body, `"output_invalid"`) {
		t.Fatalf("%d %s", status, body)
	}
}

// TestTextFormatRefused: formats Forge does not take, and bad schemas,
// are 400s before any turn.
func TestTextFormatRefused(t *testing.T) {
	s := prototest.New(t, openairesp.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x"}`)
	for name, text := range map[string]string{
		"json_object":  `{"format":{"type":"json_object"}}`,
		"unknown type": `{"format":{"type":"yaml"}}`,
		"verbosity":    `{"verbosity":"low"}`,
		"bad schema":   `{"format":{"type":"json_schema","name":"x","schema":{"type":"objekt"}}}`,
		"remote ref":   `{"format":{"type":"json_schema","name":"x","schema":{"$ref":"http://127.0.0.1/"}}}`,
		"no name":      `{"format":{"type":"json_schema","schema":{}}}`,
		"not object":   `"json"`,
	} {
		status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi","text":`+text+`}`)
		if status != 400 || !strings.Contains(body, "invalid_request") {
			t.Errorf("%s: %d %s", name, status, body)
		}
	}
	if status, body := s.Do("POST", "/openai/v1/responses", `{"model":"bot","input":"hi","text":{"format":{"type":"text"}}}`); status != 200 {
		t.Fatalf("plain text format: %d %s", status, body)
	}
}
