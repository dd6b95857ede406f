package anthropic_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
)

const benchChunks = 256

// benchStream streams requests of benchChunks text deltas until b.N
// requests are done, and reports the cost per streamed chunk.
func benchStream(b *testing.B, m forge.Model) {
	ctx := context.Background()
	req := hello()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	chunks := 0
	for range b.N {
		for ev, err := range m.Stream(ctx, req) {
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == forge.TextDelta {
				chunks++
			}
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if chunks != b.N*benchChunks {
		b.Fatalf("%d chunks, want %d", chunks, b.N*benchChunks)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(chunks), "ns/chunk")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(chunks), "allocs/chunk")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(chunks), "B/chunk")
}

func benchPieces() []string {
	pieces := make([]string, benchChunks)
	for i := range pieces {
		pieces[i] = " token"
	}
	return pieces
}

// BenchmarkAnthropicStreamChunk measures one streamed text delta through
// the provider: "loopback" against anthropictest over TCP (the server's own
// work is included in the figures), "inmemory" from a prerecorded body (the
// provider alone: request, SSE framing, decoding, normalization, with the
// per-request costs spread over the chunks).
func BenchmarkAnthropicStreamChunk(b *testing.B) {
	b.Run("loopback", func(b *testing.B) {
		srv := anthropictest.New(b)
		srv.RecordRequests(false)
		srv.SetDefault(anthropictest.Text(benchPieces()...).Usage(10, benchChunks))
		benchStream(b, anthropic.New(anthropic.Config{APIKey: "k", BaseURL: srv.URL()}).Model("claude-sonnet-4-5"))
	})
	b.Run("inmemory", func(b *testing.B) {
		// Record one real stream from the fake, then replay it.
		srv := anthropictest.New(b)
		srv.Enqueue(anthropictest.Text(benchPieces()...).Usage(10, benchChunks))
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
		m := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: srv.URL(), HTTPClient: rec}).Model("claude-sonnet-4-5")
		for _, err := range m.Stream(context.Background(), hello()) {
			if err != nil {
				b.Fatal(err)
			}
		}
		if !strings.Contains(string(body), "message_stop") {
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
		benchStream(b, anthropic.New(anthropic.Config{APIKey: "k", BaseURL: "http://replay.invalid", HTTPClient: replay}).Model("claude-sonnet-4-5"))
	})
}
