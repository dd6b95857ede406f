package mcpserver_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/mcpserver"
)

// bearer adds a key to every request of the MCP client.
type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// The protocols a client may speak: the latest (2026-07-28, served
// statelessly) and 2025-11-25 (the TypeScript SDK's: a client that
// initializes, served in a session).
var protocols = []string{"", "2025-11-25"}

func connect(t *testing.T, s *prototest.Stack, key string) *mcp.ClientSession {
	return connectVersion(t, s, key, "", nil)
}

func connectVersion(t *testing.T, s *prototest.Stack, key, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if got := cs.ID() != ""; got != (version != "") {
		t.Fatalf("protocol %q: a session id %q", version, cs.ID())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func tools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestAgentsAsMCPTools: with the official MCP Go client over Streamable
// HTTP, a tenant's agents are tools ask_<agent> (the list follows the
// agents), a call runs a turn and answers its text with the session, turn
// and output as structured content, a second call continues the session;
// another tenant sees none of it, and a wrong key is refused.
func TestAgentsAsMCPTools(t *testing.T) {
	for _, version := range protocols {
		t.Run("protocol "+version, func(t *testing.T) {
			t.Parallel()
			testAgentsAsMCPTools(t, version)
		})
	}
}

func testAgentsAsMCPTools(t *testing.T, version string) {
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, mcpserver.Protocol{})
	for _, body := range []string{`{"name":"echo","model":"scripted/echo"}`, `{"name":"other","model":"scripted/echo"}`} {
		if status, b := s.Do("POST", "/v1/agents", body, "Authorization", "Bearer ka"); status != 201 {
			t.Fatalf("agent: %d %s", status, b)
		}
	}
	cs := connectVersion(t, s, "ka", version, nil)
	if got := strings.Join(tools(t, cs), " "); got != "ask_echo ask_other" {
		t.Fatalf("tools %q", got)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_echo", Arguments: map[string]any{"message": "hello there"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	var out mcpserver.Answer
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.SessionID == "" || out.TurnID == "" || out.Status != "done" || out.Output != text {
		t.Fatalf("structured %s (%v), text %q", raw, err, text)
	}
	if !strings.Contains(text, "hello there") {
		t.Fatalf("the echo agent answered %q", text)
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_echo", Arguments: map[string]any{"message": "again", "session_id": out.SessionID}})
	if err != nil || res.IsError {
		t.Fatalf("second call: %v %+v", err, res)
	}
	status, body := s.Do("GET", "/v1/sessions/"+out.SessionID+"/turns", "", "Authorization", "Bearer ka")
	if status != 200 || strings.Count(body, `"id":"turn_`) != 2 {
		t.Fatalf("the session's turns after two calls: %d %s", status, body)
	}

	// A session of another tenant, or of another agent, is refused.
	for _, args := range []map[string]any{
		{"message": "x", "session_id": "ses_nobody"},
		{"message": "   "},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_other", Arguments: args})
		if err == nil && !res.IsError {
			t.Errorf("ask_other %v: %+v", args, res)
		}
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_other", Arguments: map[string]any{"message": "x", "session_id": out.SessionID}})
	if err == nil && !res.IsError {
		t.Errorf("another agent's session: %+v", res)
	}
	csb := connectVersion(t, s, "kb", version, nil)
	if got := tools(t, csb); len(got) != 0 {
		t.Fatalf("another tenant lists %v", got)
	}
	res, err = csb.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_echo", Arguments: map[string]any{"message": "x", "session_id": out.SessionID}})
	if err == nil && !res.IsError {
		t.Fatalf("another tenant called acme's agent: %+v", res)
	}

	// The list follows the agents.
	if status, b := s.Do("DELETE", "/v1/agents/other", "", "Authorization", "Bearer ka"); status != 204 && status != 200 {
		t.Fatalf("delete: %d %s", status, b)
	}
	if status, b := s.Do("POST", "/v1/agents", `{"name":"new","model":"scripted/echo"}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	if got := strings.Join(tools(t, cs), " "); got != "ask_echo ask_new" {
		t.Fatalf("tools after a delete and a create %q", got)
	}
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_new", Arguments: map[string]any{"message": "hi"}}); err != nil || res.IsError {
		t.Fatalf("the new agent: %v %+v", err, res)
	}

	// A session is its tenant's: another key does not find it.
	if version != "" {
		status, body := s.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, "Authorization", "Bearer kb",
			"Mcp-Session-Id", cs.ID(), "Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", version)
		if status != 404 || strings.Contains(body, "ask_echo") {
			t.Fatalf("another tenant's session: %d %s", status, body)
		}
	}

	status, body = s.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "Authorization", "Bearer zz")
	if status != 401 || !strings.Contains(body, `"jsonrpc":"2.0"`) {
		t.Fatalf("a wrong key: %d %s", status, body)
	}
}

// TestHostileMCPRequests: malformed JSON-RPC, deep nesting, a wrong
// method or content type, unknown tools: a 4xx or a JSON-RPC error, never
// a 5xx.
func TestHostileMCPRequests(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, mcpserver.Protocol{})
	if status, b := s.Do("POST", "/v1/agents", `{"name":"echo","model":"scripted/echo"}`); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	for _, body := range []string{
		`{`, `[]`, `{"jsonrpc":"2.0"}`, deep,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_nobody","arguments":{"message":"x"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_echo","arguments":{"message":7}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_echo","arguments":` + deep + `}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"ask_echo\",\"arguments\":{\"message\":\"\xff\"}}}",
	} {
		status, resp := s.Do("POST", "/mcp", body, "Accept", "application/json, text/event-stream")
		if status >= 500 {
			t.Errorf("%.60q: %d %s", body, status, resp)
		}
		if status == 200 && !strings.Contains(resp, `"error"`) && !strings.Contains(resp, `"isError":true`) {
			t.Errorf("%.60q answered without an error: %s", body, resp)
		}
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_echo","arguments":{"message":"` + strings.Repeat("a", 5<<20) + `"}}}`
	if status, resp := s.Do("POST", "/mcp", big, "Accept", "application/json, text/event-stream"); status != 413 {
		t.Errorf("a 5 MiB call: %d %.200s", status, resp)
	}
	for _, method := range []string{"GET", "DELETE", "PUT"} {
		if status, resp := s.Do(method, "/mcp", ""); status < 400 || status >= 500 {
			t.Errorf("%s /mcp: %d %s", method, status, resp)
		}
	}
}

// TestAskStreamsProgress: a call with a progress token gets the answer's
// text as it streams, in progress notifications with increasing progress,
// that join to the final text; a call without one gets none.
func TestAskStreamsProgress(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, mcpserver.Protocol{})
	agent := `{"name":"talker","model":"scripted/talker","model_params":{"script":[{"text":"one two three four five six seven","chunk":4,"delay_ms":5}]}}`
	if status, b := s.Do("POST", "/v1/agents", agent, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, req.Params)
		},
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{"ka", http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "ask_talker", Arguments: map[string]any{"message": "talk"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	final := res.Content[0].(*mcp.TextContent).Text
	// The client runs its notification handler apart from the call: the
	// last notifications may be handled after the answer.
	// in any order: progress says which piece each is.
	joined := func() string {
		mu.Lock()
		defer mu.Unlock()
		slices.SortFunc(got, func(a, b *mcp.ProgressNotificationParams) int { return cmp.Compare(a.Progress, b.Progress) })
		var b strings.Builder
		for _, p := range got {
			b.WriteString(p.Message)
		}
		return b.String()
	}
	for deadline := time.Now().Add(10 * time.Second); joined() != final && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	joined() // sorts got
	mu.Lock()
	var text strings.Builder
	for i, p := range got {
		if p.ProgressToken != "tok-1" || p.Progress != float64(i+1) {
			t.Errorf("notification %d: token %v progress %v", i, p.ProgressToken, p.Progress)
		}
		text.WriteString(p.Message)
	}
	n := len(got)
	got = nil
	mu.Unlock()
	if n < 2 || strings.TrimSpace(text.String()) != final {
		t.Fatalf("%d notifications carrying %q; the answer is %q", n, text.String(), final)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_talker", Arguments: map[string]any{"message": "again"}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("%d notifications without a progress token", len(got))
	}
}

// TestCancelledCallCancelsTheTurn: a client that cancels its call (the
// SDK sends notifications/cancelled) ends the turn cancelled, with and
// without a progress token.
func TestCancelledCallCancelsTheTurn(t *testing.T) {
	for _, version := range protocols {
		t.Run("protocol "+version, func(t *testing.T) {
			t.Parallel()
			testCancelledCallCancelsTheTurn(t, version)
		})
	}
}

func testCancelledCallCancelsTheTurn(t *testing.T, version string) {
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, mcpserver.Protocol{})
	agent := `{"name":"slow","model":"scripted/slow","model_params":{"script":[{"text":"thinking","chunk":2,"delay_ms":5},{"hang":true}]}}`
	if status, b := s.Do("POST", "/v1/agents", agent, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	cs := connectVersion(t, s, "ka", version, nil)
	for _, progress := range []bool{false, true} {
		// The first call makes the session; the second (which hangs) is
		// cancelled.
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_slow", Arguments: map[string]any{"message": "one"}})
		if err != nil || res.IsError {
			t.Fatalf("first call: %v %+v", err, res)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var out mcpserver.Answer
		_ = json.Unmarshal(raw, &out)
		ctx, cancel := context.WithCancel(context.Background())
		params := &mcp.CallToolParams{Name: "ask_slow", Arguments: map[string]any{"message": "two", "session_id": out.SessionID}}
		if progress {
			params.SetProgressToken("tok")
		}
		done := make(chan error, 1)
		go func() { _, err := cs.CallTool(ctx, params); done <- err }()
		running := func() string {
			_, body := s.Do("GET", "/v1/sessions/"+out.SessionID+"/turns", "", "Authorization", "Bearer ka")
			return body
		}
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(running(), `"status":"running"`) {
			if time.Now().After(deadline) {
				t.Fatalf("the second turn never ran: %s", running())
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled call answered")
		}
		for !strings.Contains(running(), `"status":"cancelled"`) {
			if time.Now().After(deadline) {
				t.Fatalf("progress %v: the turn was not cancelled: %s", progress, running())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestPausedTurnAnswersPending: a turn that waits for an approval answers
// (not an error) with its text saying what waits and how to resolve it,
// and the pending actions, arguments included, in the structured content
// (which the SDK checks against the tool's output schema).
func TestPausedTurnAnswersPending(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme"}, mcpserver.Protocol{})
	agent := `{"name":"asker","model":"scripted/a","tools":["echo"],"approval":{"echo":"ask"},"model_params":{"script":[` +
		`{"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},{"text":"approved, done"}]}}`
	if status, b := s.Do("POST", "/v1/agents", agent, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, b)
	}
	for _, version := range protocols {
		cs := connectVersion(t, s, "ka", version, nil)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_asker", Arguments: map[string]any{"message": "echo x"}})
		if err != nil || res.IsError {
			t.Fatalf("protocol %q: %v %+v", version, err, res)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var out mcpserver.Answer
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Pending) != 1 {
			t.Fatalf("protocol %q: structured %s (%v)", version, raw, err)
		}
		a := out.Pending[0]
		text := res.Content[0].(*mcp.TextContent).Text
		if a.Type != "approval" || a.Tool != "echo" || string(a.Arguments) != `{"text":"x"}` ||
			!strings.Contains(text, a.CallID) || !strings.Contains(text, "POST /v1/sessions/"+out.SessionID+"/turns") {
			t.Fatalf("protocol %q: pending %+v, text %q", version, a, text)
		}
	}
}

// TestSessionsAreBounded: a tenant holds at most MaxSessions MCP sessions
// open on a replica (429 beyond); closing one makes room; another tenant
// has its own count; stateless clients are not counted.
func TestSessionsAreBounded(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, mcpserver.Protocol{MaxSessions: 2})
	a1 := connectVersion(t, s, "ka", "2025-11-25", nil)
	connectVersion(t, s, "ka", "2025-11-25", nil)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	status, body := s.Do("POST", "/mcp", init, "Authorization", "Bearer ka", "Accept", "application/json, text/event-stream")
	if status != 429 || !strings.Contains(body, "2 open MCP sessions") {
		t.Fatalf("a third session: %d %s", status, body)
	}
	connectVersion(t, s, "kb", "2025-11-25", nil)
	connect(t, s, "ka") // stateless
	if err := a1.Close(); err != nil {
		t.Fatal(err)
	}
	// The server forgets the session once its connection has wound down.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, body = s.Do("POST", "/mcp", init, "Authorization", "Bearer ka", "Accept", "application/json, text/event-stream")
		if status == 200 {
			break
		}
		if status != 429 || time.Now().After(deadline) {
			t.Fatalf("after a close: %d %s", status, body)
		}
	}
}
