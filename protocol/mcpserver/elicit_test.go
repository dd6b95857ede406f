package mcpserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/mcpserver"
)

// askerAgent calls echo (approval: ask) twice, one turn after the other's
// answer, then says it is done.
const askerAgent = `{"name":"asker","model":"scripted/a","tools":["echo"],"approval":{"echo":"ask"},"model_params":{"script":[` +
	`{"tool_calls":[{"name":"echo","arguments":{"text":"first"}}]},` +
	`{"tool_calls":[{"name":"echo","arguments":{"text":"second"}}]},` +
	`{"text":"all done"}]}}`

// TestElicitationForApprovals: a client that declares elicitation is
// asked, once per approval, with a form (approve, reason); accepting with
// approve runs the call, and the same tool call goes on to the turn's
// final text; declining, cancelling or approve false refuses the call
// (the model sees the refusal and the reason). Both protocols: the
// 2026-07-28 client answers an input-required result (multi round-trip),
// the 2025-11-25 one an elicitation/create in its session.
func TestElicitationForApprovals(t *testing.T) {
	for _, version := range protocols {
		for _, tc := range []struct {
			name    string
			answers []*mcp.ElicitResult
			want    []string // in the session's messages
			notWant []string
		}{
			{"approve both", []*mcp.ElicitResult{
				{Action: "accept", Content: map[string]any{"approve": true}},
				{Action: "accept", Content: map[string]any{"approve": true, "reason": "fine"}},
			}, []string{`"output":"first"`, `"output":"second"`}, []string{"denied"}},
			{"refuse with a reason, then decline", []*mcp.ElicitResult{
				{Action: "accept", Content: map[string]any{"approve": false, "reason": "not that one"}},
				{Action: "decline"},
			}, []string{"the user denied this call: not that one", "the user denied this call: the MCP client answered decline"}, []string{`"output":"first"`}},
			{"cancel", []*mcp.ElicitResult{{Action: "cancel"}, {Action: "cancel"}},
				[]string{"the MCP client answered cancel"}, []string{`"output":"first"`, `"output":"second"`}},
		} {
			t.Run(tc.name+" protocol "+version, func(t *testing.T) {
				t.Parallel()
				s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, mcpserver.Protocol{})
				if status, b := s.Do("POST", "/v1/agents", askerAgent, "Authorization", "Bearer ka"); status != 201 {
					t.Fatalf("agent: %d %s", status, b)
				}
				var mu sync.Mutex
				var asked []*mcp.ElicitParams
				cs := connectVersion(t, s, "ka", version, &mcp.ClientOptions{
					ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
						mu.Lock()
						defer mu.Unlock()
						asked = append(asked, req.Params)
						if len(asked) > len(tc.answers) {
							return &mcp.ElicitResult{Action: "cancel"}, nil
						}
						return tc.answers[len(asked)-1], nil
					},
				})
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_asker", Arguments: map[string]any{"message": "echo twice"}})
				if err != nil || res.IsError {
					t.Fatalf("call: %v %+v", err, res)
				}
				raw, _ := json.Marshal(res.StructuredContent)
				var out mcpserver.Answer
				if err := json.Unmarshal(raw, &out); err != nil || out.Status != "done" || len(out.Pending) != 0 || out.Output != "all done" {
					t.Fatalf("structured %s (%v)", raw, err)
				}
				if text := res.Content[0].(*mcp.TextContent).Text; text != "all done" {
					t.Fatalf("text %q", text)
				}
				mu.Lock()
				if len(asked) != 2 {
					t.Fatalf("asked %d times", len(asked))
				}
				for i, want := range []string{"first", "second"} {
					q := asked[i]
					schema, _ := json.Marshal(q.RequestedSchema)
					var form struct {
						Properties map[string]struct{ Type string }
						Required   []string
					}
					_ = json.Unmarshal(schema, &form)
					if !strings.Contains(q.Message, "asker") || !strings.Contains(q.Message, "echo") || !strings.Contains(q.Message, want) ||
						form.Properties["approve"].Type != "boolean" || form.Properties["reason"].Type != "string" || strings.Join(form.Required, ",") != "approve" {
						t.Errorf("question %d: %q %s", i, q.Message, schema)
					}
				}
				mu.Unlock()
				_, msgs := s.Do("GET", "/v1/sessions/"+out.SessionID+"/messages", "", "Authorization", "Bearer ka")
				for _, w := range tc.want {
					if !strings.Contains(msgs, w) {
						t.Errorf("the messages lack %q: %s", w, msgs)
					}
				}
				for _, w := range tc.notWant {
					if strings.Contains(msgs, w) {
						t.Errorf("the messages have %q: %s", w, msgs)
					}
				}
			})
		}
	}
}

// TestElicitationRefusedState: a retried call whose request state this
// server did not make, or that names another tenant's turn, is refused.
func TestElicitationRefusedState(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, mcpserver.Protocol{})
	for _, key := range []string{"ka", "kb"} {
		if status, b := s.Do("POST", "/v1/agents", askerAgent, "Authorization", "Bearer "+key); status != 201 {
			t.Fatalf("agent: %d %s", status, b)
		}
	}
	// Acme's call pauses (a client without elicitation): its state names
	// the paused turn.
	cs := connect(t, s, "ka")
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_asker", Arguments: map[string]any{"message": "x"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out mcpserver.Answer
	_ = json.Unmarshal(raw, &out)
	stolen, _ := json.Marshal(map[string]string{"s": out.SessionID, "t": out.TurnID})
	call := func(key, state string) string {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_asker","arguments":{"message":"x"},` +
			`"requestState":` + state + `,"inputResponses":{"` + out.Pending[0].CallID + `":{"action":"accept","content":{"approve":true}}},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`
		status, resp := s.Do("POST", "/mcp", body, "Authorization", "Bearer "+key, "Accept", "application/json, text/event-stream",
			"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "ask_asker")
		if status >= 500 {
			t.Fatalf("%s: %d %s", state, status, resp)
		}
		return resp
	}
	b64 := func(b []byte) string { return `"` + base64URL(b) + `"` }
	for _, c := range []struct{ key, state, want string }{
		{"ka", `"!!not base64"`, "requestState is not one this server made"},
		{"ka", b64([]byte(`{"s":""}`)), "requestState is not one this server made"},
		{"ka", b64([]byte(strings.Repeat("x", 2000))), "requestState is not one this server made"},
		{"kb", b64(stolen), "not_found"},
		{"ka", b64([]byte(`{"s":"` + out.SessionID + `","t":"turn_nope"}`)), "not_found"},
	} {
		if resp := call(c.key, c.state); !strings.Contains(resp, c.want) || !strings.Contains(resp, `"isError":true`) {
			t.Errorf("%s %s: %s", c.key, c.state, resp)
		}
	}
	// The paused turn is still paused: nothing was approved.
	_, turns := s.Do("GET", "/v1/sessions/"+out.SessionID+"/turns", "", "Authorization", "Bearer ka")
	if strings.Count(turns, `"id":"turn_`) != 1 {
		t.Fatalf("turns %s", turns)
	}
	// Its own tenant's retry resolves it.
	if resp := call("ka", b64(stolen)); !strings.Contains(resp, `"resultType":"input_required"`) {
		t.Fatalf("the retry: %s", resp)
	}
}

func base64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestClientToolStaysPending: a client that can be asked is not asked
// about a client tool (a form cannot run it): the call answers what is
// pending, as for any client.
func TestClientToolStaysPending(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, mcpserver.Protocol{})
	agent := `{"name":"cli","model":"scripted/x","tools":[{"name":"lookup","client":true}],"model_params":{"script":[` +
		`{"tool_calls":[{"name":"lookup","arguments":{"q":"a"}}]},{"text":"looked up"}]}}`
	if status, b := s.Do("POST", "/v1/agents", agent, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	for _, version := range protocols {
		asked := make(chan struct{}, 10)
		cs := connectVersion(t, s, "ka", version, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked <- struct{}{}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
			},
		})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_cli", Arguments: map[string]any{"message": "look"}})
		if err != nil || res.IsError {
			t.Fatalf("protocol %q: %v %+v", version, err, res)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var out mcpserver.Answer
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Pending) != 1 || out.Pending[0].Type != "client_tool" || len(asked) != 0 {
			t.Fatalf("protocol %q: %s (%v), asked %d", version, raw, err, len(asked))
		}
	}
}
