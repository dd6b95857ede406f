package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// BenchmarkConcurrentUploads measures what issue 20 asks of uploads: a real
// `forge serve` (SQLite) over loopback HTTP, 10 clients each uploading a
// 20 MiB file of new bytes (a PDF: a header and random bytes) as a raw
// body at once; one b.N round is the 10 uploads. It reports the aggregate
// MiB/s and the server's resident memory: its peak (VmHWM) over the run
// and its RSS before the first round. The floor is the same bytes sent to
// a loopback server that only reads them (floor-MiB/s).
//
//	go test -run '^$' -bench ConcurrentUploads -benchtime 3x ./cmd/forge-load/
func BenchmarkConcurrentUploads(b *testing.B) {
	const clients, size = 10, 20 << 20
	sp := spawnForTest(b)
	before, err := readMemStatus(sp.pid)
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: clients}}
	defer hc.CloseIdleConnections()
	bodies := make([][]byte, clients)
	round := func(url string) (time.Duration, error) {
		for i := range bodies {
			bodies[i] = pdfOf(size)
		}
		var wg sync.WaitGroup
		errs := make([]error, clients)
		start := time.Now()
		for i := range clients {
			wg.Go(func() { errs[i] = upload(hc, url, bodies[i]) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	var total time.Duration
	b.ResetTimer()
	for b.Loop() {
		d, err := round(sp.url + "/v1/files")
		if err != nil {
			b.Fatal(err)
		}
		total += d
	}
	b.StopTimer()
	after, err := readMemStatus(sp.pid)
	if err != nil {
		b.Fatal(err)
	}
	floor := discardServer(b)
	var floorTotal time.Duration
	for range b.N {
		d, err := round(floor)
		if err != nil {
			b.Fatal(err)
		}
		floorTotal += d
	}
	mib := float64(b.N*clients*size) / (1 << 20)
	b.ReportMetric(mib/total.Seconds(), "MiB/s")
	b.ReportMetric(mib/floorTotal.Seconds(), "floor-MiB/s")
	b.ReportMetric(float64(after.hwm)/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(before.rss)/1024, "start-RSS-MiB")
}

// BenchmarkImageTurn measures what one attached 1 MiB image adds to a
// turn: a real `forge serve` over loopback HTTP, the agent on openai/<model>
// behind the instant fake (which receives the image base64-encoded, as a
// provider would), wait-mode turns one after the other, with the image
// uploaded once and attached by file_id to every turn (image) or none
// (text). It reports each one's p50 and the server's CPU per turn; their
// difference is the image's cost.
//
//	go test -run '^$' -bench ImageTurn -benchtime 100x ./cmd/forge-load/
func BenchmarkImageTurn(b *testing.B) {
	sp := spawnForTest(b)
	ctx := context.Background()
	t, err := (&common{server: sp.url}).connect(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer t.close()
	agent, err := t.createAgentOn(ctx, trivialAgent("openai", "gpt-4.1-mini"))
	if err != nil {
		b.Fatal(err)
	}
	img := noisePNG(b, 1<<20)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sp.url+"/v1/files", bytes.NewReader(img))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "image/png")
	resp, err := t.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var file struct {
		ID string `json:"id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&file)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		b.Fatalf("upload: %d %v", resp.StatusCode, err)
	}
	bodies := map[string][]byte{
		"text":  turnBody("what is in this picture?", false),
		"image": fmt.Appendf(nil, `{"input":[{"type":"message","text":"what is in this picture?","files":[{"file_id":%q}]}]}`, file.ID),
	}
	for _, kind := range []string{"text", "image"} {
		b.Run("input="+kind, func(b *testing.B) {
			ids, err := t.createSessions(ctx, agent, 1)
			if err != nil {
				b.Fatal(err)
			}
			for range 3 {
				if _, err := t.waitTurn(ctx, ids[0], bodies[kind]); err != nil {
					b.Fatal(err)
				}
			}
			cpu0, err := cpuTime(sp.pid)
			if err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			b.ResetTimer()
			for b.Loop() {
				// A new session each time: the history (and the images it
				// would resend) stays one message long.
				b.StopTimer()
				ids, err := t.createSessions(ctx, agent, 1)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				d, err := t.waitTurn(ctx, ids[0], bodies[kind])
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			cpu1, err := cpuTime(sp.pid)
			if err != nil {
				b.Fatal(err)
			}
			reportQuantiles(b, "", lat, 0.50, 0.99)
			b.ReportMetric(float64(cpu1-cpu0)/float64(len(lat))/float64(time.Microsecond), "server-cpu-µs/turn")
		})
	}
}

// pdfOf returns size bytes of a PDF header followed by random bytes (new
// content each call: nothing is deduplicated).
func pdfOf(size int) []byte {
	b := make([]byte, size)
	_, _ = rand.Read(b)
	copy(b, "%PDF-1.7\n")
	return b
}

func upload(hc *http.Client, url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/pdf")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upload: %s", resp.Status)
	}
	return nil
}

// discardServer is a loopback server that reads every body and answers
// 201: the floor of an upload.
func discardServer(tb testing.TB) string {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := r.Body.Read(buf); err != nil {
				break
			}
		}
		w.WriteHeader(http.StatusCreated)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// noisePNG is a PNG of random pixels (which do not compress) of about
// size bytes.
func noisePNG(tb testing.TB, size int) []byte {
	side := 1
	for side*side*4 < size {
		side++
	}
	img := image.NewNRGBA(image.Rect(0, 0, side, side))
	_, _ = rand.Read(img.Pix)
	for i := 3; i < len(img.Pix); i += 4 {
		img.Pix[i] = 0xff // opaque
	}
	img.Set(0, 0, color.NRGBA{A: 0xff})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
