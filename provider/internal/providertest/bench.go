package providertest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// benchChunks is the number of text deltas of a benchmarked reply.
const benchChunks = 256

// BenchmarkStream measures one streamed text delta through p's model:
// "loopback" against its fake over TCP (the fake's own work is included
// in the figures), "inmemory" from a body the fake streamed once,
// replayed (the provider alone: request, SSE framing, decoding and
// normalization, with the per-request costs, such as a Responses
// stream's fixed events, spread over benchChunks deltas).
func BenchmarkStream(b *testing.B, p Provider) {
	pieces := make([]string, benchChunks)
	for i := range pieces {
		pieces[i] = " token"
	}
	reply := fakeapi.Text(pieces...).Usage(usage(10, benchChunks))
	b.Run("loopback", func(b *testing.B) {
		fake := p.Start(b)
		fake.RecordRequests(false)
		fake.SetDefaultReply(reply)
		benchStream(b, p.Model(Config{BaseURL: fake.URL(), Model: p.ModelID, Fake: fake}))
	})
	b.Run("inmemory", func(b *testing.B) {
		fake := p.Start(b)
		fake.Respond(reply)
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
		c := Config{BaseURL: fake.URL(), Model: p.ModelID, Fake: fake, HTTPClient: rec}
		for _, err := range p.Model(c).Stream(context.Background(), hello()) {
			if err != nil {
				b.Fatal(err)
			}
		}
		// benchStream checks the replayed body gives benchChunks deltas.
		if len(body) == 0 {
			b.Fatal("no body recorded")
		}
		c.HTTPClient = &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Body != nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			return &http.Response{StatusCode: 200, Request: r,
				Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
				Body:   io.NopCloser(bytes.NewReader(body))}, nil
		})}
		benchStream(b, p.Model(c))
	})
}

// benchStream streams replies of benchChunks deltas until b.N are done
// and reports the cost per delta.
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
