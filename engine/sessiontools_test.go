package engine_test

import (
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
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/testenv"
	"github.com/forge-runtime/forge/mcp"
	"github.com/forge-runtime/forge/parts"
	"github.com/forge-runtime/forge/sandbox"
	"github.com/forge-runtime/forge/tools"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func withSandboxes(t *testing.T) func(*engine.Config) {
	m, err := sandbox.NewManager(t.TempDir(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(t.Context()) })
	return func(c *engine.Config) { c.Sandboxes = m }
}

func TestSandboxToolsRecordPatchAndConfine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSandboxes(t))
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "write_file", BuiltIn: true}, {Name: "read_file", BuiltIn: true}}
	})
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{
			call("write_file", `{"path":"notes/a.txt","content":"one\ntwo\n"}`),
			call("read_file", `{"path":"../../../etc/passwd"}`),
		}},
		reply{deltas: []string{"written"}},
	)
	turn := h.run(s.ID, msg("write it"))
	if turn.Status != forge.TurnDone || turn.Output.Text != "written" {
		t.Fatalf("turn %+v", turn)
	}
	res := h.model.sent()[1].Messages[2].Parts
	if res[0].IsError || !res[1].IsError {
		t.Fatalf("results: write %+v, escape %+v", res[0], res[1])
	}
	var created, patch *forge.Event
	for _, ev := range h.events(s.ID, 0) {
		switch ev.Type {
		case forge.EventSandboxCreated:
			created = &ev
		case forge.EventPatch:
			patch = &ev
		}
	}
	if created == nil || patch == nil {
		t.Fatalf("sandbox.created %v, patch %v", created != nil, patch != nil)
	}
	var part forge.Part
	if err := json.Unmarshal(patch.Data, &part); err != nil {
		t.Fatal(err)
	}
	if got := string(part.Data); got != `{"files":[{"path":"notes/a.txt","status":"added","added":2,"removed":0}]}` {
		t.Fatalf("patch %s", got)
	}
	// The file is really there, in the session's working directory.
	var dir struct{ Dir string }
	_ = json.Unmarshal(created.Data, &dir)
	if b, err := os.ReadFile(filepath.Join(dir.Dir, "notes/a.txt")); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("file %q %v", b, err)
	}
}

func everythingServer(t *testing.T) string { return everythingServerPath(t) }

// mcpManager returns an MCP manager as forge serve builds it: stdio servers
// run in a bubblewrap sandbox (required: without it the test is skipped, or
// fails under scripts/test) that shows the pinned npm servers read-only;
// url servers may reach loopback, where the tests' servers are.
func mcpManager(t testing.TB) (*mcp.Manager, *sandbox.Manager) {
	t.Helper()
	modules := filepath.Dir(filepath.Dir(everythingServerPath(t))) // node_modules/.bin/x
	sb, err := sandbox.NewManager(t.TempDir(), sandbox.Options{UseBwrap: sandbox.BwrapOn, ReadOnlyPaths: []string{modules},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		if testenv.Required() {
			t.Fatalf("stdio MCP servers run in the sandbox: %v", err)
		}
		t.Skipf("stdio MCP servers run in the sandbox: %v", err)
	}
	m := mcp.NewManager(mcp.Options{Launcher: sb, Network: mcp.NetworkPolicy{AllowPrivate: true}})
	t.Cleanup(func() {
		_ = m.Close(context.Background())
		_ = sb.Close(context.Background())
	})
	return m, sb
}

func everythingServerPath(t testing.TB) string {
	bin, err := filepath.Abs("../mcp/testdata/npm/node_modules/.bin/mcp-server-everything")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `npm ci --prefix mcp/testdata/npm` first", err)
	}
	return bin
}

func TestMCPToolsWithApprovalGlob(t *testing.T) {
	t.Parallel()
	bin := everythingServer(t)
	m, _ := mcpManager(t)
	h := newHarness(t, func(c *engine.Config) { c.MCP = m })
	h.agent("a", func(a *forge.Agent) {
		a.MCPServers = []forge.MCPServer{{Name: "everything", Command: []string{bin, "stdio"}}}
		a.Approval = map[string]string{"everything_*": forge.PolicyAsk}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("everything_echo", `{"message":"hi"}`)}}, reply{deltas: []string{"done"}})
	turn := h.run(s.ID, msg("echo hi"))
	if len(turn.RequiredActions) != 1 || turn.RequiredActions[0].Tool != "everything_echo" {
		t.Fatalf("turn %+v", turn)
	}
	first := h.model.sent()[0]
	var names []string
	for _, d := range first.Tools {
		names = append(names, d.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "everything_echo") {
		t.Fatalf("tools offered %v", names)
	}
	next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{approve(turn.RequiredActions[0].CallID, true, "")}})
	if next.Status != forge.TurnDone {
		t.Fatalf("next %+v", next)
	}
	res := h.model.sent()[1].Messages[2].Parts[0]
	if res.IsError || res.Output != "Echo: hi" {
		t.Fatalf("result %+v", res)
	}
	inits := 0
	for _, ev := range h.events(s.ID, 0) {
		if ev.Type == forge.EventMCPInitialized {
			inits++
			if !strings.Contains(string(ev.Data), `"server":"everything"`) {
				t.Fatalf("mcp.initialized %s", ev.Data)
			}
		}
	}
	if inits != 1 {
		t.Fatalf("%d mcp.initialized events; the server is started once per session", inits)
	}
}

// authServer serves an MCP server over streamable HTTP whose tool
// orders_find answers only with the bearer token.
func authServer(t *testing.T, token string) *httptest.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "crm", Version: "1"}, nil)
	type args struct {
		ID int `json:"id"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "orders_find", Description: "Find an order"},
		func(ctx context.Context, req *sdk.CallToolRequest, a args) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("order %d: shipped", a.ID)}}}, nil, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+ts.URL+`/.well-known/oauth-protected-resource"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestMCPAuthRequiredPausesThenTokenResumes(t *testing.T) {
	t.Parallel()
	ts := authServer(t, "s3cret")
	m, _ := mcpManager(t)
	h := newHarness(t, func(c *engine.Config) { c.MCP = m })
	h.agent("a", func(a *forge.Agent) { a.MCPServers = []forge.MCPServer{{Name: "crm", URL: ts.URL}} })
	s := h.session("a")
	turn := h.run(s.ID, msg("where is order 42?"))
	if turn.Status != forge.TurnDone || len(turn.RequiredActions) != 1 {
		t.Fatalf("turn %+v", turn)
	}
	act := turn.RequiredActions[0]
	if act.Type != forge.ActionAuth || act.Server != "crm" || !strings.HasPrefix(act.AuthURL, ts.URL) {
		t.Fatalf("action %+v", act)
	}
	if n := len(h.model.sent()); n != 0 {
		t.Fatalf("the model was called %d times before the server was authorized", n)
	}
	h.model.push(reply{calls: []forge.ToolCall{call("crm_orders_find", `{"id":42}`)}}, reply{deltas: []string{"It shipped."}})
	next := h.run(s.ID, engine.TurnRequest{Input: []forge.Input{{Type: forge.InputAuth, CallID: act.CallID, Token: "s3cret"}}})
	if next.Status != forge.TurnDone || next.Output == nil || next.Output.Text != "It shipped." {
		t.Fatalf("next %+v", next)
	}
	if res := h.model.sent()[1].Messages[2].Parts[0]; res.IsError || res.Output != "order 42: shipped" {
		t.Fatalf("result %+v", res)
	}
	if next.Input[0].Token != "[redacted]" {
		t.Fatalf("stored input %+v", next.Input)
	}
	for _, ev := range h.events(s.ID, 0) {
		if strings.Contains(string(ev.Data), "s3cret") {
			t.Fatalf("the token leaked into %s", ev.Type)
		}
	}
}

func TestTodoCapabilityCarriesAcrossTurnsAndForks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) { c.Capabilities = tools.Capabilities() })
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "todo", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("todo_write", `{"items":[{"content":"ship it","status":"pending"}]}`)}},
		reply{deltas: []string{"planned"}},
	)
	t1 := h.run(s.ID, msg("plan"))
	offered := map[string]bool{}
	for _, d := range h.model.sent()[0].Tools {
		offered[d.Name] = true
	}
	if !offered["todo_read"] || !offered["todo_write"] || offered["todo"] {
		t.Fatalf("tools offered %v", offered)
	}
	h.model.push(
		reply{calls: []forge.ToolCall{call("todo_write", `{"items":[{"content":"ship it","status":"done"}]}`)}},
		reply{deltas: []string{"done"}},
	)
	h.run(s.ID, msg("do it"))
	// A fork from the first turn sees that turn's list, not the later one.
	h.model.push(reply{calls: []forge.ToolCall{call("todo_read", `{}`)}}, reply{deltas: []string{"read"}})
	fork := msg("what is left?")
	fork.PreviousTurnID = &t1.ID
	f := h.run(s.ID, fork)
	sent := h.model.sent()
	if got := sent[len(sent)-1].Messages[len(sent[len(sent)-1].Messages)-1].Parts[0].Output; got != "1. [pending] ship it" {
		t.Fatalf("todo_read on the fork: %q", got)
	}
	snap, err := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, f.ID)
	if err != nil || string(snap.Capabilities["todo"]) != `{"items":[{"content":"ship it","status":"pending"}]}` {
		t.Fatalf("fork snapshot %s %v", snap.Capabilities["todo"], err)
	}
}

func TestMissingMCPCommandIsAClearToolError(t *testing.T) {
	t.Parallel()
	m, _ := mcpManager(t)
	h := newHarness(t, func(c *engine.Config) { c.MCP = m })
	h.agent("a", func(a *forge.Agent) {
		a.MCPServers = []forge.MCPServer{{Name: "broken", Command: []string{"/nonexistent/mcp-server"}}}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("broken_echo", `{}`)}}, reply{deltas: []string{"sorry"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	res := h.model.sent()[1].Messages[2].Parts[0]
	if !res.IsError || !strings.Contains(res.Output, `"broken"`) || !strings.Contains(res.Output, "unavailable") {
		t.Fatalf("result %+v", res)
	}
}

// On a host without process isolation an agent's stdio MCP server does not
// run, even with unsandboxed commands allowed; the model learns why.
func TestMCPCommandWithoutIsolationIsAClearToolError(t *testing.T) {
	t.Parallel()
	sb, err := sandbox.NewManager(t.TempDir(), sandbox.Options{UseBwrap: sandbox.BwrapOff, UnsafeUnsandboxedCommands: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m := mcp.NewManager(mcp.Options{Launcher: sb})
	t.Cleanup(func() { _ = m.Close(context.Background()); _ = sb.Close(context.Background()) })
	planted := filepath.Join(t.TempDir(), "planted")
	h := newHarness(t, func(c *engine.Config) { c.MCP = m })
	h.agent("a", func(a *forge.Agent) {
		a.MCPServers = []forge.MCPServer{{Name: "evil", Command: []string{"sh", "-c", `echo pwned > "$0"`, planted}}}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("evil_run", `{}`)}}, reply{deltas: []string{"sorry"}})
	if turn := h.run(s.ID, msg("go")); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	res := h.model.sent()[1].Messages[2].Parts[0]
	if !res.IsError || !strings.Contains(res.Output, `MCP server "evil" is not running: stdio MCP servers run only inside the sandbox`) {
		t.Fatalf("result %+v", res)
	}
	if _, err := os.Stat(planted); err == nil {
		t.Fatal("the command ran on the host")
	}
}

func TestMCPFilesystemServer(t *testing.T) {
	t.Parallel()
	bin, err := filepath.Abs("../mcp/testdata/npm/node_modules/.bin/mcp-server-filesystem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `npm ci --prefix mcp/testdata/npm` first", err)
	}
	m, sandboxes := mcpManager(t)
	h := newHarness(t, func(c *engine.Config) { c.MCP = m })
	// The server runs in the session's sandbox and serves its working
	// directory.
	h.agent("a", func(a *forge.Agent) {
		a.MCPServers = []forge.MCPServer{{Name: "fs", Command: []string{bin, "."}}}
	})
	s := h.session("a")
	sb, _, err := sandboxes.Get(h.ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	dir := sb.Dir()
	path := filepath.Join(dir, "note.txt")
	h.model.push(
		reply{calls: []forge.ToolCall{call("fs_write_file", `{"path":"`+path+`","content":"hello from forge"}`)}},
		reply{calls: []forge.ToolCall{call("fs_list_directory", `{"path":"`+dir+`"}`)}},
		reply{deltas: []string{"ok"}},
	)
	if turn := h.run(s.ID, msg("write a note")); turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello from forge" {
		t.Fatalf("file %q %v", b, err)
	}
	if res := h.model.sent()[2].Messages[4].Parts[0]; res.IsError || !strings.Contains(res.Output, "note.txt") {
		t.Fatalf("list_directory %+v", res)
	}
}

// callSignal wraps the MCP manager (through the engine's interface) and
// says when a tool call has started.
type callSignal struct {
	engine.MCPServers
	entered chan struct{}
}

func (m *callSignal) Tools(ctx context.Context, sid string, servers []forge.MCPServer) ([]forge.Tool, []forge.MCPInitialized, error) {
	tools, inits, err := m.MCPServers.Tools(ctx, sid, servers)
	for i, t := range tools {
		tools[i] = signalTool{Tool: t, entered: m.entered}
	}
	return tools, inits, err
}

type signalTool struct {
	forge.Tool
	entered chan struct{}
}

func (t signalTool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	close(t.entered)
	return t.Tool.Call(ctx, args)
}

func TestMCPServerKilledMidCallEndsTheCallCleanly(t *testing.T) {
	t.Parallel()
	bin := everythingServer(t)
	m, _ := mcpManager(t)
	entered := make(chan struct{})
	h := newHarness(t, func(c *engine.Config) { c.MCP = &callSignal{MCPServers: m, entered: entered} })
	h.agent("a", func(a *forge.Agent) {
		a.MCPServers = []forge.MCPServer{{Name: "everything", Command: []string{bin, "stdio"}}}
	})
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("everything_trigger-long-running-operation", `{"duration":20,"steps":20}`)}},
		reply{deltas: []string{"the server died"}},
	)
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // the call is in flight
	case <-time.After(time.Minute): // a server that never started: fail, don't hang
		t.Fatal("the MCP call never started")
	}
	pid := m.ServerPID(s.ID, "everything")
	if pid == 0 {
		t.Fatal("no server process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := h.wait(s.ID, turn.ID)
	if done.Status != forge.TurnDone || done.Output.Text != "the server died" {
		t.Fatalf("turn %+v", done)
	}
	if res := h.model.sent()[1].Messages[2].Parts[0]; !res.IsError || !strings.Contains(res.Output, "not running") {
		t.Fatalf("result %+v", res)
	}
}

// TestRecoveredTurnKeepsTheBaseTurnsState: a turn abandoned by a crash
// ends with the snapshot of the turn it chained from (capability states,
// thread states, MCP info), so the session continues with its todo list.
func TestRecoveredTurnKeepsTheBaseTurnsState(t *testing.T) {
	t.Parallel()
	bin := everythingServer(t)
	m, _ := mcpManager(t)
	h := newHarness(t, func(c *engine.Config) {
		c.Capabilities = tools.Capabilities()
		c.MCP = m
	})
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "todo", BuiltIn: true}}
		a.MCPServers = []forge.MCPServer{{Name: "everything", Command: []string{bin, "stdio"}}}
	})
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("todo_write", `{"items":[{"content":"ship it","status":"pending"}]}`)}},
		reply{deltas: []string{"planned"}},
	)
	t1 := h.run(s.ID, msg("plan"))
	base, err := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, t1.ID)
	if err != nil || base.Capabilities["todo"] == nil || base.Extra["mcp"] == nil {
		t.Fatalf("base snapshot %+v %v", base, err)
	}
	// The next turn dies mid-stream: a copy of the database is what a
	// killed process leaves.
	h.model.push(reply{deltas: []string{"work"}, block: make(chan struct{})})
	t2, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("do it"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	copyDB(t, h.path)
	cancelRunning(t, h, s.ID) // the crashed process is gone; no need to wait for it
	h2 := &harness{t: t, path: h.path + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open(func(c *engine.Config) {
		c.Capabilities = tools.Capabilities()
		c.MCP = m
	})
	defer h2.close()
	snap, err := h2.store.GetSnapshot(h.ctx, forge.DefaultTenant, t2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(snap.Capabilities["todo"]) != string(base.Capabilities["todo"]) || string(snap.Extra["mcp"]) != string(base.Extra["mcp"]) {
		t.Fatalf("recovered snapshot capabilities %s mcp %s; base had %s and %s",
			snap.Capabilities["todo"], snap.Extra["mcp"], base.Capabilities["todo"], base.Extra["mcp"])
	}
	if st := snap.Threads[s.MainThreadID]; st.State != forge.ThreadFinished || st.Agent != "a" {
		t.Fatalf("main thread state %+v", st)
	}
	// The session goes on with its list.
	h2.model.push(reply{calls: []forge.ToolCall{call("todo_read", `{}`)}}, reply{deltas: []string{"read"}})
	if t3 := h2.run(s.ID, msg("what is left?")); t3.Status != forge.TurnDone || *t3.PreviousTurnID != t2.ID {
		t.Fatalf("next turn %+v", t3)
	}
	if got := h2.model.sent()[1].Messages; got[len(got)-1].Parts[0].Output != "1. [pending] ship it" {
		t.Fatalf("todo_read after recovery: %q", got[len(got)-1].Parts[0].Output)
	}
}

// A step whose tool changes sandbox files gets a workspace snapshot: its
// step-finish part names it (a message.updated event after the patch
// carries it; step.finished itself was written before the calls ran), a
// step that only reads gets none, the turn snapshot keeps the sandbox info,
// and RestoreWorkspace brings the files back.
func TestSandboxStepKeepsWorkspaceSnapshot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSandboxes(t))
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "write_file", BuiltIn: true}, {Name: "read_file", BuiltIn: true}}
	})
	s := h.session("a")
	h.model.push(
		reply{calls: []forge.ToolCall{call("write_file", `{"path":"a.txt","content":"one\n"}`)}},
		reply{calls: []forge.ToolCall{call("read_file", `{"path":"a.txt"}`)}},
		reply{deltas: []string{"done"}},
	)
	turn := h.run(s.ID, msg("write it"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	var snapID string
	var finished, updated int
	for _, ev := range h.events(s.ID, 0) {
		switch ev.Type {
		case forge.EventStepFinished:
			finished++
			var p forge.Part
			_ = json.Unmarshal(ev.Data, &p)
			if d, _ := parts.StepFinishOf(&p); d.Snapshot != "" {
				t.Fatalf("step.finished already names a snapshot: %s", p.Data)
			}
		case forge.EventMessageUpdated:
			var m forge.Message
			_ = json.Unmarshal(ev.Data, &m)
			for _, p := range m.Parts {
				if d, ok := parts.StepFinishOf(p); ok && d.Snapshot != "" {
					updated++
					snapID = d.Snapshot
				}
			}
		}
	}
	if finished != 3 || updated != 1 || !strings.HasPrefix(snapID, forge.PrefixSnapshot) {
		t.Fatalf("step.finished %d, message.updated with a snapshot %d, id %q", finished, updated, snapID)
	}
	// The stored rows agree: the writing step alone names it.
	var named []string
	msgs, _, err := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: s.ID, TipTurnID: turn.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if d, ok := parts.StepFinishOf(p); ok {
				named = append(named, d.Snapshot)
			}
		}
	}
	if len(named) != 3 || named[0] != snapID || named[1] != "" || named[2] != "" {
		t.Fatalf("stored step-finish snapshots %q", named)
	}
	snap, err := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	var info forge.SandboxInfo
	if err := json.Unmarshal(snap.Extra["sandbox"], &info); err != nil || info.Snapshot != snapID {
		t.Fatalf("sandbox info %s %v", snap.Extra["sandbox"], err)
	}
	// Restoring it undoes what came later.
	var dir string
	for _, ev := range h.events(s.ID, 0) {
		if ev.Type == forge.EventSandboxCreated {
			var d struct{ Dir string }
			_ = json.Unmarshal(ev.Data, &d)
			dir = d.Dir
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := h.eng.RestoreWorkspace(h.ctx, forge.DefaultTenant, s.ID, snapID)
	if err != nil || res.Written != 1 {
		t.Fatalf("restore %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "one\n" {
		t.Fatalf("a.txt %q", b)
	}
	if _, err := h.eng.RestoreWorkspace(h.ctx, "another-tenant", s.ID, snapID); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("another tenant: %v", err)
	}
}
