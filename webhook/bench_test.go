package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge/webhook"
)

// BenchmarkDeliveries: b.N turn.done events wait in the outbox of a SQLite
// store (written before the timer starts); the timer runs while one
// dispatcher sends them all to a loopback endpoint answering 204, and the
// figure is deliveries a second, claims and records included. Run it with
// -benchtime=2000x: the setup writes a turn per delivery.
func BenchmarkDeliveries(b *testing.B) {
	s := openStore(b)
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	newWebhook(b, s, "acme", rcv.URL)
	for range b.N {
		endTurn(b, s, "acme")
	}
	b.ResetTimer()
	start := time.Now()
	d := webhook.New(s, webhook.Config{Owner: "bench", AllowPrivate: true, Poll: 10 * time.Millisecond})
	d.Start()
	for got.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	_ = d.Close(context.Background())
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}
