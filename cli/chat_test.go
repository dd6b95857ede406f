package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// syncBuffer is an output the test reads while the chat writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the output contains want.
func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q in output:\n%s", want, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeAPI is a small stand-in of the Forge server for the chat's unit
// tests: agents, sessions, streamed turns driven by a script, cancel.
type fakeAPI struct {
	t      *testing.T
	mu     sync.Mutex
	agents []forge.Agent
	ses    map[string]*forge.Session
	turns  map[string]*forge.Turn
	seq    int64
	inputs [][]forge.Input
	// script plays turn n (0-based) of the server.
	script  func(n int, ft *fakeTurn)
	cancels chan struct{}
	srv     *httptest.Server
}

func newFakeAPI(t *testing.T, script func(n int, ft *fakeTurn)) *fakeAPI {
	f := &fakeAPI{t: t, ses: map[string]*forge.Session{}, turns: map[string]*forge.Turn{}, script: script, cancels: make(chan struct{}, 10)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agents", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSONT(w, 200, map[string]any{"data": f.agents, "next_cursor": nil})
	})
	mux.HandleFunc("GET /v1/agents/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, a := range f.agents {
			if a.Name == r.PathValue("name") {
				writeJSONT(w, 200, a)
				return
			}
		}
		apiErr(w, 404, "not_found", "agent not found")
	})
	mux.HandleFunc("POST /v1/agents", func(w http.ResponseWriter, r *http.Request) {
		var a forge.Agent
		_ = json.NewDecoder(r.Body).Decode(&a)
		f.mu.Lock()
		defer f.mu.Unlock()
		a.ID, a.Version = "ag_"+a.Name, 1
		f.agents = append(f.agents, a)
		writeJSONT(w, 201, a)
	})
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Agent string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		defer f.mu.Unlock()
		s := &forge.Session{ID: fmt.Sprintf("ses_%d", len(f.ses)+1), Kind: "direct", Agent: body.Agent, MainThreadID: "thr_main"}
		f.ses[s.ID] = s
		writeJSONT(w, 201, s)
	})
	mux.HandleFunc("GET /v1/sessions/{sid}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if s := f.ses[r.PathValue("sid")]; s != nil {
			writeJSONT(w, 200, s)
			return
		}
		apiErr(w, 404, "not_found", "session not found")
	})
	mux.HandleFunc("GET /v1/sessions/{sid}/turns/{tid}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if t := f.turns[r.PathValue("tid")]; t != nil {
			writeJSONT(w, 200, t)
			return
		}
		apiErr(w, 404, "not_found", "turn not found")
	})
	mux.HandleFunc("POST /v1/sessions/{sid}/cancel", func(w http.ResponseWriter, r *http.Request) {
		f.cancels <- struct{}{}
		writeJSONT(w, 200, map[string]any{"id": "turn_x", "status": "running"})
	})
	mux.HandleFunc("POST /v1/sessions/{sid}/turns", f.turn)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSONT(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSONT(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *fakeAPI) turn(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Input  []forge.Input `json:"input"`
		Stream bool          `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Stream {
		apiErr(w, 400, "invalid_request", "the chat streams its turns")
		return
	}
	f.mu.Lock()
	n := len(f.inputs)
	f.inputs = append(f.inputs, body.Input)
	sid := r.PathValue("sid")
	tid := fmt.Sprintf("turn_%d", n+1)
	t := &forge.Turn{ID: tid, SessionID: sid, Status: forge.TurnRunning, Input: body.Input}
	f.turns[tid] = t
	f.mu.Unlock()
	ft := &fakeTurn{f: f, w: w, turn: t, ctx: r.Context()}
	f.script(n, ft)
}

// fakeTurn writes one turn's SSE stream.
type fakeTurn struct {
	f       *fakeAPI
	w       http.ResponseWriter
	ctx     context.Context
	turn    *forge.Turn
	started bool
	part    int
}

// refuse answers the turn's POST with an API error instead of a stream.
func (ft *fakeTurn) refuse(status int, code, msg string) { apiErr(ft.w, status, code, msg) }

func (ft *fakeTurn) emit(typ, id string, data any) {
	if !ft.started {
		ft.started = true
		ft.w.Header().Set("Content-Type", "text/event-stream")
		ft.w.Header().Set("Forge-Turn-Id", ft.turn.ID)
		ft.w.WriteHeader(200)
		ft.emit(forge.EventTurnCreated, ft.turn.ID, ft.turn)
	}
	ft.f.mu.Lock()
	ft.f.seq++
	seq := ft.f.seq
	ft.f.mu.Unlock()
	raw, _ := json.Marshal(data)
	th, tid := "thr_main", ft.turn.ID
	ev := forge.Event{Seq: seq, ID: id, Type: typ, SessionID: ft.turn.SessionID, TurnID: &tid, ThreadID: &th, Data: raw}
	b, _ := json.Marshal(ev)
	fmt.Fprintf(ft.w, "id: %d\nevent: %s\ndata: %s\n\n", seq, typ, b)
	ft.w.(http.Flusher).Flush()
}

// text streams a text (or reasoning) part delta by delta.
func (ft *fakeTurn) text(typ string, deltas ...string) {
	ft.part++
	id := fmt.Sprintf("prt_%s_%d", ft.turn.ID, ft.part)
	ft.emit(forge.EventModelMessage, id, forge.Part{ID: id, Type: typ, State: forge.StateStreaming})
	for _, d := range deltas {
		ft.emit(forge.EventModelDelta, id, forge.DeltaData{Delta: d})
	}
	ft.emit(forge.EventModelMessage, id, forge.Part{ID: id, Type: typ, State: forge.StateCompleted, Text: strings.Join(deltas, "")})
}

func (ft *fakeTurn) toolCall(callID, tool, args, state string) {
	ft.emit(forge.EventToolCall, "prt_"+callID, forge.Part{ID: "prt_" + callID, Type: forge.PartTool, CallID: callID, Tool: tool, Arguments: json.RawMessage(args), State: state})
}

func (ft *fakeTurn) toolResult(callID, tool, output string) {
	ft.emit(forge.EventToolResponse, "prt_"+callID, forge.Part{ID: "prt_" + callID, Type: forge.PartTool, CallID: callID, Tool: tool, State: forge.StateCompleted, Output: &output})
}

func (ft *fakeTurn) done(status string, edit func(*forge.Turn)) {
	ft.f.mu.Lock()
	ft.turn.Status = status
	if edit != nil {
		edit(ft.turn)
	}
	t := *ft.turn
	ft.f.mu.Unlock()
	ft.emit(forge.EventTurnDone, t.ID, t)
}

func ptr[T any](v T) *T { return &v }

func testClient(t *testing.T, url string) *client.Client {
	c, err := client.New(url, client.WithReconnect(3, time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runChatAsync runs the chat loop on its own goroutine.
func runChatAsync(t *testing.T, c *client.Client, in io.Reader, sigs chan os.Signal, o chatOptions) (*syncBuffer, <-chan error) {
	out := &syncBuffer{}
	o.echo = true
	errc := make(chan error, 1)
	go func() { errc <- runChat(context.Background(), c, in, out, sigs, o) }()
	return out, errc
}

func waitExit(t *testing.T, errc <-chan error, out *syncBuffer) {
	t.Helper()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("chat returned %v; output:\n%s", err, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("chat did not exit; output:\n%s", out.String())
	}
}

func TestChatStreamsAndAnswersActions(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, ft *fakeTurn) {
		switch n {
		case 0:
			ft.text(forge.PartReasoning, "Let me ", "look.")
			ft.toolCall("call_1", "read_file", `{"path": "README.md"}`, forge.StateRunning)
			ft.toolResult("call_1", "read_file", "# Forge\nline 2\nline 3\n")
			ft.text(forge.PartText, "Hel", "lo, ", "world!")
			ft.done(forge.TurnDone, func(t *forge.Turn) { t.Output = &forge.TurnOutput{Text: "Hello, world!"} })
		case 1:
			ft.toolCall("call_2", "refund", `{"order":42}`, forge.StatePending)
			ft.toolCall("call_3", "ask_user", `{"question":"which color?"}`, forge.StatePending)
			ft.done(forge.TurnDone, func(t *forge.Turn) {
				t.RequiredActions = []forge.RequiredAction{
					{Type: forge.ActionApproval, CallID: "call_2", Tool: "refund", Arguments: json.RawMessage(`{"order":42}`)},
					{Type: forge.ActionClientTool, CallID: "call_3", Tool: "ask_user", Arguments: json.RawMessage(`{"question":"which color?"}`)},
				}
			})
		case 2:
			ft.toolCall("call_2", "refund", `{"order":42}`, forge.StateRunning)
			ft.toolResult("call_2", "refund", "refunded")
			ft.text(forge.PartText, "Refunded; ", "blue it is.")
			ft.done(forge.TurnDone, nil)
		case 3:
			ft.toolCall("call_4", "delete_all", `{}`, forge.StatePending)
			ft.done(forge.TurnDone, func(t *forge.Turn) {
				t.RequiredActions = []forge.RequiredAction{{Type: forge.ActionApproval, CallID: "call_4", Tool: "delete_all", Arguments: json.RawMessage(`{}`)}}
			})
		case 4:
			ft.text(forge.PartText, "OK, I won't.")
			ft.done(forge.TurnDone, nil)
		default:
			ft.refuse(409, "turn_in_progress", "a turn is already running")
		}
	})
	in := strings.NewReader("hello\nrefund order 42\ny\nblue\ndelete everything\nn\ntoo risky\nagain\n")
	out, errc := runChatAsync(t, testClient(t, api.srv.URL), in, make(chan os.Signal), chatOptions{})
	waitExit(t, errc, out)

	want := `created agent assistant (scripted/echo)
forge chat: agent assistant (scripted/echo), session ses_1
Ctrl-C cancels a turn; Ctrl-D or /quit exits; /new starts a new session; /help lists commands.
> hello
thinking: Let me look.
[tool read_file {"path":"README.md"}]
  -> # Forge (+2 lines)
Hello, world!
> refund order 42
[tool refund {"order":42}]
[tool ask_user {"question":"which color?"}]
approve refund {"order":42}? [y/N] y
[client tool ask_user {"question":"which color?"}]
output of ask_user> blue
  -> refunded
Refunded; blue it is.
> delete everything
[tool delete_all {}]
approve delete_all {}? [y/N] n
reason (optional): too risky
OK, I won't.
> again
error: a turn is already running (turn_in_progress)
> 
`
	if got := out.String(); got != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", got, want)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	got, _ := json.Marshal(api.inputs)
	wantIn := `[[{"type":"message","text":"hello"}],[{"type":"message","text":"refund order 42"}],` +
		`[{"type":"approval","call_id":"call_2","approved":true},{"type":"tool_result","call_id":"call_3","output":"blue"}],` +
		`[{"type":"message","text":"delete everything"}],[{"type":"approval","call_id":"call_4","approved":false,"reason":"too risky"}],` +
		`[{"type":"message","text":"again"}]]`
	if string(got) != wantIn {
		t.Errorf("turn inputs:\n%s\nwant\n%s", got, wantIn)
	}
	if len(api.agents) != 1 || api.agents[0].Name != "assistant" || api.agents[0].Model != "scripted/echo" {
		t.Errorf("agents %+v", api.agents)
	}
}

func TestChatCtrlCCancelsTurnThenExitsAtPrompt(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil)
	api.script = func(n int, ft *fakeTurn) {
		ft.text(forge.PartText, "Sure.")
		// A part that streams until the turn is cancelled.
		ft.emit(forge.EventModelMessage, "prt_cut", forge.Part{ID: "prt_cut", Type: forge.PartText, State: forge.StateStreaming})
		ft.emit(forge.EventModelDelta, "prt_cut", forge.DeltaData{Delta: "work"})
		ft.emit(forge.EventModelDelta, "prt_cut", forge.DeltaData{Delta: "ing"})
		select {
		case <-api.cancels:
		case <-time.After(10 * time.Second):
		}
		ft.emit(forge.EventModelMessage, "prt_cut", forge.Part{ID: "prt_cut", Type: forge.PartText, State: forge.StateInterrupted, Text: "working"})
		ft.done(forge.TurnCancelled, func(t *forge.Turn) { t.CancelReason = ptr(forge.CancelClient) })
	}
	api.agents = []forge.Agent{{Name: "helper", Model: "openai/gpt-x"}}
	pr, pw := io.Pipe()
	defer pw.Close()
	sigs := make(chan os.Signal, 1)
	out, errc := runChatAsync(t, testClient(t, api.srv.URL), pr, sigs, chatOptions{})
	waitFor(t, out, "> ")
	io.WriteString(pw, "long task\n")
	waitFor(t, out, "working")
	sigs <- os.Interrupt
	waitFor(t, out, "[turn cancelled (client)]")
	waitFor(t, out, "[turn cancelled (client)]\n> ")
	sigs <- os.Interrupt // at the prompt: exit
	waitExit(t, errc, out)
	want := `forge chat: agent helper (openai/gpt-x), session ses_1
Ctrl-C cancels a turn; Ctrl-D or /quit exits; /new starts a new session; /help lists commands.
> long task
Sure.
working
[cancelling... Ctrl-C again to stop waiting]
[turn cancelled (client)]
> 
`
	if got := out.String(); got != want {
		t.Errorf("transcript:\n%q\nwant:\n%q", got, want)
	}
}

func TestChatSecondCtrlCStopsWaiting(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	api := newFakeAPI(t, func(n int, ft *fakeTurn) {
		ft.text(forge.PartText, "stuck")
		select {
		case <-release:
		case <-ft.ctx.Done():
		}
	})
	defer close(release)
	pr, pw := io.Pipe()
	sigs := make(chan os.Signal, 1)
	out, errc := runChatAsync(t, testClient(t, api.srv.URL), pr, sigs, chatOptions{})
	io.WriteString(pw, "go\n")
	waitFor(t, out, "stuck")
	sigs <- os.Interrupt
	waitFor(t, out, "[cancelling")
	sigs <- os.Interrupt
	waitFor(t, out, "[stopped waiting; the turn may still be running]\n> ")
	io.WriteString(pw, "/session\n")
	waitFor(t, out, "session ses_1, agent assistant")
	pw.Close() // Ctrl-D
	waitExit(t, errc, out)
}

func TestChatCommandsAndSigterm(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, ft *fakeTurn) {
		ft.text(forge.PartText, "echo: /etc")
		ft.done(forge.TurnDone, nil)
	})
	pr, pw := io.Pipe()
	sigs := make(chan os.Signal, 1)
	out, errc := runChatAsync(t, testClient(t, api.srv.URL), pr, sigs, chatOptions{})
	io.WriteString(pw, "/new\n")
	waitFor(t, out, "new session ses_2")
	io.WriteString(pw, "/bogus\n")
	waitFor(t, out, "unknown command /bogus (try /help)")
	io.WriteString(pw, "//etc\n")
	waitFor(t, out, "echo: /etc\n> ")
	sigs <- syscall.SIGTERM
	waitExit(t, errc, out)
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.inputs) != 1 || api.inputs[0][0].Text != "/etc" {
		t.Errorf("inputs %+v", api.inputs)
	}
}

func TestChatPendingActionsRecovery(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, ft *fakeTurn) {
		switch n {
		case 0:
			ft.text(forge.PartText, "logged in")
			ft.done(forge.TurnDone, nil)
		case 1:
			// Another client left open calls meanwhile.
			ft.refuse(409, "pending_actions", "the session has open calls")
		case 2:
			ft.text(forge.PartText, "thanks")
			ft.done(forge.TurnDone, nil)
		}
	})
	api.ses["ses_9"] = &forge.Session{ID: "ses_9", Agent: "a", TipTurnID: ptr("turn_0")}
	api.turns["turn_0"] = &forge.Turn{ID: "turn_0", Status: forge.TurnDone, RequiredActions: []forge.RequiredAction{
		{Type: forge.ActionAuth, CallID: "call_9", Tool: "crm_login"}}}
	api.agents = []forge.Agent{{Name: "a", Model: "scripted/echo"}}
	// --session of a paused session: the chat asks for the answers first.
	in := strings.NewReader("tok1\nhi\ntok2\n")
	out, errc := runChatAsync(t, testClient(t, api.srv.URL), in, make(chan os.Signal), chatOptions{session: "ses_9"})
	waitExit(t, errc, out)
	for _, want := range []string{
		"agent a (scripted/echo), session ses_9",
		"token for crm_login> tok1\nlogged in\n> hi\n",
		"> hi\nthe session waits for answers to open tool calls; your message was not sent\n",
		"token for crm_login> tok2\nthanks\n> \n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	b, _ := json.Marshal(api.inputs)
	if string(b) != `[[{"type":"auth","call_id":"call_9","token":"tok1"}],[{"type":"message","text":"hi"}],[{"type":"auth","call_id":"call_9","token":"tok2"}]]` {
		t.Errorf("inputs %s", b)
	}
}

func TestChatAgentFlag(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil)
	api.agents = []forge.Agent{{Name: "a", Model: "scripted/echo"}, {Name: "b", Model: "openai/gpt-4.1-mini"}}
	c := testClient(t, api.srv.URL)
	run := func(o chatOptions) (string, error) {
		var out bytes.Buffer
		err := runChat(context.Background(), c, strings.NewReader(""), &out, nil, o)
		return out.String(), err
	}
	out, err := run(chatOptions{agent: "b"})
	if err != nil || !strings.HasPrefix(out, "forge chat: agent b (openai/gpt-4.1-mini)") {
		t.Errorf("--agent b: %q %v", out, err)
	}
	out, err = run(chatOptions{})
	if err != nil || !strings.HasPrefix(out, "using agent a (the server has 2 agents; choose one with --agent)\n") {
		t.Errorf("no --agent: %q %v", out, err)
	}
	if _, err = run(chatOptions{agent: "nope"}); err == nil || err.Error() != `agent "nope" does not exist (give --model to create it)` {
		t.Errorf("unknown agent: %v", err)
	}
	out, err = run(chatOptions{agent: "nope", model: "scripted/x", modelSet: true})
	if err != nil || !strings.HasPrefix(out, "created agent nope (scripted/x)\n") {
		t.Errorf("--agent nope --model: %q %v", out, err)
	}
	if _, err = run(chatOptions{session: "ses_404"}); err == nil || err.Error() != "session not found (not_found)" {
		t.Errorf("unknown session: %v", err)
	}
}

func TestChatServerDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := testClient(t, url)
	err := runChat(context.Background(), c, strings.NewReader(""), io.Discard, nil, chatOptions{})
	want := "cannot reach the Forge server at " + url + " (is `forge serve` running? set --server or FORGE_URL)"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

// ---- end to end: the real server (forge serve) in-process ----

// startServer runs forge serve in-process on a free loopback port with a
// fresh SQLite database and returns its URL once /healthz answers. opts
// change the server's options.
func startServer(t *testing.T, opts ...func(*serveOptions)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	db := filepath.Join(t.TempDir(), "forge.db")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	so := serveOptions{addr: addr, db: db, turnTimeout: time.Minute, shutdownGrace: time.Second, logLevel: "error"}
	for _, o := range opts {
		o(&so)
	}
	go func() { done <- serve(ctx, so) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	url := "http://" + addr
	c := testClient(t, url)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		err := c.Health(hctx)
		hcancel()
		if err == nil {
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dropProxy forwards TCP connections to target. The response to the first
// streamed turn (POST .../turns) is cut right after its first text delta
// frame (or after its third frame when there is no delta), so the client
// must resume the turn's stream on a new connection.
type dropProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32
	// onDelta tells that the cut came right after a text delta.
	onDelta atomic.Bool
	mu      sync.Mutex
	heads   []string // request line and Last-Event-ID of each connection
}

func newDropProxy(t *testing.T, targetURL string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: strings.TrimPrefix(targetURL, "http://")}
	p.armed.Store(true)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
	return p
}

func (p *dropProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) handle(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	decided := make(chan bool, 1)
	go func() {
		buf := make([]byte, 64<<10)
		first := true
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if first {
					first = false
					head := string(buf[:n])
					line, _, _ := strings.Cut(head, "\r\n")
					rec := line
					for _, h := range strings.Split(head, "\r\n") {
						if v, ok := strings.CutPrefix(h, "Last-Event-Id: "); ok {
							rec += " Last-Event-ID=" + v
						}
					}
					p.mu.Lock()
					p.heads = append(p.heads, rec)
					p.mu.Unlock()
					cut := strings.HasPrefix(line, "POST ") && strings.Contains(line, "/turns ") && p.armed.CompareAndSwap(true, false)
					decided <- cut
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	cut := <-decided
	if !cut {
		_, _ = io.Copy(c, s)
		return
	}
	// Forward frame by frame until the first delta frame has passed, then
	// drop both connections (however the frames before it were batched).
	var seen bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			seen.Write(buf[:n])
			all := seen.String()
			end := -1
			if i := strings.Index(all, "event: model.message.delta\n"); i >= 0 {
				if j := strings.Index(all[i:], "\n\n"); j >= 0 {
					end = i + j + 2
					p.onDelta.Store(true)
				}
			}
			if end >= 0 {
				already := seen.Len() - n
				if end > already {
					_, _ = c.Write([]byte(all[already:end]))
				}
				p.cuts.Add(1)
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// e2eChat runs the chat against url with in as its input until it exits.
func e2eChat(t *testing.T, c *client.Client, in io.Reader, sigs chan os.Signal, o chatOptions) (*syncBuffer, <-chan error) {
	t.Helper()
	return runChatAsync(t, c, in, sigs, o)
}

func count(s, sub string) int { return strings.Count(s, sub) }

// TestChatEndToEnd drives the chat loop against the real stack (httpapi,
// engine, sqlite, the scripted provider) served in-process.
func TestChatEndToEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a server")
	}
	url := startServer(t)
	c := testClient(t, url)
	ctx := context.Background()

	t.Run("echo", func(t *testing.T) {
		out, errc := e2eChat(t, c, strings.NewReader("hello there, forge\n"), make(chan os.Signal), chatOptions{model: "scripted/echo"})
		waitExit(t, errc, out)
		got := out.String()
		for _, want := range []string{
			"created agent assistant (scripted/echo)\nforge chat: agent assistant (scripted/echo), session ses_",
			"> hello there, forge\necho: hello there, forge\n> \n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q:\n%s", want, got)
			}
		}
		if n := count(got, "echo: hello there, forge"); n != 1 {
			t.Errorf("answer printed %d times:\n%s", n, got)
		}
	})

	t.Run("attach", func(t *testing.T) {
		dir := t.TempDir()
		notes := filepath.Join(dir, "notes.md")
		if err := os.WriteFile(notes, []byte("# Notes\nthe order shipped\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		in := strings.NewReader("/attach " + filepath.Join(dir, "missing.png") + "\n/attach " + notes + "\nread these\nand now?\n")
		out, errc := e2eChat(t, c, in, make(chan os.Signal), chatOptions{model: "scripted/echo", attach: []string{notes}})
		waitExit(t, errc, out)
		got := out.String()
		if n := count(got, "attached notes.md (text/markdown, 26 bytes) to the next message"); n != 2 {
			t.Fatalf("attached %d times, want 2 (--attach and /attach):\n%s", n, got)
		}
		if !strings.Contains(got, "missing.png") || !strings.Contains(got, "no such file") {
			t.Errorf("a missing file is not reported:\n%s", got)
		}
		sid := regexp.MustCompile(`session (ses_[0-9A-Z]+)`).FindStringSubmatch(got)
		if sid == nil {
			t.Fatalf("no session in output:\n%s", got)
		}
		turns, err := c.ListTurns(ctx, sid[1], client.ListOptions{})
		if err != nil || len(turns.Data) != 2 {
			t.Fatalf("turns %+v %v", turns, err)
		}
		// Both uploads go with the first message (the same bytes, one file
		// each), none with the second.
		first, second := turns.Data[0].Input[0], turns.Data[1].Input[0]
		if len(first.Files) != 2 || first.Files[0].Filename != "notes.md" || len(second.Files) != 0 {
			t.Fatalf("inputs %+v / %+v", first, second)
		}
		rc, typ, err := c.FileContent(ctx, first.Files[0].FileID)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "# Notes\nthe order shipped\n" || !strings.HasPrefix(typ, "text/markdown") {
			t.Fatalf("content %q type %q", b, typ)
		}
		list, err := c.ListFiles(ctx, client.ListOptions{})
		if err != nil || len(list.Data) < 2 {
			t.Fatalf("files %+v %v", list, err)
		}
		if err := c.DeleteFile(ctx, first.Files[0].FileID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetFile(ctx, first.Files[0].FileID); !client.IsNotFound(err) {
			t.Fatalf("deleted file: %v", err)
		}
	})

	t.Run("approval", func(t *testing.T) {
		_, err := c.CreateAgent(ctx, &forge.Agent{
			Name: "approver", Model: "scripted/approver",
			Tools:    []forge.ToolSpec{{Name: "echo", BuiltIn: true}},
			Approval: map[string]string{"echo": forge.PolicyAsk},
			ModelParams: forge.ModelParams{Script: json.RawMessage(`[
				{"tool_calls": [{"name": "echo", "arguments": {"text": "approved!"}}]},
				{"text": "The tool has answered."}]`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		in := strings.NewReader("please echo\ny\n/new\nplease echo\nn\nnot now\n")
		out, errc := e2eChat(t, c, in, make(chan os.Signal), chatOptions{agent: "approver"})
		waitExit(t, errc, out)
		got := out.String()
		for _, want := range []string{
			"forge chat: agent approver (scripted/approver), session ses_",
			"> please echo\n[tool echo {\"text\":\"approved!\"}]\napprove echo {\"text\":\"approved!\"}? [y/N] y\n" +
				"  -> approved!\nThe tool has answered.\n> /new\nnew session ses_",
			"approve echo {\"text\":\"approved!\"}? [y/N] n\nreason (optional): not now\n  -> error: ",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q:\n%s", want, got)
			}
		}
		if strings.Contains(got, "\nerror:") {
			t.Errorf("errors in output:\n%s", got)
		}
		// The denial reached the server with its reason.
		sessions, err := c.ListSessions(ctx, client.ListSessionsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var denied *forge.Turn
		for _, s := range sessions.Data {
			if s.Agent != "approver" {
				continue
			}
			turns, err := c.ListTurns(ctx, s.ID, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range turns.Data {
				for _, in := range turns.Data[i].Input {
					if in.Type == forge.InputApproval && in.Approved != nil && !*in.Approved {
						denied = &turns.Data[i]
						if in.Reason != "not now" {
							t.Errorf("denial reason %q", in.Reason)
						}
					}
				}
			}
		}
		if denied == nil || denied.Status != forge.TurnDone {
			t.Errorf("no done turn carries the denial: %+v", denied)
		}
	})

	t.Run("ctrl-c cancels", func(t *testing.T) {
		_, err := c.CreateAgent(ctx, &forge.Agent{
			Name: "slow", Model: "scripted/slow",
			ModelParams: forge.ModelParams{Script: json.RawMessage(`[{"text": "Working on it", "hang": true}]`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		pr, pw := io.Pipe()
		defer pw.Close()
		sigs := make(chan os.Signal, 1)
		out, errc := e2eChat(t, c, pr, sigs, chatOptions{agent: "slow"})
		io.WriteString(pw, "start\n")
		waitFor(t, out, "Working on it")
		sigs <- os.Interrupt
		waitFor(t, out, "[turn cancelled (client)]\n> ")
		pw.Close()
		waitExit(t, errc, out)
		if got := out.String(); count(got, "Working on it") != 1 {
			t.Errorf("output:\n%s", got)
		}
	})

	t.Run("dropped stream resumes", func(t *testing.T) {
		const text = "one two three four five six seven eight nine ten"
		_, err := c.CreateAgent(ctx, &forge.Agent{
			Name: "talker", Model: "scripted/talker",
			ModelParams: forge.ModelParams{Script: json.RawMessage(`[{"text": "` + text + `", "delay_ms": 20}]`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		proxy := newDropProxy(t, url)
		pc, err := client.New(proxy.url(), client.WithReconnect(5, 10*time.Millisecond, 100*time.Millisecond),
			client.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}))
		if err != nil {
			t.Fatal(err)
		}
		out, errc := e2eChat(t, pc, strings.NewReader("talk\n"), make(chan os.Signal), chatOptions{agent: "talker"})
		waitExit(t, errc, out)
		got := out.String()
		if proxy.cuts.Load() != 1 || !proxy.onDelta.Load() {
			t.Fatalf("the proxy cut %d streams (after a delta: %v)", proxy.cuts.Load(), proxy.onDelta.Load())
		}
		proxy.mu.Lock()
		heads := strings.Join(proxy.heads, "\n")
		proxy.mu.Unlock()
		// The resumption is a GET of the turn's events after the delta.
		if ok, _ := regexp.MatchString(`(?m)^GET /v1/sessions/ses_\w+/turns/turn_\w+/events\?after=(\d+) HTTP/1.1 Last-Event-ID=\d+$`, heads); !ok {
			t.Errorf("no resumption among the requests:\n%s", heads)
		}
		if !strings.Contains(got, "> talk\n"+text+"\n> \n") || count(got, "one") != 1 {
			t.Errorf("output:\n%s", got)
		}
	})
}
