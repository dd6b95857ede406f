package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/forum"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/scheduler"
	"github.com/forge-runtime/forge/schemas"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
)

// stack is the real server in-process: SQLite in a temp dir, the engine,
// the HTTP handler on an httptest server.
type stack struct {
	t     *testing.T
	store forge.Store
	eng   *engine.Engine
	srv   *httptest.Server
	// handler is the API handler srv serves, for in-process calls.
	handler http.Handler
	api     *httpapi.Server
	key     string // bearer key sent by default
	// close stops the server, the engine and the store (once).
	close func()
}

type stackOption func(*httpapi.Config)

func newStack(t *testing.T, opts ...stackOption) *stack {
	t.Helper()
	return newStackAt(t, t.TempDir()+"/forge.db", opts...)
}

// newStackAt is newStack on the database file db; close (or the test's
// end) stops it, and another stack may then open the same file.
func newStackAt(t *testing.T, db string, opts ...stackOption) *stack {
	t.Helper()
	return newStackEngine(t, db, nil, opts...)
}

// newStackEngine is newStackAt with engineOpt (when set) tuning the
// engine's configuration.
func newStackEngine(t *testing.T, db string, engineOpt func(*engine.Config), opts ...stackOption) *stack {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return newStackOn(t, st, engineOpt, opts...)
}

// closingStore is a store the stack closes when it stops.
type closingStore interface {
	forge.Store
	Close(ctx context.Context) error
}

// newStackOn is newStackEngine on the store st (the stack closes it).
func newStackOn(t *testing.T, st closingStore, engineOpt func(*engine.Config), opts ...stackOption) *stack {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("HTTPAPI_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	ids := forge.NewULIDGen(nil)
	ecfg := engine.Config{
		Store: st, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: logger, ToolCancelWait: 200 * time.Millisecond, IDs: ids, Schemas: schemas.Compiler{}, Kinds: forum.Kinds(),
	}
	if engineOpt != nil {
		engineOpt(&ecfg)
	}
	eng := engine.New(ecfg)
	forums := forum.New(forum.Config{Store: st, Engine: eng, Models: models, Logger: logger, IDs: ids})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := forums.Open(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{Store: st, Engine: eng, Forums: forums, Logger: logger, Cadences: scheduler.Cadences{}}
	for _, o := range opts {
		o(&cfg)
	}
	api := httpapi.New(cfg)
	h := api.Handler()
	srv := httptest.NewServer(h)
	s := &stack{t: t, store: st, eng: eng, srv: srv, handler: h, api: api}
	var once sync.Once
	s.close = func() {
		once.Do(func() {
			srv.CloseClientConnections()
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = forums.Close(ctx)
			_ = eng.Close(ctx)
			_ = st.Close(ctx)
		})
	}
	t.Cleanup(s.close)
	return s
}

// req is one HTTP request to the stack.
type req struct {
	method, path string
	body         any // string or []byte: sent verbatim; otherwise JSON-encoded
	header       map[string]string
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }

// errCode returns the error code of an error answer.
func (a answer) errCode() string {
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}

func (s *stack) newRequest(r req) *http.Request {
	s.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		body = bytes.NewReader(j)
	}
	hr, err := http.NewRequest(r.method, s.srv.URL+r.path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if s.key != "" {
		hr.Header.Set("Authorization", "Bearer "+s.key)
	}
	for k, v := range r.header {
		switch {
		case k == "Host":
			hr.Host = v // net/http sends Request.Host, not a Host header
		case v == "":
			hr.Header.Del(k)
		default:
			hr.Header.Set(k, v)
		}
	}
	return hr
}

func (s *stack) do(r req) answer {
	s.t.Helper()
	resp, err := s.srv.Client().Do(s.newRequest(r))
	if err != nil {
		s.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading: %v", r.method, r.path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// call makes a request, checks the status and decodes the answer into out
// (when not nil).
func (s *stack) call(method, path string, body any, want int, out any) answer {
	s.t.Helper()
	a := s.do(req{method: method, path: path, body: body})
	if a.status != want {
		s.t.Fatalf("%s %s: got %s, want status %d", method, path, a, want)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			s.t.Fatalf("%s %s: decoding %s: %v", method, path, a.body, err)
		}
	}
	return a
}

// createAgent creates an agent on the scripted provider: without steps it
// echoes ("echo: <message>", a word per delta), otherwise it plays them.
func (s *stack) createAgent(name string, steps ...scripted.Step) {
	s.t.Helper()
	body := map[string]any{"name": name, "model": "scripted/echo", "instructions": "be brief"}
	if len(steps) > 0 {
		body["model_params"] = map[string]any{"script": scripted.Script(steps...)}
	}
	s.call("POST", "/v1/agents", body, 201, nil)
}

func (s *stack) createSession(agent string) forge.Session {
	s.t.Helper()
	var ses forge.Session
	s.call("POST", "/v1/sessions", map[string]any{"agent": agent}, 201, &ses)
	return ses
}

func msgTurn(text string) map[string]any {
	return map[string]any{"input": []any{map[string]any{"type": "message", "text": text}}}
}

// sseFrame is one parsed SSE frame (or comment).
type sseFrame struct {
	id, event, data, comment string
}

// sseReader reads frames from a response body.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &sseReader{sc: sc}
}

// next returns the next frame; ok false at the end of the stream.
func (r *sseReader) next() (f sseFrame, ok bool) {
	started := false
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if started {
				return f, true
			}
			continue
		}
		started = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			f.comment = value
		case "id":
			f.id = value
		case "event":
			f.event = value
		case "data":
			f.data += value
		}
	}
	return f, false
}

// events reads every event frame until the stream ends.
func (r *sseReader) events(t *testing.T) []forge.Event {
	t.Helper()
	var evs []forge.Event
	for {
		f, ok := r.next()
		if !ok {
			return evs
		}
		if f.comment != "" {
			continue
		}
		if f.event == "error" {
			t.Fatalf("stream error frame: %s", f.data)
		}
		var ev forge.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("frame data %q: %v", f.data, err)
		}
		if f.id != fmt.Sprint(ev.Seq) || f.event != ev.Type {
			t.Fatalf("frame id %q event %q does not match its data %s", f.id, f.event, f.data)
		}
		evs = append(evs, ev)
	}
}

// stream opens an SSE request and returns the response (the caller closes
// its body).
func (s *stack) stream(r req) *http.Response {
	s.t.Helper()
	hr := s.newRequest(r)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s.t.Cleanup(cancel)
	resp, err := s.srv.Client().Do(hr.WithContext(ctx))
	if err != nil {
		s.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	s.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func eventTypes(evs []forge.Event) string {
	var b []string
	for _, e := range evs {
		b = append(b, e.Type)
	}
	return strings.Join(b, " ")
}

// waitTurn polls a turn until it has ended.
func (s *stack) waitTurn(sid, tid string) forge.Turn {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var turn forge.Turn
		s.call("GET", "/v1/sessions/"+sid+"/turns/"+tid, nil, 200, &turn)
		if turn.Ended() {
			return turn
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("turn %s still %s", tid, turn.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// state summarizes everything stored for the default tenant, to check that
// a refused request stored nothing.
func (s *stack) state() string {
	s.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	agents, _, err := s.store.ListAgents(ctx, forge.DefaultTenant, forge.ListOptions{Limit: 10000})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, a := range agents {
		j, _ := json.Marshal(a)
		fmt.Fprintf(&b, "agent %s\n", j)
	}
	sessions, _, err := s.store.ListSessions(ctx, forge.DefaultTenant, forge.SessionQuery{ListOptions: forge.ListOptions{Limit: 10000}})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, ses := range sessions {
		j, _ := json.Marshal(ses)
		fmt.Fprintf(&b, "session %s\n", j)
		turns, _, err := s.store.ListTurns(ctx, forge.DefaultTenant, ses.ID, forge.ListOptions{Limit: 10000})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, t := range turns {
			fmt.Fprintf(&b, "  turn %s %s %d\n", t.ID, t.Status, t.LastSeq)
		}
		evs, err := s.store.ListEvents(ctx, forge.DefaultTenant, forge.EventQuery{SessionID: ses.ID, Limit: 10000})
		if err != nil {
			s.t.Fatal(err)
		}
		fmt.Fprintf(&b, "  %d events\n", len(evs))
	}
	return b.String()
}
