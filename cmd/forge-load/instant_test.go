package main

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestInstantModelBytes: the instant model server writes, for the requests
// forge sends, the same stream as openaitest's default reply (but for the
// completion id and creation time).
func TestInstantModelBytes(t *testing.T) {
	t.Parallel()
	ref := openaitest.New(t)
	inst := startInstantModel()
	t.Cleanup(inst.Close)
	var history strings.Builder
	for i := range 60 {
		if i > 0 {
			history.WriteByte(',')
		}
		history.WriteString(`{"content":"hi","role":"user"},{"content":"ok","role":"assistant"}`)
	}
	bodies := []string{
		string(floorBody("gpt-4.1-mini")),
		`{"messages":[{"content":"hi","role":"user"}],"model":"m-<1>&\"q\"","stream":true}`,
		`{"messages":[{"content":"be brief","role":"system"},` + history.String() + `,{"content":"hi","role":"user"}],"model":"gpt-x","stream_options":{"include_usage":true},"stream":true}`,
	}
	normal := regexp.MustCompile(`"id":"chatcmpl-OTEST\d+","object":"chat.completion.chunk","created":\d+`)
	post := func(url, body string) (http.Header, string) {
		t.Helper()
		res, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", url, res.StatusCode, b)
		}
		return res.Header, string(normal.ReplaceAll(b, []byte(`"id":"X","object":"chat.completion.chunk","created":0`)))
	}
	for _, body := range bodies {
		wantH, want := post(ref.URL(), body)
		gotH, got := post(inst.URL(), body)
		if got != want {
			t.Errorf("request %.60s...:\ninstant:\n%s\nopenaitest:\n%s", body, got, want)
		}
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if gotH.Get(h) != wantH.Get(h) {
				t.Errorf("%s: %q, openaitest %q", h, gotH.Get(h), wantH.Get(h))
			}
		}
		if !strings.HasPrefix(gotH.Get("X-Request-Id"), "req_") {
			t.Errorf("X-Request-Id %q", gotH.Get("X-Request-Id"))
		}
	}
	recorded := inst.takeBodies()
	if len(recorded) != len(bodies) || !bytes.Equal(recorded[2], []byte(bodies[2])) {
		t.Errorf("recorded %d bodies", len(recorded))
	}
	// A request that is not a streamed chat completion is refused.
	res, err := http.Post(inst.URL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Errorf("a request without stream: %d, want 400", res.StatusCode)
	}
}
