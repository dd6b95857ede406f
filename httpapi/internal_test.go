package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

func TestOpenAPICoversEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	s := &Server{}
	for _, r := range s.routeTable() {
		ops, ok := doc.Paths[r.path]
		if !ok {
			t.Errorf("openapi.json lacks path %s", r.path)
			continue
		}
		if _, ok := ops[strings.ToLower(r.method)]; !ok {
			t.Errorf("openapi.json lacks %s %s", r.method, r.path)
		}
	}
	// Every $ref resolves.
	var raw map[string]any
	_ = json.Unmarshal(openAPIDoc, &raw)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				var cur any = raw
				for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, _ := cur.(map[string]any)
					cur = m[p]
				}
				if cur == nil {
					t.Errorf("unresolved $ref %s", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(raw)
}

func TestCheckJSON(t *testing.T) {
	type inner struct {
		N *int `json:"n"`
		F *float64
	}
	type body struct {
		S     *string           `json:"s"`
		B     *bool             `json:"b"`
		L     []inner           `json:"l"`
		M     map[string]string `json:"m"`
		Raw   json.RawMessage   `json:"raw"`
		Tools []forge.ToolSpec  `json:"tools"`
		Skip  string            `json:"-"`
	}
	typ := reflect.TypeFor[body]()
	for _, c := range []struct {
		in, err string
	}{
		{`{}`, ""},
		{`{"s":"x","b":true,"l":[{"n":1,"F":1.5}],"m":{"a":"b"},"raw":{"x":[1,{"y":null}]},"tools":["echo",{"name":"x","client":true}]}`, ""},
		{`{"s":null,"l":null}`, ""},
		{`{"s":1}`, `"s" must be a string`},
		{`{"b":"true"}`, `"b" must be a boolean`},
		{`{"l":{}}`, `"l" must be an array`},
		{`{"l":[{"n":"1"}]}`, `"l[0].n" must be an integer`},
		{`{"l":[{},{"n":1.5}]}`, `"l[1].n" must be an integer`},
		{`{"l":[{"n":99999999999999999999}]}`, `"l[0].n"`},
		{`{"m":{"a":1}}`, `"m.a" must be a string`},
		{`{"tools":[{"nam":"x"}]}`, `unknown field "tools[0].nam"`},
		{`{"tools":[true]}`, `"tools[0]" must be a string or an object`},
		{`{"Skip":"x"}`, `unknown field "Skip"`},
		{`{"-":"x"}`, `unknown field "-"`},
		{`{"S":"x"}`, `did you mean "s"`},
		{`{"s":"a","s":"b"}`, `"s" appears more than once`},
		{`{"raw":{"a":1,"a":2}}`, `"raw.a" appears more than once`},
		{`{"s":"x"`, "malformed JSON"},
		{`{"s":"x",}`, "malformed JSON"},
		{`{"s":"x"}]`, "single JSON value"},
		{`{} {}`, "single JSON value"},
		{`[]`, "JSON object"},
		{`"x"`, "JSON object"},
		{`{"l":[` + strings.Repeat("[", 10100) + `]}`, `"l[0]" must be an object`},
		{`{"raw":` + strings.Repeat("[", 10100) + `}`, `"raw[0][0]`},
		{`{"raw":` + strings.Repeat("[", 10100) + `}`, "deeper than 64"},
		{`{"raw":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`, ""},
		{`{"raw":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, "deeper than 64"},
		{`{"raw":{"a":[{"b":` + strings.Repeat(`{"c":`, 70) + `}`, `field "raw.a[0].b.c.c.c`},
		{`{"l":[{},{"n":1}],"raw":[[],[{"k":` + strings.Repeat("[", 70) + `}]]}`, `field "raw[1][0].k[0][0]`},
	} {
		err := checkJSON([]byte(c.in), typ)
		in := c.in
		if len(in) > 80 {
			in = in[:80] + "..."
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: got %v, want %q", in, err, c.err)
		}
	}
}

// fakeRuntime serves Events from a function; the other methods are unused.
type fakeRuntime struct {
	Runtime
	events func(ctx context.Context, yield func(forge.Event, error) bool)
}

func (f fakeRuntime) Events(ctx context.Context, _, _ string, _ engine.EventsQuery) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) { f.events(ctx, yield) }
}

func (f fakeRuntime) OpenEvents(ctx context.Context, tenant, sid string, q engine.EventsQuery) (iter.Seq2[forge.Event, error], error) {
	return f.Events(ctx, tenant, sid, q), nil
}

func streamServer(t *testing.T, rt Runtime) *httptest.Server {
	s := New(Config{Engine: rt, KeepAlive: time.Hour})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = s.stream(w, r, "t", "ses_1", engine.EventsQuery{TurnID: "turn_1"})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func delta(seq int64, text string) forge.Event {
	tid := "turn_1"
	return forge.Event{Seq: seq, ID: "prt_1", Type: forge.EventModelDelta, SessionID: "ses_1", TurnID: &tid,
		Data: json.RawMessage(`{"delta":"` + text + `"}`)}
}

// TestSSEFlushesWhenIdle: an event followed by a pause reaches the client
// without waiting for more.
func TestSSEFlushesWhenIdle(t *testing.T) {
	release := make(chan struct{})
	srv := streamServer(t, fakeRuntime{events: func(ctx context.Context, yield func(forge.Event, error) bool) {
		if !yield(delta(1, "a"), nil) {
			return
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}})
	defer close(release)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				got <- sc.Text()
				return
			}
		}
	}()
	select {
	case d := <-got:
		if !strings.Contains(d, `"delta":"a"`) {
			t.Fatalf("data %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event was not flushed")
	}
}

// TestSSEThroughput streams 100k deltas and a turn.done to one client.
func TestSSEThroughput(t *testing.T) {
	const n = 100_000
	tid := "turn_1"
	srv := streamServer(t, fakeRuntime{events: func(ctx context.Context, yield func(forge.Event, error) bool) {
		for i := int64(1); i <= n; i++ {
			if !yield(delta(i, "x"), nil) {
				return
			}
		}
		yield(forge.Event{Seq: n + 1, ID: tid, Type: forge.EventTurnDone, SessionID: "ses_1", TurnID: &tid, Data: json.RawMessage(`{}`)}, nil)
		// A turn stream ends after turn.done even if the iterator goes on.
		<-ctx.Done()
	}})
	start := time.Now()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	frames, last := 0, ""
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "event: ") {
			frames++
			last = line
		}
	}
	el := time.Since(start)
	if frames != n+1 || last != "event: turn.done" {
		t.Fatalf("%d frames, last %q", frames, last)
	}
	t.Logf("%d events in %v: %.0f events/s", frames, el, float64(frames)/el.Seconds())
}

func TestErrorFrameEndsStream(t *testing.T) {
	srv := streamServer(t, fakeRuntime{events: func(ctx context.Context, yield func(forge.Event, error) bool) {
		if yield(delta(1, "a"), nil) {
			yield(forge.Event{}, forge.Errorf(forge.ErrNotFound, "session gone"))
		}
	}})
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	want := "event: error\ndata: {\"error\":{\"code\":\"not_found\",\"message\":\"session gone\"}}\n"
	if !strings.HasPrefix(b.String(), "id: 1\nevent: model.message.delta\n") || !strings.Contains(b.String(), want) {
		t.Fatalf("stream:\n%s", b.String())
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{forge.ErrNotFound, 404, "not_found", "not found"},
		{forge.Errorf(forge.ErrPendingActions, "resolve call_1 first"), 409, "pending_actions", "resolve call_1 first"},
		{forge.ErrIncompleteResolution, 400, "incomplete_resolution", "every open call"},
		{forge.ErrTooLarge, 413, "payload_too_large", "4 MiB"},
		{&http.MaxBytesError{Limit: 10}, 413, "payload_too_large", "10 bytes"},
		{context.DeadlineExceeded, 500, "internal", "internal error"},
		{forge.ErrLocked, 503, "store_error", "the store failed; retry later"},
		{fmt.Errorf("insert: %w", forge.Errorf(forge.ErrStore, "disk I/O error at /var/lib/forge.db")), 503, "store_error", "the store failed; retry later"},
		{forge.Errorf(forge.ErrForbidden, "Host %q is not a loopback name", "x"), 403, "forbidden", "loopback"},
		{forge.ErrUnsupportedMediaType, 415, "unsupported_media_type", "application/json"},
		{forge.ErrIdempotencyMismatch, 422, "idempotency_mismatch", "another request"},
		{fmt.Errorf("write: %w", forge.ErrTurnEnded), 409, "conflict", "conflicts"},
		{errHeaderTooLarge, 431, "header_too_large", "64 KiB"},
		{fmt.Errorf("x: %w", errMethodNotAllowed), 405, "method_not_allowed", "not allowed"},
	} {
		status, code, msg := classify(c.err)
		if status != c.status || code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%v: %d %s %q", c.err, status, code, msg)
		}
	}
}

// TestStreamLeavesNoWriteDeadline: after a stream ends, the next request
// on the same keep-alive connection is not cut by the stream's deadline.
func TestStreamLeavesNoWriteDeadline(t *testing.T) {
	s := New(Config{Engine: fakeRuntime{events: func(ctx context.Context, yield func(forge.Event, error) bool) {
		tid := "turn_1"
		yield(forge.Event{Seq: 1, ID: tid, Type: forge.EventTurnDone, SessionID: "ses_1", TurnID: &tid, Data: json.RawMessage(`{}`)}, nil)
	}}})
	s.writeWait = 50 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			_ = s.stream(w, r, "t", "ses_1", engine.EventsQuery{TurnID: "turn_1"})
			return
		}
		time.Sleep(150 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	client := srv.Client()
	for _, path := range []string{"/stream", "/slow"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %q %v", path, b, err)
		}
	}
}
