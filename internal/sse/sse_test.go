package sse_test

import (
	"context"
	"errors"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forge-runtime/forge/internal/sse"
)

// recorder is a ResponseWriter (with Flush) safe to read while a pump
// writes to it.
type recorder struct {
	mu      sync.Mutex
	header  http.Header
	status  int
	body    strings.Builder
	flushes int
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = status
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.Write(p)
}

func (r *recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.String()
}

func TestFrames(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	rec.Header().Set("Forge-Turn-Id", "turn_1")
	rec.Header().Set("Content-Length", "9")
	w := sse.NewWriter(rec, time.Second)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	w.Event(7, "turn.done", []byte(`{"seq":7}`))
	w.Event(0, "forum.typing", []byte(`{}`))
	w.Event(0, "", []byte("[DONE]"))
	w.Event(0, "bad\r\ntype", []byte("x"))
	w.Comment("ping\nnow")
	if w.Buffered() == 0 {
		t.Fatal("nothing buffered before Flush")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "id: 7\nevent: turn.done\ndata: {\"seq\":7}\n\n" +
		"event: forum.typing\ndata: {}\n\n" +
		"data: [DONE]\n\n" +
		"event: bad  type\ndata: x\n\n" +
		": ping now\n\n"
	if got := rec.String(); got != want {
		t.Fatalf("stream:\n%q\nwant\n%q", got, want)
	}
	h := rec.Header()
	if rec.status != http.StatusOK || h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" ||
		h.Get("Forge-Turn-Id") != "turn_1" || h.Get("Content-Length") != "" {
		t.Fatalf("status %d, headers %v", rec.status, h)
	}
}

// blocking yields vals, then waits for ctx like a live tail with nothing
// more to say.
func blocking(ctx context.Context, vals ...string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, v := range vals {
			if !yield(v, nil) {
				return
			}
		}
		<-ctx.Done()
	}
}

// TestPumpEndsWhenHandleDoes: once handle ends the stream, Pump cancels the
// items' context, so a live tail waiting for more does not keep it (in a
// bubble, a Pump that waited would be a deadlock).
func TestPumpEndsWhenHandleDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec := newRecorder()
		var got []string
		sse.Pump(ctx, cancel, sse.NewWriter(rec, time.Second), time.Hour, blocking(ctx, "a", "b", "c"), func(v string, err error) bool {
			got = append(got, v)
			return v == "b"
		}, nil)
		if strings.Join(got, ",") != "a,b" || ctx.Err() == nil {
			t.Fatalf("handled %v; ctx %v", got, ctx.Err())
		}
	})
}

// TestPumpPingsAnIdleClient: every keepAlive without an item, a comment.
func TestPumpPingsAnIdleClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		rec := newRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			sse.Pump(ctx, cancel, sse.NewWriter(rec, time.Second), 10*time.Second, blocking(ctx), func(string, error) bool { return false }, nil)
		}()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if got := rec.String(); got != ": ping\n\n: ping\n\n" {
			t.Fatalf("after 25 s idle: %q", got)
		}
		cancel()
		<-done
	})
}

// TestPumpIdleEndsTheStream: idle runs at each keep-alive tick before the
// ping; when it reports the end, the frame it wrote is sent and Pump
// returns (the items' context cancelled).
func TestPumpIdleEndsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		rec := newRecorder()
		w := sse.NewWriter(rec, time.Second)
		ticks := 0
		sse.Pump(ctx, cancel, w, 10*time.Second, blocking(ctx), func(string, error) bool { return false }, func() bool {
			if ticks++; ticks < 2 {
				return false
			}
			w.Event(0, "error", []byte(`{"gone":true}`))
			return true
		})
		if got := rec.String(); got != ": ping\n\nevent: error\ndata: {\"gone\":true}\n\n" {
			t.Fatalf("stream: %q", got)
		}
		if ctx.Err() == nil {
			t.Fatal("the items' context is still live")
		}
	})
}

// TestPumpErrors: an error is handed to handle and ends the stream; a
// cancellation ends it without a word.
func TestPumpErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, c := range []struct {
		err    error
		handed bool
	}{{boom, true}, {context.Canceled, false}, {errors.Join(context.Canceled, boom), false}} {
		ctx, cancel := context.WithCancel(t.Context())
		items := func(yield func(string, error) bool) {
			if yield("a", nil) {
				yield("", c.err)
			}
		}
		var got []error
		sse.Pump(ctx, cancel, sse.NewWriter(newRecorder(), time.Second), time.Hour, items, func(v string, err error) bool {
			got = append(got, err)
			return false
		}, nil)
		if len(got) < 1 || got[0] != nil || (len(got) == 2) != c.handed || (c.handed && got[1] != c.err) {
			t.Errorf("%v: handed %v", c.err, got)
		}
	}
}

// TestPumpWritesEveryItem: items that end by themselves all reach the
// client, in order, and Pump returns.
func TestPumpWritesEveryItem(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	rec := newRecorder()
	w := sse.NewWriter(rec, time.Second)
	var want strings.Builder
	items := func(yield func(int64, error) bool) {
		for i := int64(1); i <= 2000; i++ {
			if !yield(i, nil) {
				return
			}
		}
	}
	big := []byte(strings.Repeat("x", 100))
	sse.Pump(ctx, cancel, w, time.Hour, items, func(i int64, err error) bool {
		w.Event(i, "e", big)
		return false
	}, nil)
	for i := 1; i <= 2000; i++ {
		want.WriteString("id: " + strconv.Itoa(i) + "\nevent: e\ndata: " + string(big) + "\n\n")
	}
	if got := rec.String(); got != want.String() {
		t.Fatalf("the stream lost or reordered frames (%d bytes, want %d)", len(got), want.Len())
	}
}

// TestPumpCoalescesAPacedStream: items arriving faster than Coalesce share
// a flush, the first after a quiet spell is flushed at once, and a held
// item is flushed Coalesce after the last flush, not when the next comes.
func TestPumpCoalescesAPacedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		rec := newRecorder()
		w := sse.NewWriter(rec, time.Second)
		w.Coalesce = 10 * time.Millisecond
		type seen struct {
			at      time.Duration
			flushes int
		}
		start := time.Now()
		var log []seen
		items := func(yield func(int64, error) bool) {
			// 1 at 0, 2 at 1 ms (held until 10 ms), 3 at 50 ms (at once),
			// 4..8 every 2 ms (two flushes), then the end at 200 ms.
			at := []time.Duration{0, time.Millisecond, 50 * time.Millisecond, 52 * time.Millisecond, 54 * time.Millisecond,
				56 * time.Millisecond, 58 * time.Millisecond, 60 * time.Millisecond}
			for i, d := range at {
				time.Sleep(d - time.Since(start))
				if !yield(int64(i+1), nil) {
					return
				}
			}
			time.Sleep(200*time.Millisecond - time.Since(start))
		}
		go func() {
			for {
				synctest.Wait()
				rec.mu.Lock()
				n := rec.flushes
				rec.mu.Unlock()
				if len(log) == 0 || log[len(log)-1].flushes != n {
					log = append(log, seen{time.Since(start), n})
				}
				if time.Since(start) > 150*time.Millisecond {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		sse.Pump(ctx, cancel, w, time.Hour, items, func(i int64, err error) bool {
			w.Event(i, "e", []byte("x"))
			return false
		}, nil)
		synctest.Wait()
		// Flush 1 is the headers; 2 item 1 at 0; 3 item 2 at 10 ms; 4
		// item 3 at 50 ms; 5 items 4..5 at 60 ms... (4 at 52 joins 3's
		// window: flushed at 60 with 5..8).
		want := []seen{{0, 2}, {10 * time.Millisecond, 3}, {50 * time.Millisecond, 4}, {60 * time.Millisecond, 5}}
		if len(log) < len(want) {
			t.Fatalf("flushes %v, want %v", log, want)
		}
		for i, w := range want {
			if log[i] != w {
				t.Fatalf("flushes %v, want %v", log, want)
			}
		}
	})
}

// TestPumpFlushesAnUrgentItemAtOnce: an item the handler marks Urgent is
// not held for company even right after a flush; the next unmarked one
// is held again.
func TestPumpFlushesAnUrgentItemAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		rec := newRecorder()
		w := sse.NewWriter(rec, time.Second)
		w.Coalesce = 10 * time.Millisecond
		start := time.Now()
		flushedAt := map[int]time.Duration{} // flush count -> when it was first seen
		items := func(yield func(int64, error) bool) {
			// 1 at 0 (at once: quiet), 2 at 1 ms (urgent: at once), 3 at
			// 2 ms (held until 11 ms, Coalesce after item 2's flush).
			for i, d := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond} {
				time.Sleep(d - time.Since(start))
				if !yield(int64(i+1), nil) {
					return
				}
			}
			time.Sleep(50*time.Millisecond - time.Since(start))
		}
		go func() {
			for time.Since(start) <= 40*time.Millisecond {
				synctest.Wait()
				rec.mu.Lock()
				n := rec.flushes
				rec.mu.Unlock()
				if _, ok := flushedAt[n]; !ok {
					flushedAt[n] = time.Since(start)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		sse.Pump(ctx, cancel, w, time.Hour, items, func(i int64, err error) bool {
			w.Event(i, "e", []byte("x"))
			if i == 2 {
				w.Urgent()
			}
			return false
		}, nil)
		synctest.Wait()
		want := map[int]time.Duration{2: 0, 3: time.Millisecond, 4: 11 * time.Millisecond} // 1 is the headers
		for n, at := range want {
			if got, ok := flushedAt[n]; !ok || got != at {
				t.Fatalf("flushes seen at %v, want %v", flushedAt, want)
			}
		}
	})
}

// deadlines is a recorder that keeps the write deadlines it is given.
type deadlines struct {
	*recorder
	set []time.Time
}

func (d *deadlines) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestWriterMovesTheDeadlineOnlyWhenItNears: a write always has at least
// three quarters of wait, but a paced stream's flushes do not each move
// the deadline.
func TestWriterMovesTheDeadlineOnlyWhenItNears(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &deadlines{recorder: newRecorder()}
		w := sse.NewWriter(d, 4*time.Second)
		start := time.Now()
		for range 10 {
			w.Event(1, "e", []byte("x"))
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(d.set) != 1 || !d.set[0].Equal(start.Add(4*time.Second)) {
			t.Fatalf("deadlines %v after 10 flushes in 0.5 s, want one at start+4s", d.set)
		}
		time.Sleep(600 * time.Millisecond) // 1.1 s in: 2.9 s left, under 3
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if len(d.set) != 2 || !d.set[1].Equal(time.Now().Add(4*time.Second)) {
			t.Fatalf("deadlines %v: the nearing deadline was not moved", d.set)
		}
		w.End()
		if last := d.set[len(d.set)-1]; !last.IsZero() {
			t.Fatalf("End left the deadline %v", last)
		}
	})
}

// TestWriterGivesUpOnAClientThatStopsReading: over a real connection, a
// client that reads nothing makes a write fail once the socket's buffers
// are full and the deadline passes, rather than hold the stream forever.
func TestWriterGivesUpOnAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	failed := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := sse.NewWriter(rw, 200*time.Millisecond)
		frame := []byte(strings.Repeat("x", 64<<10))
		for range 4096 { // 256 MiB: far past any socket buffer
			w.Event(1, "e", frame)
			if err := w.Flush(); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-failed; err == nil {
		t.Fatal("256 MiB written to a client that reads nothing")
	}
}
