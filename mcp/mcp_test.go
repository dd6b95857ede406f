package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	forge "github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/testenv"
	"github.com/forge-runtime/forge/sandbox"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// everything returns the declaration of the npm server-everything pinned in
// testdata/npm (scripts/test installs it; without it the test is skipped,
// or fails under FORGE_TEST_REQUIRE_SERVICES=1).
func everything(t *testing.T) forge.MCPServer {
	t.Helper()
	return forge.MCPServer{Name: "everything", Command: []string{testenv.MCPServer(t, "mcp-server-everything"), "stdio"}}
}

// sandboxes returns a sandbox manager with bubblewrap isolation (required:
// without it the test is skipped, or fails under scripts/test) that shows
// its sandboxes the pinned npm servers, read-only.
func sandboxes(t *testing.T) *sandbox.Manager {
	t.Helper()
	return newSandboxes(t, testLogger(t))
}

func benchSandboxes(b *testing.B) *sandbox.Manager {
	return newSandboxes(b, slog.New(slog.DiscardHandler))
}

func everythingBin(t testing.TB) string { return testenv.MCPServer(t, "mcp-server-everything") }

func newSandboxes(t testing.TB, log *slog.Logger) *sandbox.Manager {
	t.Helper()
	modules := filepath.Dir(filepath.Dir(everythingBin(t))) // node_modules/.bin/x
	m, err := sandbox.NewManager(t.TempDir(), sandbox.Options{Logger: log, UseBwrap: sandbox.BwrapOn,
		ReadOnlyPaths: []string{modules}})
	if err != nil {
		if testenv.Required() {
			t.Fatalf("stdio MCP servers run in the sandbox: %v", err)
		}
		t.Skipf("stdio MCP servers run in the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// unisolated returns a sandbox manager without process isolation (as on a
// host without bubblewrap), with commands allowed unsandboxed anyway.
func unisolated(t *testing.T) *sandbox.Manager {
	t.Helper()
	m, err := sandbox.NewManager(t.TempDir(), sandbox.Options{Logger: testLogger(t), UseBwrap: sandbox.BwrapOff, UnsafeUnsandboxedCommands: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// sandboxed is newManager running stdio servers in sandboxes(t).
func sandboxed(t *testing.T, opts Options) *Manager {
	t.Helper()
	opts.Launcher = sandboxes(t)
	return newManager(t, opts)
}

// workDir is the sandbox working directory of session of m (a sandboxed
// Manager).
func workDir(t *testing.T, m *Manager, session string) string {
	t.Helper()
	sb, _, err := m.opts.Launcher.(*sandbox.Manager).Get(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return sb.Dir()
}

// loopbackOK lets url servers reach the tests' loopback servers.
var loopbackOK = NetworkPolicy{AllowPrivate: true}

func newManager(t *testing.T, opts Options) *Manager {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	m := NewManager(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func find(t *testing.T, tools []forge.Tool, name string) forge.Tool {
	t.Helper()
	for _, tl := range tools {
		if tl.Def().Name == name {
			return tl
		}
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Def().Name)
	}
	t.Fatalf("no tool %q in %v", name, names)
	return nil
}

func call(t *testing.T, tl forge.Tool, args string) forge.ToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tl.Call(ctx, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s(%s): %v", tl.Def().Name, args, err)
	}
	return res
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestToolName(t *testing.T) {
	t.Parallel()
	for _, c := range [][3]string{
		{"everything", "get-sum", "everything_get-sum"},
		{"crm", "orders.find", "crm_orders_find"},
		{"a", "x y/z:é", "a_x_y_z__"},
	} {
		if got := ToolName(c[0], c[1]); got != c[2] {
			t.Errorf("ToolName(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestStdioEverything(t *testing.T) {
	spec := everything(t)
	spec.Env = map[string]string{"FORGE_MCP_TEST": "declared"}
	t.Setenv("FORGE_SECRET_SHOULD_NOT_LEAK", "x")
	m := sandboxed(t, Options{})
	tools, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(inits) != 1 || inits[0].Server != "everything" || inits[0].ProtocolVersion == "" || len(inits[0].Tools) != len(tools) {
		t.Fatalf("inits = %+v (tools %d)", inits, len(tools))
	}
	for _, tl := range tools {
		d := tl.Def()
		if !strings.HasPrefix(d.Name, "everything_") || unsafeChars.MatchString(d.Name) {
			t.Errorf("bad tool name %q", d.Name)
		}
		var schema map[string]any
		if err := json.Unmarshal(d.InputSchema, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s: schema %s (%v)", d.Name, d.InputSchema, err)
		}
	}
	echo := find(t, tools, "everything_echo")
	if !strings.Contains(string(echo.Def().InputSchema), `"message"`) {
		t.Errorf("echo schema %s", echo.Def().InputSchema)
	}
	find(t, tools, "everything_trigger-long-running-operation")

	if res := call(t, echo, `{"message":"hello"}`); res.IsError || res.Output != "Echo: hello" {
		t.Errorf("echo = %+v", res)
	}
	res := call(t, find(t, tools, "everything_get-sum"), `{"a": 2, "b": 40}`)
	if res.IsError || !strings.Contains(res.Output, "42") {
		t.Errorf("get-sum = %+v", res)
	}
	// A tool-level failure: missing required argument.
	if res := call(t, echo, `{}`); !res.IsError || !strings.Contains(res.Output, "message") {
		t.Errorf("echo {} = %+v, want IsError", res)
	}
	// Non-text content is summarized.
	res = call(t, find(t, tools, "everything_get-tiny-image"), `{}`)
	if res.IsError || !strings.Contains(res.Output, "[image image/png, ") {
		t.Errorf("get-tiny-image = %+v", res)
	}
	// The image itself is a file of the result, as the server sent it.
	if len(res.Files) != 1 || res.Files[0].MimeType != "image/png" || !bytes.HasPrefix(res.Files[0].Data, []byte("\x89PNG\r\n\x1a\n")) ||
		!strings.Contains(res.Output, fmt.Sprintf("[image image/png, %d bytes]", len(res.Files[0].Data))) {
		t.Errorf("get-tiny-image files %d, output %q", len(res.Files), res.Output)
	}
	// The environment is the sandbox's plus the declared variables; HOME
	// is the session's.
	res = call(t, find(t, tools, "everything_get-env"), `null`)
	home := filepath.Join(filepath.Dir(workDir(t, m, "ses_1")), "home")
	if !strings.Contains(res.Output, `"FORGE_MCP_TEST": "declared"`) || strings.Contains(res.Output, "FORGE_SECRET_SHOULD_NOT_LEAK") ||
		!strings.Contains(res.Output, `"HOME": "`+home+`"`) {
		t.Errorf("get-env = %s", res.Output)
	}

	// The same session reuses the running server: no new Initialized.
	pid := m.ServerPID("ses_1", "everything")
	tools2, inits2, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil || len(inits2) != 0 || len(tools2) != len(tools) || m.ServerPID("ses_1", "everything") != pid {
		t.Fatalf("second Tools: %d tools, inits %+v, err %v", len(tools2), inits2, err)
	}
	// Another session gets its own server.
	_, inits3, err := m.Tools(ctx30(t), "ses_2", []forge.MCPServer{spec})
	if err != nil || len(inits3) != 1 || m.ServerPID("ses_2", "everything") == pid {
		t.Fatalf("other session: inits %+v, err %v", inits3, err)
	}
	m.CloseSession("ses_2")
	if _, err := find(t, tools, "everything_echo").Call(ctx30(t), json.RawMessage(`{"message":"still"}`)); err != nil {
		t.Errorf("ses_1 after closing ses_2: %v", err)
	}
}

func TestCommandNotFound(t *testing.T) {
	t.Parallel()
	m := sandboxed(t, Options{})
	start := time.Now()
	tools, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{{Name: "everything", Command: []string{"nope-forge-mcp-missing"}}})
	if err == nil || len(tools) != 0 || len(inits) != 0 {
		t.Fatalf("Tools = %d tools, %v inits, err %v", len(tools), inits, err)
	}
	for _, want := range []string{`MCP server "everything" is not running: `, "nope-forge-mcp-missing: No such file or directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant it to contain %s", err, want)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestStartHangs(t *testing.T) {
	t.Parallel()
	m := sandboxed(t, Options{InitTimeout: time.Second})
	start := time.Now()
	_, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{{Name: "mute", Command: []string{"sleep", "60"}}})
	if err == nil || !strings.Contains(err.Error(), `MCP server "mute" is not running: it did not finish starting within 1s`) {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestPartialFailure(t *testing.T) {
	t.Parallel()
	m := sandboxed(t, Options{})
	tools, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{
		everything(t),
		{Name: "broken", Command: []string{"sh", "-c", "echo boom >&2; exit 3"}},
	})
	if err == nil || !strings.Contains(err.Error(), `MCP server "broken" is not running`) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v", err)
	}
	if len(inits) != 1 || len(tools) == 0 {
		t.Errorf("inits %+v, %d tools", inits, len(tools))
	}
}

// A server killed during a call gives a clear error at once; the next call
// restarts it.
func TestKillMidCallThenRestart(t *testing.T) {
	t.Parallel()
	// The server runs behind tee, which logs what the client sends (in
	// the sandbox's working directory), so that the test kills it once the
	// call has reached it.
	spec := everything(t)
	spec.Command = []string{"sh", "-c", `tee requests.log | "$0" stdio`, spec.Command[0]}
	m := sandboxed(t, Options{})
	log := filepath.Join(workDir(t, m, "ses_1"), "requests.log")
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil {
		t.Fatal(err)
	}
	long := find(t, tools, "everything_trigger-long-running-operation")
	pid := m.ServerPID("ses_1", "everything")
	if pid <= 0 {
		t.Fatal("no pid")
	}
	go func() {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if b, _ := os.ReadFile(log); bytes.Contains(b, []byte("trigger-long-running-operation")) {
				break
			}
		}
		killGroup(pid) // bubblewrap, and with it sh, tee and the server
	}()
	start := time.Now()
	_, err = long.Call(ctx30(t), json.RawMessage(`{"duration": 20, "steps": 2}`))
	if err == nil {
		t.Fatal("call survived the kill")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("error came after %s", d)
	}
	if !strings.Contains(err.Error(), `MCP server "everything" is not running`) {
		t.Errorf("err = %v", err)
	}
	t.Logf("error after kill: %v", err)

	res := call(t, find(t, tools, "everything_echo"), `{"message":"again"}`)
	if res.Output != "Echo: again" {
		t.Errorf("after restart: %+v", res)
	}
	if p := m.ServerPID("ses_1", "everything"); p == pid || p <= 0 {
		t.Errorf("pid %d, was %d", p, pid)
	}
	// Tools after a restart reports the server as initialized again only
	// when it started it; it is running now.
	_, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil || len(inits) != 0 {
		t.Errorf("inits %+v err %v", inits, err)
	}
}

// Killed between calls: the next call restarts the server.
func TestKillBetweenCalls(t *testing.T) {
	t.Parallel()
	m := sandboxed(t, Options{})
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{everything(t)})
	if err != nil {
		t.Fatal(err)
	}
	pid := m.ServerPID("ses_1", "everything")
	p, _ := os.FindProcess(pid)
	_ = p.Kill()
	// The manager reaps the process when it notices the death.
	for deadline := time.Now().Add(10 * time.Second); processAlive(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res := call(t, find(t, tools, "everything_echo"), `{"message":"back"}`)
	if res.Output != "Echo: back" {
		t.Errorf("%+v", res)
	}
	_, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{everything(t)})
	if err != nil || len(inits) != 0 {
		t.Errorf("inits %+v err %v", inits, err)
	}
}

// A call hung past CallTimeout fails clearly; the server is restarted.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	m := sandboxed(t, Options{CallTimeout: time.Second})
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{everything(t)})
	if err != nil {
		t.Fatal(err)
	}
	pid := m.ServerPID("ses_1", "everything")
	start := time.Now()
	_, err = find(t, tools, "everything_trigger-long-running-operation").Call(ctx30(t), json.RawMessage(`{"duration": 30, "steps": 1}`))
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	res := call(t, find(t, tools, "everything_echo"), `{"message":"fresh"}`)
	if res.Output != "Echo: fresh" || m.ServerPID("ses_1", "everything") == pid {
		t.Errorf("%+v", res)
	}
}

func TestCloseStopsServers(t *testing.T) {
	t.Parallel()
	m := NewManager(Options{Launcher: sandboxes(t)})
	_, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{everything(t)})
	if err != nil {
		t.Fatal(err)
	}
	pid := m.ServerPID("ses_1", "everything")
	start := time.Now()
	if err := m.Close(ctx30(t)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %s", d)
	}
	if processAlive(pid) {
		t.Errorf("process %d still alive after Close", pid)
	}
	if _, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{everything(t)}); err == nil {
		t.Error("Tools after Close succeeded")
	}
}

// httpServer serves an SDK MCP server with a tool "orders.find"; when token
// is set it answers 401 to requests without that bearer token.
func httpServer(t *testing.T, token string) *httptest.Server {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "crm", Version: "1"}, nil)
	type args struct {
		ID int `json:"id"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "orders.find", Description: "Find an order"},
		func(ctx context.Context, req *sdk.CallToolRequest, a args) (*sdk.CallToolResult, any, error) {
			if a.ID == 0 {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no such order"}}}, nil, nil
			}
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "order 42: shipped"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte("1234")},
			}}, nil, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") != "acme" {
			http.Error(w, "missing X-Tenant", http.StatusBadRequest)
			return
		}
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="`+ts.URL+`/.well-known/oauth-protected-resource"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestStreamableHTTP(t *testing.T) {
	t.Parallel()
	ts := httpServer(t, "")
	m := newManager(t, Options{Network: loopbackOK})
	spec := forge.MCPServer{Name: "crm", URL: ts.URL, Headers: map[string]string{"X-Tenant": "acme"}}
	tools, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(inits) != 1 || inits[0].ProtocolVersion == "" || len(inits[0].Tools) != 1 || inits[0].Tools[0] != "crm_orders_find" {
		t.Fatalf("inits %+v", inits)
	}
	find := find(t, tools, "crm_orders_find")
	if d := find.Def(); d.Description != "Find an order" || !strings.Contains(string(d.InputSchema), `"id"`) {
		t.Errorf("def %+v", d)
	}
	res := call(t, find, `{"id": 42}`)
	if res.IsError || res.Output != "order 42: shipped\n[image image/png, 4 bytes]" {
		t.Errorf("res = %+v", res)
	}
	if res := call(t, find, `{"id": 0}`); !res.IsError || res.Output != "no such order" {
		t.Errorf("res = %+v", res)
	}
}

func TestStreamableHTTPAuth(t *testing.T) {
	t.Parallel()
	ts := httpServer(t, "s3cret")
	m := newManager(t, Options{Network: loopbackOK})
	spec := forge.MCPServer{Name: "crm", URL: ts.URL, Headers: map[string]string{"X-Tenant": "acme"}}
	_, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	var auth *forge.AuthRequiredError
	if !errors.As(err, &auth) {
		t.Fatalf("err = %v, want *forge.AuthRequiredError", err)
	}
	if auth.Server != "crm" || auth.AuthURL != ts.URL+"/.well-known/oauth-protected-resource" {
		t.Errorf("auth = %+v", auth)
	}
	m.SetToken("ses_1", "crm", "wrong")
	if _, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec}); !errors.As(err, &auth) {
		t.Fatalf("wrong token: err = %v", err)
	}
	m.SetToken("ses_1", "crm", "s3cret")
	tools, inits, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil || len(inits) != 1 {
		t.Fatalf("after SetToken: inits %+v err %v", inits, err)
	}
	res := call(t, find(t, tools, "crm_orders_find"), `{"id": 1}`)
	if res.IsError || !strings.HasPrefix(res.Output, "order 42") {
		t.Errorf("res = %+v", res)
	}
	// Another session does not get the token.
	if _, _, err := m.Tools(ctx30(t), "ses_2", []forge.MCPServer{spec}); !errors.As(err, &auth) {
		t.Errorf("ses_2: err = %v", err)
	}
	// A revoked token during the session: the call asks for auth again.
	m.SetToken("ses_1", "crm", "revoked")
	_, err = find(t, tools, "crm_orders_find").Call(ctx30(t), json.RawMessage(`{"id": 1}`))
	if !errors.As(err, &auth) {
		t.Errorf("revoked: err = %v", err)
	}
	m.SetToken("ses_1", "crm", "s3cret")
	if res := call(t, find(t, tools, "crm_orders_find"), `{"id": 1}`); res.IsError {
		t.Errorf("res = %+v", res)
	}
}

func TestHTTPUnreachable(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	m := newManager(t, Options{InitTimeout: 5 * time.Second, Network: loopbackOK})
	start := time.Now()
	_, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{{Name: "crm", URL: url}})
	if err == nil || !strings.Contains(err.Error(), `MCP server "crm" is not running`) {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestAuthURL(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{
		{`Bearer resource_metadata="https://x/.well-known/oauth-protected-resource"`, "https://x/.well-known/oauth-protected-resource"},
		{`Bearer realm="api", error="invalid_token", authorization_uri="https://auth.example/authorize"`, "https://auth.example/authorize"},
		{`Bearer realm="api"`, ""},
		{`Basic realm="x", Bearer resource_metadata=https://y/m`, "https://y/m"},
	} {
		if got := authURL([]string{c[0]}); got != c[1] {
			t.Errorf("authURL(%s) = %q, want %q", c[0], got, c[1])
		}
	}
}

// TestToolResultFiles: a successful result's images are its files (and
// named in its text); a failed result's are named in its text alone.
func TestToolResultFiles(t *testing.T) {
	t.Parallel()
	content := []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.ImageContent{MIMEType: "image/png", Data: []byte("12345")},
		&sdk.ImageContent{MIMEType: "image/jpeg", Data: []byte("678")}}
	got := toolResult(&sdk.CallToolResult{Content: content})
	if got.IsError || got.Output != "a\n[image image/png, 5 bytes]\n[image image/jpeg, 3 bytes]" || len(got.Files) != 2 ||
		got.Files[0].MimeType != "image/png" || string(got.Files[0].Data) != "12345" || got.Files[1].MimeType != "image/jpeg" || string(got.Files[1].Data) != "678" {
		t.Errorf("result %+v", got)
	}
	got = toolResult(&sdk.CallToolResult{Content: content, IsError: true})
	if !got.IsError || got.Output != "a\n[image image/png, 5 bytes]\n[image image/jpeg, 3 bytes]" || got.Files != nil {
		t.Errorf("failed result %+v", got)
	}
}

func TestFlatten(t *testing.T) {
	t.Parallel()
	got := flatten([]sdk.Content{
		&sdk.TextContent{Text: "a"},
		&sdk.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 10)},
		&sdk.ResourceLink{Name: "doc", URI: "file:///doc"},
		&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "x://t", Text: "body"}},
	}, nil)
	want := "a\n[audio audio/wav, 10 bytes]\n[resource link doc file:///doc]\n[resource x://t]\nbody"
	if got != want {
		t.Errorf("flatten = %q, want %q", got, want)
	}
	if got := flatten(nil, map[string]any{"k": 1}); got != `{"k":1}` {
		t.Errorf("structured = %q", got)
	}
}
