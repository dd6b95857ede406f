package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
)

// deepObject is n objects nested in one another: {"a":{"a":...1...}}.
func deepObject(n int) string {
	return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
}

// deepArray is n arrays nested in one another: [[...]].
func deepArray(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestDeepNestingIsRefusedOnEveryBodyRoute: JSON nested deeper than 64
// is invalid_request wherever it hides, typed fields and free-form ones
// (metadata, script, input_schema) alike, and stores nothing.
func TestDeepNestingIsRefusedOnEveryBodyRoute(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	deep, arr := deepObject(100), deepArray(100)
	agent := `{"name":"d","model":"scripted/echo",`
	for _, c := range []struct {
		name, method, path, body string
		msg                      string // in the message, when the value is free-form
	}{
		{"agent script", "POST", "/v1/agents", agent + `"model_params":{"script":` + arr + `}}`, "nest"},
		{"agent script object", "POST", "/v1/agents", agent + `"model_params":{"script":[{"text":` + deep + `}]}}`, "nest"},
		{"agent tool input_schema", "POST", "/v1/agents", agent + `"tools":[{"name":"t","client":true,"input_schema":` + deep + `}]}`, "nest"},
		{"agent tools", "POST", "/v1/agents", agent + `"tools":` + arr + `}`, ""},
		{"agent created_at", "POST", "/v1/agents", agent + `"created_at":` + deep + `}`, "nest"},
		{"agent put script", "PUT", "/v1/agents/a", `{"name":"a","model":"scripted/echo","model_params":{"script":` + deep + `}}`, "nest"},
		{"agent put mcp env", "PUT", "/v1/agents/a", `{"name":"a","model":"scripted/echo","mcp_servers":[{"name":"m","command":["x"],"env":` + deep + `}]}`, ""},
		{"session metadata", "POST", "/v1/sessions", `{"agent":"a","metadata":` + deep + `}`, "nest"},
		{"session metadata array", "POST", "/v1/sessions", `{"agent":"a","metadata":{"k":` + arr + `}}`, "nest"},
		{"session top-level array", "POST", "/v1/sessions", arr, ""},
		{"turn input", "POST", sp + "/turns", `{"input":` + arr + `}`, ""},
		{"turn input item", "POST", sp + "/turns", `{"input":[{"type":"message","text":` + deep + `}]}`, ""},
		{"turn unknown field", "POST", sp + "/turns", `{"input":[{"type":"message","text":"hi"}],"x":` + deep + `}`, ""},
		{"cancel", "POST", sp + "/cancel", `{"reason":` + deep + `}`, ""},
		{"compact", "POST", sp + "/compact", `{"background":` + arr + `}`, ""},
	} {
		before := s.state()
		a := s.do(req{method: c.method, path: c.path, body: c.body})
		if a.status != 400 || a.errCode() != "invalid_request" || !strings.Contains(a.String(), c.msg) {
			t.Errorf("%s: got %.300s, want 400 invalid_request (%q)", c.name, a, c.msg)
		}
		if after := s.state(); after != before {
			t.Errorf("%s: the refused request stored something:\n%s\n%s", c.name, before, after)
		}
	}
}

// TestNestingLimitIs64: a body nested exactly 64 deep (the top-level
// object counts as 1) is accepted; 65 is refused.
func TestNestingLimitIs64(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	var ses forge.Session
	s.call("POST", "/v1/sessions", `{"agent":"a","metadata":`+deepObject(63)+`}`, 201, &ses)
	if !bytes.Equal(ses.Metadata, []byte(deepObject(63))) {
		t.Fatalf("metadata stored as %.100s", ses.Metadata)
	}
	s.call("POST", "/v1/sessions", `{"agent":"a","metadata":{"k":`+deepArray(62)+`}}`, 201, nil)
	for _, body := range []string{
		`{"agent":"a","metadata":` + deepObject(64) + `}`,
		`{"agent":"a","metadata":{"k":` + deepArray(63) + `}}`,
	} {
		if a := s.do(req{method: "POST", path: "/v1/sessions", body: body}); a.status != 400 || !strings.Contains(a.String(), "64") {
			t.Errorf("65 deep: %.300s", a)
		}
	}
}

// TestDeepNestingCostsLittleMemory: a 240 KB body nested 40,000 deep is
// refused having allocated a small multiple of its own size, however deep
// it goes (it used to allocate gigabytes: a field path per level). Not
// parallel, so that no other test allocates while it measures.
func TestDeepNestingCostsLittleMemory(t *testing.T) {
	s := newStack(t)
	s.createAgent("a")
	for _, c := range []struct{ name, path, body string }{
		{"session metadata objects", "/v1/sessions", `{"agent":"a","metadata":` + deepObject(40000) + `}`},
		{"session metadata arrays", "/v1/sessions", `{"agent":"a","metadata":{"k":` + deepArray(40000) + `}}`},
		{"agent script", "/v1/agents", `{"name":"d","model":"scripted/echo","model_params":{"script":` + deepArray(40000) + `}}`},
		{"agent tool schema", "/v1/agents", `{"name":"d","model":"scripted/echo","tools":[{"name":"t","client":true,"input_schema":` + deepObject(40000) + `}]}`},
	} {
		var least uint64
		for range 3 {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
			r.Host = "127.0.0.1"
			r.Header.Set("Content-Type", "application/json")
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			s.handler.ServeHTTP(w, r)
			runtime.ReadMemStats(&m1)
			if w.Code != 400 || !strings.Contains(w.Body.String(), "invalid_request") {
				t.Fatalf("%s: %d %.300s", c.name, w.Code, w.Body)
			}
			if n := m1.TotalAlloc - m0.TotalAlloc; least == 0 || n < least {
				least = n
			}
		}
		t.Logf("%s: %d-byte body, %d bytes allocated", c.name, len(c.body), least)
		if limit := uint64(8 * len(c.body)); least > limit {
			t.Errorf("%s: a %d-byte body allocated %d bytes (limit %d)", c.name, len(c.body), least, limit)
		}
	}
}

// TestInvalidUTF8IsRefused: a string that is not valid UTF-8 (raw bytes,
// or an escaped lone surrogate) is invalid_request, in values and keys,
// in typed fields and free-form ones, and nothing is stored.
func TestInvalidUTF8IsRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	ses := s.createSession("a")
	sp := "/v1/sessions/" + ses.ID
	for _, c := range []struct{ name, method, path, body string }{
		{"title raw byte", "POST", "/v1/sessions", "{\"agent\":\"a\",\"title\":\"bad \xff\"}"},
		{"title truncated sequence", "POST", "/v1/sessions", "{\"agent\":\"a\",\"title\":\"\xc3\"}"},
		{"metadata value", "POST", "/v1/sessions", "{\"agent\":\"a\",\"metadata\":{\"k\":\"\xc3\x28\"}}"},
		{"metadata key", "POST", "/v1/sessions", "{\"agent\":\"a\",\"metadata\":{\"\xff\":1}}"},
		{"metadata deep key", "POST", "/v1/sessions", "{\"agent\":\"a\",\"metadata\":{\"k\":[{\"\xfe\":1}]}}"},
		{"lone high surrogate", "POST", "/v1/sessions", `{"agent":"a","title":"\ud800"}`},
		{"lone low surrogate", "POST", "/v1/sessions", `{"agent":"a","title":"x\udc00"}`},
		{"high surrogate then letter", "POST", "/v1/sessions", `{"agent":"a","title":"\ud800\u0041"}`},
		{"reversed pair", "POST", "/v1/sessions", `{"agent":"a","metadata":{"k":"\udc00\ud800"}}`},
		{"surrogate in metadata key", "POST", "/v1/sessions", `{"agent":"a","metadata":{"\uDBFF":1}}`},
		{"encoded surrogate", "POST", sp + "/turns", "{\"input\":[{\"type\":\"message\",\"text\":\"hi \xed\xa0\x80\"}]}"},
		{"overlong encoding", "POST", "/v1/agents", "{\"name\":\"d\",\"model\":\"scripted/echo\",\"instructions\":\"\xc0\xaf\"}"},
		{"script argument", "POST", "/v1/agents", "{\"name\":\"d\",\"model\":\"scripted/echo\",\"model_params\":{\"script\":[{\"text\":\"\xff\"}]}}"},
		{"cancel reason", "POST", sp + "/cancel", "{\"reason\":\"\xff\"}"},
		{"key of the body", "POST", sp + "/compact", "{\"backgr\xffound\":true}"},
	} {
		before := s.state()
		a := s.do(req{method: c.method, path: c.path, body: c.body})
		if a.status != 400 || a.errCode() != "invalid_request" || !strings.Contains(a.String(), "UTF-8") {
			t.Errorf("%s: got %.300s, want 400 invalid_request naming UTF-8", c.name, a)
		}
		if after := s.state(); after != before {
			t.Errorf("%s: the refused request stored something:\n%s\n%s", c.name, before, after)
		}
	}
	// Valid text, escaped pairs included, round-trips.
	var ok forge.Session
	s.call("POST", "/v1/sessions", `{"agent":"a","title":"\ud83d\ude00 é ✓","metadata":{"ключ":"\uD83D\uDE00"}}`, 201, &ok)
	if ok.Title != "😀 é ✓" || !strings.Contains(string(ok.Metadata), "ключ") {
		t.Fatalf("session %+v %s", ok, ok.Metadata)
	}
}

// TestWritesMustBeJSON: a POST or PUT with a body that is not
// application/json is 415, with keys or without; a body-less POST needs no
// Content-Type.
func TestWritesMustBeJSON(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		var opts []stackOption
		if keyed {
			opts = append(opts, withKeys(map[string]string{"k1": "t1"}))
		}
		s := newStack(t, opts...)
		if keyed {
			s.key = "k1"
		}
		s.createAgent("a")
		agent := `{"name":"b","model":"scripted/echo"}`
		before := s.state()
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
			"application/json; charset=latin1", "application/jsonx", "json", ""} {
			h := map[string]string{"Content-Type": ct}
			for _, r := range []req{
				{method: "POST", path: "/v1/agents", body: agent, header: h},
				{method: "PUT", path: "/v1/agents/a", body: `{"name":"a","model":"scripted/echo"}`, header: h},
				{method: "POST", path: "/v1/sessions", body: `{"agent":"a"}`, header: h},
			} {
				if a := s.do(r); a.status != 415 || a.errCode() != "unsupported_media_type" {
					t.Errorf("keys %v, %s %s with Content-Type %q: %.200s", keyed, r.method, r.path, ct, a)
				}
			}
		}
		if after := s.state(); after != before {
			t.Fatalf("refused writes stored something:\n%s\n%s", before, after)
		}
		s.call("POST", "/v1/agents", agent, 201, nil)
		a := s.do(req{method: "POST", path: "/v1/sessions", body: `{"agent":"a"}`, header: map[string]string{"Content-Type": "Application/JSON; Charset=UTF-8"}})
		if a.status != 201 {
			t.Fatalf("application/json with charset utf-8: %s", a)
		}
		var ses forge.Session
		_ = json.Unmarshal(a.body, &ses)
		// No body, no Content-Type: fine.
		if a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/cancel"}); a.status != 409 {
			t.Fatalf("body-less cancel: %s", a)
		}
	}
}

func withKeys(keys map[string]string) stackOption {
	return func(c *httpapi.Config) { c.Keys = keys }
}

// TestKeylessServerRefusesForeignHosts: without keys, a request whose Host
// is not a loopback name (DNS rebinding) is 403 forbidden on every route;
// loopback names pass. With keys the Host is not checked.
func TestKeylessServerRefusesForeignHosts(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	port := s.srv.URL[strings.LastIndex(s.srv.URL, ":"):] // ":1234"
	before := s.state()
	for _, host := range []string{"evil.example", "evil.example" + port, "localhost.evil.example" + port, "127.0.0.1.nip.io" + port,
		"10.0.0.1" + port, "[::2]" + port, "0.0.0.0" + port, "localhost." + port, "xlocalhost" + port, "2130706433" + port} {
		for _, r := range []req{
			{method: "GET", path: "/healthz"},
			{method: "GET", path: "/v1/agents"},
			{method: "POST", path: "/v1/sessions", body: `{"agent":"a"}`},
			{method: "DELETE", path: "/v1/agents/a"},
			{method: "GET", path: "/nope"},
		} {
			r.header = map[string]string{"Host": host}
			if a := s.do(r); a.status != 403 || a.errCode() != "forbidden" {
				t.Errorf("Host %q, %s %s: %.200s", host, r.method, r.path, a)
			}
		}
	}
	if after := s.state(); after != before {
		t.Fatalf("refused requests stored something:\n%s\n%s", before, after)
	}
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "LOCALHOST" + port, "localhost", "127.0.0.1", "127.1.2.3" + port, "[::1]" + port, "[::1]"} {
		for _, r := range []req{{method: "GET", path: "/healthz"}, {method: "GET", path: "/v1/agents"}} {
			r.header = map[string]string{"Host": host}
			if a := s.do(r); a.status != 200 {
				t.Errorf("Host %q, %s %s: %.200s", host, r.method, r.path, a)
			}
		}
	}
	k := newStack(t, withKeys(map[string]string{"k1": "t1"}))
	k.key = "k1"
	if a := k.do(req{method: "GET", path: "/v1/agents", header: map[string]string{"Host": "forge.example.com"}}); a.status != 200 {
		t.Fatalf("keyed server, public Host: %s", a)
	}
}

// TestKeylessServerRefusesCrossOriginRequests: an Origin other than the
// server's own, or a browser's Sec-Fetch-Site saying another site, is 403;
// a CORS preflight is refused without any Access-Control-Allow-* header.
// The server's own origin (the web inspector) passes.
func TestKeylessServerRefusesCrossOriginRequests(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("a")
	own := s.srv.URL // http://127.0.0.1:port
	port := own[strings.LastIndex(own, ":"):]
	before := s.state()
	for _, h := range []map[string]string{
		{"Origin": "http://evil.example"},
		{"Origin": "null"},
		{"Origin": "http://localhost" + port}, // another origin, though the same machine
		{"Origin": "https://127.0.0.1" + port},
		{"Origin": "http://127.0.0.1"},
		{"Origin": own + "/"},
		{"Origin": "http://127.0.0.1:1" + port[1:]},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
	} {
		for _, r := range []req{
			{method: "POST", path: "/v1/sessions", body: `{"agent":"a"}`},
			{method: "GET", path: "/v1/agents"},
			{method: "DELETE", path: "/v1/agents/a"},
		} {
			r.header = h
			if a := s.do(r); a.status != 403 || a.errCode() != "forbidden" {
				t.Errorf("%v, %s %s: %.200s", h, r.method, r.path, a)
			}
		}
	}
	if after := s.state(); after != before {
		t.Fatalf("refused requests stored something:\n%s\n%s", before, after)
	}
	// Preflights, from anywhere: refused, granting nothing.
	for _, origin := range []string{"http://evil.example", own} {
		a := s.do(req{method: "OPTIONS", path: "/v1/sessions", header: map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}})
		if a.status != 403 || a.errCode() != "forbidden" {
			t.Errorf("preflight from %s: %s", origin, a)
		}
		for name := range a.header {
			if strings.HasPrefix(strings.ToLower(name), "access-control-") {
				t.Errorf("preflight from %s answered %s: %v", origin, name, a.header)
			}
		}
	}
	// The server's own origin, as the web inspector sends it.
	for _, h := range []map[string]string{{"Origin": own}, {"Origin": strings.ToUpper(own[:4]) + own[4:]}, {"Sec-Fetch-Site": "same-origin", "Origin": own}, {"Sec-Fetch-Site": "none"}} {
		if a := s.do(req{method: "POST", path: "/v1/sessions", body: `{"agent":"a"}`, header: h}); a.status != 201 {
			t.Errorf("same origin %v: %s", h, a)
		}
	}
	ln := s.do(req{method: "GET", path: "/v1/agents", header: map[string]string{"Origin": "http://localhost" + port, "Host": "localhost" + port}})
	if ln.status != 200 {
		t.Errorf("own origin under the name localhost: %s", ln)
	}
}

// TestAllowedOriginsPass: an origin listed in AllowedOrigins (a dev
// server's proxy forwarding the page's Origin) is answered, with the
// browser's Sec-Fetch-Site or without, and still granted no CORS access;
// other origins are refused as before.
func TestAllowedOriginsPass(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *httpapi.Config) { c.AllowedOrigins = []string{"http://localhost:5173/"} })
	s.createAgent("a")
	for _, h := range []map[string]string{
		{"Origin": "http://localhost:5173"},
		{"Origin": "HTTP://LOCALHOST:5173", "Sec-Fetch-Site": "cross-site"},
	} {
		if a := s.do(req{method: "POST", path: "/v1/sessions", body: `{"agent":"a"}`, header: h}); a.status != 201 {
			t.Errorf("allowed origin %v: %s", h, a)
		}
	}
	for _, h := range []map[string]string{
		{"Origin": "http://localhost:5174"},
		{"Origin": "http://localhost:5173", "X": "y", "Sec-Fetch-Site": "same-site"}, // allowed: passes
	} {
		a := s.do(req{method: "GET", path: "/v1/agents", header: h})
		if want := map[bool]int{true: 200, false: 403}[h["Origin"] == "http://localhost:5173"]; a.status != want {
			t.Errorf("%v: %s, want %d", h, a, want)
		}
		if a.status == 403 && !strings.Contains(string(a.body), "--allowed-origins") {
			t.Errorf("the refusal does not say how to allow an origin: %s", a.body)
		}
	}
	a := s.do(req{method: "OPTIONS", path: "/v1/sessions", header: map[string]string{
		"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST"}})
	if a.status != 403 || a.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a preflight from an allowed origin: %s", a)
	}
	for _, bad := range []string{"localhost:5173", "http://x/path", "ftp://x", "http://", "http://u@x"} {
		if err := httpapi.CheckOrigin(bad); err == nil {
			t.Errorf("CheckOrigin(%q) accepted it", bad)
		}
	}
	if err := httpapi.CheckOrigin("https://app.example:8443"); err != nil {
		t.Error(err)
	}
}

// TestHugeHeaderIsJSON: a header section above the documented limit is a
// JSON 431 like every other error.
func TestHugeHeaderIsJSON(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	a := s.do(req{method: "GET", path: "/v1/agents", header: map[string]string{"X-Big": strings.Repeat("b", 100<<10)}})
	if a.status != http.StatusRequestHeaderFieldsTooLarge || a.errCode() != "header_too_large" || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("100 KiB header: %d %q %.200s", a.status, a.header.Get("Content-Type"), a.body)
	}
	if a := s.do(req{method: "GET", path: "/v1/agents", header: map[string]string{"X-Big": strings.Repeat("b", 60<<10)}}); a.status != 200 {
		t.Fatalf("60 KiB header: %.200s", a)
	}
}
