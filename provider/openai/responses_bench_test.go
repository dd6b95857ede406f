package openai_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// BenchmarkResponsesStreamChunk measures one streamed output_text delta
// through the Responses provider: "loopback" against openaitest over TCP
// (the server's own work is included), "inmemory" from a prerecorded body
// (the provider alone: SSE framing, event parsing, normalization). The
// per-chunk figures include the request's fixed events (created,
// in_progress, item and part events, completed) spread over benchChunks
// deltas.
func BenchmarkResponsesStreamChunk(b *testing.B) {
	b.Run("loopback", func(b *testing.B) {
		srv := openaitest.New(b)
		srv.RecordRequests(false)
		srv.SetDefault(openaitest.Text(benchPieces()...).Usage(10, benchChunks))
		benchStream(b, openai.NewResponses(openai.Config{BaseURL: srv.URL()}).Model("gpt-4.1-mini"))
	})
	b.Run("inmemory", func(b *testing.B) {
		srv := openaitest.New(b)
		srv.Enqueue(openaitest.Text(benchPieces()...).Usage(10, benchChunks))
		var body []byte
		rec := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			res, err := http.DefaultTransport.RoundTrip(r)
			if err != nil {
				return nil, err
			}
			body, err = io.ReadAll(res.Body)
			res.Body.Close()
			res.Body = io.NopCloser(bytes.NewReader(body))
			return res, err
		})}
		m := openai.NewResponses(openai.Config{BaseURL: srv.URL(), HTTPClient: rec}).Model("gpt-4.1-mini")
		for _, err := range m.Stream(context.Background(), hello()) {
			if err != nil {
				b.Fatal(err)
			}
		}
		if !strings.Contains(string(body), "response.completed") {
			b.Fatalf("recorded body: %q", body)
		}
		replay := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Body != nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			return &http.Response{StatusCode: 200, Request: r,
				Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
				Body:   io.NopCloser(bytes.NewReader(body))}, nil
		})}
		benchStream(b, openai.NewResponses(openai.Config{BaseURL: "http://replay.invalid/v1", HTTPClient: replay}).Model("gpt-4.1-mini"))
	})
}
