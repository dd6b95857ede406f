package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/forum"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/metrics"
	"github.com/forge-runtime/forge/protocol/aisdk"
	"github.com/forge-runtime/forge/protocol/openairesp"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/tools"
)

// TestRouteFuzz drives a real server (httpapi.Serve on a loopback
// listener, two tenants, the protocols, forums and metrics mounted) with
// random requests: methods, paths of the route table with real ids of the
// caller's tenant, of the other tenant and junk, queries, headers, and
// bodies (mutated valid ones, malformed JSON, deep nesting, invalid
// UTF-8, huge strings), some of them as raw bytes on the connection. No
// answer may be a 5xx (but net/http's 501 for an unknown transfer
// coding), every answer of 400 and more must be the route's JSON error
// ({"error": {...}} with a message), and every request must get an answer
// within a few seconds.
//
// It sends FORGE_FUZZ_REQUESTS requests (default 250) within at most
// FORGE_FUZZ_DURATION (default 4s); FORGE_FUZZ_SEED replays a run (the
// seed is logged when it fails).
func TestRouteFuzz(t *testing.T) {
	t.Parallel()
	n, limit, seed := fuzzSettings(t)
	f := newFuzzServer(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &fuzzGen{rng: rng, f: f}
	deadline := time.Now().Add(limit)
	sent := 0
	for sent < n && time.Now().Before(deadline) {
		sent++
		if rng.IntN(10) == 0 {
			f.checkRaw(t, g.raw(), seed)
			continue
		}
		r := g.request()
		if os.Getenv("FORGE_FUZZ_VERBOSE") != "" {
			t.Logf("%d: %s", sent, r)
		}
		f.check(t, r, seed)
		if t.Failed() && !fuzzKeepGoing() {
			break
		}
	}
	t.Logf("seed %d: %d requests; statuses %v", seed, sent, f.statuses())
	if t.Failed() {
		t.Logf("replay with FORGE_FUZZ_SEED=%d", seed)
	}
}

func fuzzSettings(t *testing.T) (n int, limit time.Duration, seed uint64) {
	n, limit, seed = 250, 4*time.Second, uint64(time.Now().UnixNano())
	if v := os.Getenv("FORGE_FUZZ_REQUESTS"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 {
			t.Fatalf("FORGE_FUZZ_REQUESTS=%q", v)
		}
		n, limit = x, time.Hour
	}
	if v := os.Getenv("FORGE_FUZZ_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("FORGE_FUZZ_DURATION=%q", v)
		}
		limit = d
		if os.Getenv("FORGE_FUZZ_REQUESTS") == "" {
			n = int(^uint(0) >> 1)
		}
	}
	if v := os.Getenv("FORGE_FUZZ_SEED"); v != "" {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FORGE_FUZZ_SEED=%q", v)
		}
		seed = x
	}
	return n, limit, seed
}

// fuzzKeepGoing: with FORGE_FUZZ_ALL=1 a run reports every failure
// instead of stopping at the first.
func fuzzKeepGoing() bool { return os.Getenv("FORGE_FUZZ_ALL") != "" }

// fuzzServer is the server under test and the ids it holds.
type fuzzServer struct {
	addr   string
	client *http.Client
	// ids are real ids by kind (agent, session, turn, forum, participant,
	// response), of the caller's tenant (own) and the other's.
	own, other map[string][]string
	seen       map[int]int // answers by status
}

const (
	fuzzKeyA     = "key-acme"
	fuzzKeyB     = "key-globex"
	fuzzOperator = "operator-key-0123456789"
)

func newFuzzServer(t *testing.T) *fuzzServer {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/forge.db")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	models := provider.FromEnv(func(string) string { return "" })
	ids := forge.NewULIDGen(nil)
	m := metrics.New(metrics.Options{})
	eng := engine.New(engine.Config{Store: st, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: logger, IDs: ids, ToolCancelWait: 100 * time.Millisecond, TurnTimeout: 2 * time.Second, Observer: m, Kinds: forum.Kinds()})
	forums := forum.New(forum.Config{Store: st, Engine: eng, Models: models, Logger: logger, IDs: ids})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := forums.Open(ctx); err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Config{Store: st, Engine: eng, Forums: forums, Logger: logger, IDs: ids, Models: models,
		Keys:      map[string]string{fuzzKeyA: "acme", fuzzKeyB: "globex"},
		Protocols: []httpapi.Protocol{openairesp.Protocol{}, aisdk.Protocol{}},
		Metrics:   m.Handler(), TenantMetrics: m.TenantHandler, OperatorKey: fuzzOperator, KeepAlive: 50 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 2 * time.Second}
	done := make(chan error, 1)
	go func() { done <- httpapi.Serve(srv, ln) }()
	f := &fuzzServer{addr: ln.Addr().String(), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		own: map[string][]string{}, other: map[string][]string{}, seen: map[int]int{}}
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = forums.Close(cctx)
		_ = eng.Close(cctx)
		_ = st.Close(cctx)
	})
	f.seed(t, fuzzKeyA, f.own)
	f.seed(t, fuzzKeyB, f.other)
	return f
}

// seed makes a tenant's objects: an agent, a session with a turn, a forum
// with a member and a message.
func (f *fuzzServer) seed(t *testing.T, key string, ids map[string][]string) {
	t.Helper()
	call := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+f.addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("seeding %s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return out
	}
	name := "echo-" + strings.TrimPrefix(key, "key-")
	call("POST", "/v1/agents", `{"name":"`+name+`","model":"scripted/echo","tools":["echo"]}`)
	ids["agent"] = append(ids["agent"], name)
	ses := call("POST", "/v1/sessions", `{"agent":"`+name+`"}`)["id"].(string)
	ids["session"] = append(ids["session"], ses)
	turn := call("POST", "/v1/sessions/"+ses+"/turns", `{"input":[{"type":"message","text":"hi"}]}`)["id"].(string)
	ids["turn"] = append(ids["turn"], turn)
	forumID := call("POST", "/v1/forums", `{"title":"room"}`)["id"].(string)
	ids["forum"] = append(ids["forum"], forumID)
	par := call("POST", "/v1/forums/"+forumID+"/members", `{"actor":{"type":"human","id":"alice"}}`)["id"].(string)
	ids["participant"] = append(ids["participant"], par)
	call("POST", "/v1/forums/"+forumID+"/messages", `{"author":"alice","text":"hello"}`)
}

// fuzzRequest is one generated request.
type fuzzRequest struct {
	method, path string
	header       http.Header
	body         []byte
	slow         bool // may wait for a turn
}

func (r *fuzzRequest) String() string {
	b := r.body
	if len(b) > 300 {
		b = append(append([]byte(nil), b[:300]...), "..."...)
	}
	return fmt.Sprintf("%s %s %v body(%d) %q", r.method, r.path, r.header, len(r.body), b)
}

// check sends r and checks the answer.
func (f *fuzzServer) check(t *testing.T, r *fuzzRequest, seed uint64) {
	t.Helper()
	// Generous: the point is an answer, not its speed (the race detector
	// on a loaded machine makes a 4 MiB body take seconds).
	wait := 10 * time.Second
	if r.slow || len(r.body) > 1<<20 {
		wait = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, "http://"+f.addr+"/", body)
	if err != nil {
		t.Fatalf("building %s: %v", r, err)
	}
	req.URL.Opaque = r.path // sent as given: escapes, dots and all
	req.Header = r.header
	resp, err := f.client.Do(req)
	if err != nil {
		if len(r.body) > 1<<20 && !errors.Is(err, context.DeadlineExceeded) {
			// The server answered 413 and hung up while the body was
			// still being sent: the client may see the reset first.
			return
		}
		t.Errorf("seed %d: %s: no answer: %v", seed, r, err)
		return
	}
	defer resp.Body.Close()
	f.seen[resp.StatusCode]++
	if resp.StatusCode < 300 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return // a stream: its frames are others' tests
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil && ctx.Err() == nil {
		t.Errorf("seed %d: %s: reading the answer: %v", seed, r, err)
		return
	}
	if msg := badAnswer(r.method, r.path, resp.StatusCode, resp.Header, b); msg != "" {
		t.Errorf("seed %d: %s\n  -> %d %s %q: %s", seed, r, resp.StatusCode, resp.Header.Get("Content-Type"), truncateBytes(b, 300), msg)
	}
}

// badAnswer says what is wrong with an answer, "" when nothing is.
func badAnswer(method, path string, status int, h http.Header, body []byte) string {
	if status >= 500 && status != http.StatusNotImplemented {
		return "a 5xx"
	}
	if status < 400 {
		return ""
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return "an error answer that is not application/json"
	}
	if method == http.MethodHead {
		return "" // no body
	}
	var e struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Message == nil || *e.Error.Message == "" {
		return "an error answer without {\"error\": {\"message\": ...}}"
	}
	if !strings.HasPrefix(path, "/openai/") && (e.Error.Code == nil || *e.Error.Code == "") {
		return "an error answer without a code"
	}
	return ""
}

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// checkRaw writes a raw request on a new connection and checks the answer.
func (f *fuzzServer) checkRaw(t *testing.T, raw []byte, seed uint64) {
	t.Helper()
	conn, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		// The server may answer before it has read it all. Half-closing
		// ends a body cut short (the server would otherwise wait for it).
		_, _ = conn.Write(raw)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	method, _, _ := bytes.Cut(raw, []byte(" "))
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: string(method)})
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("seed %d: raw %q: no answer", seed, truncateBytes(raw, 300))
		}
		return // the server hung up without an answer: a closed connection is an answer of its own
	}
	defer resp.Body.Close()
	f.seen[resp.StatusCode]++
	if resp.StatusCode < 300 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	path := ""
	if _, rest, ok := bytes.Cut(raw, []byte(" ")); ok {
		p, _, _ := bytes.Cut(rest, []byte(" "))
		path = string(p)
	}
	if msg := badAnswer(string(method), path, resp.StatusCode, resp.Header, b); msg != "" {
		t.Errorf("seed %d: raw %q\n  -> %d %s %q: %s", seed, truncateBytes(raw, 300), resp.StatusCode, resp.Header.Get("Content-Type"), truncateBytes(b, 300), msg)
	}
}

func (f *fuzzServer) statuses() string {
	codes := make([]int, 0, len(f.seen))
	for c := range f.seen {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var b strings.Builder
	for _, c := range codes {
		fmt.Fprintf(&b, "%d×%d ", c, f.seen[c])
	}
	return strings.TrimSpace(b.String())
}

// fuzzGen generates requests.
type fuzzGen struct {
	rng *rand.Rand
	f   *fuzzServer
}

func (g *fuzzGen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }
func (g *fuzzGen) chance(n int) bool        { return g.rng.IntN(n) == 0 }

// fuzzRoute is a path with {params} and the methods it serves.
type fuzzRoute struct {
	path    string
	methods []string
}

// fuzzRoutes are the documented operations (openapi.json) and the
// protocols' and inspector's paths.
var fuzzRoutes = func() []fuzzRoute {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	b, err := os.ReadFile("openapi.json")
	if err != nil || json.Unmarshal(b, &doc) != nil {
		panic("openapi.json: " + fmt.Sprint(err))
	}
	var routes []fuzzRoute
	for p, item := range doc.Paths {
		r := fuzzRoute{path: p}
		for m := range item {
			if m != "parameters" {
				r.methods = append(r.methods, strings.ToUpper(m))
			}
		}
		sort.Strings(r.methods)
		routes = append(routes, r)
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].path < routes[j].path })
	for _, r := range []struct{ path, methods string }{
		{"/openai/v1/responses", "POST"}, {"/openai/v1/responses/{turn}", "GET DELETE"}, {"/openai/v1/responses/{turn}/cancel", "POST"},
		{"/openai/v1/responses/{turn}/input_items", "GET"}, {"/openai/v1/models", "GET"}, {"/openai/v1/{junk}", "GET POST"},
		{"/aisdk/v1/agents/{name}/chat", "POST"}, {"/aisdk/v1/agents/{name}/chat/{junk}/stream", "GET"},
		{"/aisdk/v1/agents/{name}/chat/{junk}/stop", "POST"}, {"/aisdk/v1/{junk}", "GET"},
		{"/ui/", "GET"}, {"/ui/sessions/{sid}", "GET"}, {"/ui/forums/{fid}", "GET"}, {"/ui/assets/{junk}", "GET"}, {"/ui/{junk}", "GET"},
		{"/ui", "GET"}, {"/", "GET"}, {"/{junk}", "GET"}, {"/v1/{junk}", "GET"}, {"/v1/sessions/{sid}/{junk}", "GET POST"},
	} {
		routes = append(routes, fuzzRoute{path: r.path, methods: strings.Fields(r.methods)})
	}
	return routes
}()

var fuzzParam = regexp.MustCompile(`\{[^}]+\}`)

// kinds maps path parameters to the kind of id they take.
var fuzzKinds = map[string]string{"name": "agent", "sid": "session", "tid": "turn", "fid": "forum", "par": "participant", "turn": "turn"}

func (g *fuzzGen) junk() string {
	switch g.rng.IntN(12) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("x", 1+g.rng.IntN(3000))
	case 2:
		return "%ff%fe"
	case 3:
		return "%zz"
	case 4:
		return ".."
	case 5:
		return "%2e%2e"
	case 6:
		return "a%2Fb"
	case 7:
		return "%00"
	case 8:
		return "ses_" + strings.Repeat("Z", 26)
	case 9:
		return url.PathEscape("é\u202e<script>")
	case 10:
		return "turn_01" + strconv.Itoa(g.rng.IntN(1e6))
	}
	return "x_fuzz_" + strconv.Itoa(g.rng.IntN(100))
}

// id is a value for a path parameter: the caller's, the other tenant's,
// another kind's, or junk.
func (g *fuzzGen) id(param string) string {
	kind := fuzzKinds[param]
	switch g.rng.IntN(10) {
	case 0, 1, 2, 3, 4:
		if ids := g.f.own[kind]; len(ids) > 0 {
			return ids[g.rng.IntN(len(ids))]
		}
	case 5, 6:
		if ids := g.f.other[kind]; len(ids) > 0 {
			return ids[g.rng.IntN(len(ids))]
		}
	case 7:
		kinds := []string{"agent", "session", "turn", "forum", "participant"}
		ids := g.f.own[kinds[g.rng.IntN(len(kinds))]]
		return ids[g.rng.IntN(len(ids))]
	}
	return g.junk()
}

func (g *fuzzGen) query() string {
	if g.chance(3) {
		return ""
	}
	keys := []string{"limit", "cursor", "after", "view", "all", "stream", "starting_after", "metadata.x", "order", "kind", "status", "include"}
	vals := []string{"", "0", "-1", "1", "2", "10000", "10001", "99999999999999999999", "abc", "1e3", "true", "full", "model",
		strings.Repeat("9", 500), "%ff", "desc", " 1"}
	var parts []string
	for range 1 + g.rng.IntN(3) {
		parts = append(parts, g.pick(keys...)+"="+g.pick(vals...))
	}
	if g.chance(10) {
		parts = append(parts, "limit=1&limit=2")
	}
	return "?" + strings.Join(parts, "&")
}

func (g *fuzzGen) request() *fuzzRequest {
	rt := fuzzRoutes[g.rng.IntN(len(fuzzRoutes))]
	route := rt.path
	method := g.pick(rt.methods...)
	if g.chance(4) {
		method = g.pick("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "HEAD", "OPTIONS", "PROPFIND", "TRACE")
	}
	path := fuzzParam.ReplaceAllStringFunc(route, func(p string) string {
		name := strings.Trim(p, "{}")
		if name == "junk" {
			return g.junk()
		}
		return g.id(name)
	})
	if g.chance(15) {
		path = strings.Replace(path, "/", "//", 1+g.rng.IntN(2))
	}
	r := &fuzzRequest{method: method, path: path + g.query(), header: http.Header{}}
	switch g.rng.IntN(10) {
	case 0:
	case 1:
		r.header.Set("Authorization", "Bearer "+fuzzKeyB)
	case 2:
		r.header.Set("Authorization", g.pick("Bearer wrong", "Basic eDp5", "Bearer ", "bearer "+fuzzKeyA, "Bearer "+fuzzOperator, "Bearer "+strings.Repeat("k", 5000)))
	default:
		r.header.Set("Authorization", "Bearer "+fuzzKeyA)
	}
	if g.chance(3) {
		r.header.Set("Accept", g.pick("text/event-stream", "application/json", "*/*", "text/event-stream;q=0.1, application/json", "garbage"))
	}
	if g.chance(6) {
		r.header.Set("Idempotency-Key", g.pick("k1", "k2", strings.Repeat("i", 300), "with space", "é"))
	}
	if g.chance(8) {
		r.header.Set("Last-Event-ID", g.pick("0", "1", "-5", "x", "99999999999999999999", "9223372036854775807"))
	}
	if g.chance(12) {
		r.header.Set("Origin", g.pick("http://evil.example", "null"))
	}
	if r.method == "POST" || r.method == "PUT" || r.method == "PATCH" || g.chance(10) {
		r.body = g.body(route)
		r.header.Set("Content-Type", "application/json")
		if g.chance(6) {
			r.header.Set("Content-Type", g.pick("application/json; charset=utf-8", "text/plain", "application/json; charset=latin1",
				"multipart/form-data; boundary=x", ""))
		}
		if r.header.Get("Content-Type") == "" {
			r.header.Del("Content-Type")
		}
	}
	r.slow = strings.HasSuffix(route, "/turns") || strings.HasSuffix(route, "/compact") || strings.HasSuffix(route, "/cancel") ||
		strings.HasPrefix(route, "/openai/v1/responses") || strings.HasPrefix(route, "/aisdk/") || strings.HasSuffix(route, "/members")
	return r
}

// body is a request body for route: a mutated valid one, or malformed.
func (g *fuzzGen) body(route string) []byte {
	switch g.rng.IntN(16) {
	case 0:
		return nil
	case 1:
		return []byte(g.pick(`{`, `{"a":}`, `{"a":1}x`, `[1,2]`, `"str"`, `null`, `42`, `{"a":1,"a":2}`, `{"input":[{"type":"message","text":"hi"}]`, "\x00", `{"a":"\ud800"}`, `{"text":"\u0000"}`))
	case 2:
		depth := g.pick("65", "70", "5000")
		n, _ := strconv.Atoi(depth)
		return []byte(strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n))
	case 3:
		return []byte("{\"name\":\"\xff\xfe\",\"text\":\"bad \xc3\x28\"}")
	case 4:
		size := g.pick("1048576", "4194305")
		n, _ := strconv.Atoi(size)
		return []byte(`{"name":"big","text":"` + strings.Repeat("x", n) + `"}`)
	}
	v := g.template(route)
	if g.chance(2) {
		for range 1 + g.rng.IntN(2) {
			g.mutate(v)
		}
	}
	b, _ := json.Marshal(v)
	return b
}

// template is a valid-looking body for the route.
func (g *fuzzGen) template(route string) map[string]any {
	msg := []any{map[string]any{"type": "message", "text": "hi " + g.junk()}}
	switch {
	case route == "/v1/agents" || route == "/v1/agents/{name}":
		a := map[string]any{"name": "fz" + strconv.Itoa(g.rng.IntN(50)), "model": g.pick("scripted/echo", "scripted/x", "openai/gpt-4.1", "nope", "acme/m")}
		if g.chance(2) {
			delays := []any{0, 1, 1e12, -1, 0.5}
			a["model_params"] = map[string]any{"script": []any{map[string]any{"text": "a", "chunk": g.rng.IntN(5) - 1, "delay_ms": delays[g.rng.IntN(len(delays))]}}}
		}
		if g.chance(3) {
			a["tools"] = []any{g.pick("echo", "bash", "nope"), map[string]any{"name": "ask", "client": true}}
		}
		if g.chance(4) {
			a["iteration_limit"] = g.rng.IntN(2000) - 10
		}
		return a
	case strings.HasSuffix(route, "/turns"):
		t := map[string]any{"input": msg}
		for _, k := range []string{"stream", "background", "supersede", "new_root"} {
			if g.chance(4) {
				t[k] = g.chance(2)
			}
		}
		if g.chance(5) {
			t["previous_turn_id"] = g.id("tid")
		}
		if g.chance(5) {
			t["input"] = []any{map[string]any{"type": "approval", "call_id": "call_x", "approved": true}}
		}
		return t
	case route == "/v1/sessions":
		return map[string]any{"agent": g.id("name"), "title": g.junk(), "metadata": map[string]any{"k": g.junk()}}
	case route == "/v1/forums":
		return map[string]any{"title": g.junk(), "guards": map[string]any{"max_agent_streak": g.rng.IntN(20) - 2}}
	case strings.HasSuffix(route, "/members"):
		if g.chance(2) {
			return map[string]any{"actor": map[string]any{"type": "agent", "agent": g.id("name")}, "trigger": g.pick("auto", "mention", "always", "never")}
		}
		return map[string]any{"actor": map[string]any{"type": "human", "id": g.junk()}}
	case strings.HasSuffix(route, "/messages"):
		return map[string]any{"author": g.pick("alice", "bob", ""), "text": "hello @" + g.id("name")}
	case strings.HasSuffix(route, "/cancel"):
		return map[string]any{"reason": g.junk()}
	case strings.HasSuffix(route, "/compact"):
		return map[string]any{"background": g.chance(2)}
	case route == "/openai/v1/responses":
		r := map[string]any{"model": g.id("name"), "input": g.pick("hi", "")}
		if g.chance(3) {
			r["stream"] = true
		}
		if g.chance(4) {
			r["previous_response_id"] = g.id("turn")
		}
		return r
	case strings.HasPrefix(route, "/aisdk/"):
		return map[string]any{"id": g.junk(), "messages": []any{map[string]any{"id": "m1", "role": "user",
			"parts": []any{map[string]any{"type": "text", "text": "hi"}}}}}
	}
	return map[string]any{"x": g.junk()}
}

// mutate changes one field: drops it, nulls it, gives it another type, or
// adds an unknown field.
func (g *fuzzGen) mutate(v map[string]any) {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 || g.chance(4) {
		v["unknown_"+strconv.Itoa(g.rng.IntN(3))] = 1
		return
	}
	k := keys[g.rng.IntN(len(keys))]
	switch g.rng.IntN(6) {
	case 0:
		delete(v, k)
	case 1:
		v[k] = nil
	case 2:
		v[k] = 0
	case 3:
		v[k] = []any{}
	case 4:
		v[k] = map[string]any{}
	default:
		v[k] = strings.Repeat("é", g.rng.IntN(100))
	}
}

// raw is a request written as bytes: odd request lines, headers and
// framing that net/http itself may refuse.
func (g *fuzzGen) raw() []byte {
	host := "Host: " + g.f.addr + "\r\n"
	auth := "Authorization: Bearer " + fuzzKeyA + "\r\n"
	path := fuzzParam.ReplaceAllStringFunc(fuzzRoutes[g.rng.IntN(len(fuzzRoutes))].path, func(p string) string {
		if strings.Trim(p, "{}") == "junk" {
			return g.junk()
		}
		return g.id(strings.Trim(p, "{}"))
	})
	switch g.rng.IntN(14) {
	case 0:
		return []byte(g.pick("OPTIONS", "GET", "POST", "DELETE") + " * HTTP/1.1\r\n" + host + auth + "\r\n")
	case 1:
		return []byte("GET " + path + "\r\n\r\n")
	case 2:
		return []byte("GET " + path + " HTTP/" + g.pick("2.5", "0.9", "1.2", "x") + "\r\n" + host + "\r\n")
	case 3:
		return []byte("GET " + path + " HTTP/1.1\r\n" + host + "Broken header line\r\n\r\n")
	case 4:
		return []byte("GET " + path + " HTTP/1.1\r\n" + auth + "\r\n") // no Host
	case 5:
		return []byte("POST " + path + " HTTP/1.1\r\n" + host + auth + "Content-Type: application/json\r\nExpect: " +
			g.pick("100-continue", "200-ok") + "\r\nContent-Length: 2\r\n\r\n{}")
	case 6:
		return []byte("POST " + path + " HTTP/1.1\r\n" + host + auth + "Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
	case 7:
		return []byte("POST " + path + " HTTP/1.1\r\n" + host + auth + "Content-Type: application/json\r\nContent-Length: " + g.pick("-1", "abc", "1, 2") + "\r\n\r\n{}")
	case 8:
		return []byte("POST " + path + " HTTP/1.1\r\n" + host + auth + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
	case 9:
		return []byte("CONNECT " + g.f.addr + " HTTP/1.1\r\n" + host + auth + "\r\n")
	case 10:
		return []byte(g.pick("FOO", "get", "G\x01T") + " " + path + " HTTP/1.1\r\n" + host + auth + "\r\n")
	case 11:
		return []byte("GET " + path + " HTTP/1.1\r\n" + host + host + auth + "\r\n")
	case 12:
		return []byte("GET /v1/agents HTTP/1.1\r\n" + host + auth + "X-Big: " + strings.Repeat("b", 70<<10) + "\r\n\r\n")
	}
	// A body cut short of its length, then the connection half-closed.
	return []byte("POST " + path + " HTTP/1.1\r\n" + host + auth + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
}
