package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

const (
	fxSession = "ses_01J0SESSION"
	fxTurn    = "turn_01J0TURN"
)

// fixtureFrames returns the frames of testdata/turn.sse, each as its exact
// wire text, with its seq.
func fixtureFrames(t *testing.T) (texts []string, seqs []int64) {
	t.Helper()
	raw, err := os.ReadFile("testdata/turn.sse")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(raw), "\n\n") {
		if !strings.HasPrefix(block, "id: ") {
			continue
		}
		idLine, _, _ := strings.Cut(block, "\n")
		seq, err := strconv.ParseInt(strings.TrimPrefix(idLine, "id: "), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, block+"\n\n")
		seqs = append(seqs, seq)
	}
	return texts, seqs
}

// sseServer serves the fixture turn like the API does: the POST of the turn
// answers with its stream, GET .../events resumes after Last-Event-ID (or
// after=). Each connection asks plan what to do.
type sseServer struct {
	t      *testing.T
	texts  []string
	seqs   []int64
	plan   func(conn int, r *http.Request) connPlan
	mu     sync.Mutex
	reqs   []seenReq
	server *httptest.Server
}

type seenReq struct {
	Method, Path, LastEventID, After, IdemKey string
	Body                                      map[string]any
}

type connPlan struct {
	// frames to write before dropping; -1 writes all.
	frames int
	// partial writes half of the next frame before dropping.
	partial bool
	// hang keeps the connection open and silent after the frames.
	hang bool
	// ignoreCursor replays from the first frame.
	ignoreCursor bool
	// status answers with this error status instead of a stream.
	status int
	// json answers with the running turn as JSON (an idempotent replay).
	json bool
	// turnHeader names the turn in a Forge-Turn-Id header.
	turnHeader bool
	// errorFrame ends the stream with an "event: error" frame of this code.
	errorFrame string
}

func newSSEServer(t *testing.T, plan func(conn int, r *http.Request) connPlan) *sseServer {
	s := &sseServer{t: t, plan: plan}
	s.texts, s.seqs = fixtureFrames(t)
	s.server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.server.Close)
	return s
}

func (s *sseServer) requests() []seenReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenReq(nil), s.reqs...)
}

func (s *sseServer) handle(w http.ResponseWriter, r *http.Request) {
	sr := seenReq{Method: r.Method, Path: r.URL.Path, LastEventID: r.Header.Get("Last-Event-ID"),
		After: r.URL.Query().Get("after"), IdemKey: r.Header.Get("Idempotency-Key")}
	if r.Method == http.MethodPost {
		_ = json.NewDecoder(r.Body).Decode(&sr.Body)
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, sr)
	conn := len(s.reqs)
	s.mu.Unlock()

	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions/"+fxSession+"/turns":
	case r.Method == http.MethodGet && r.URL.Path == "/v1/sessions/"+fxSession+"/turns/"+fxTurn+"/events":
	case r.Method == http.MethodGet && r.URL.Path == "/v1/sessions/"+fxSession+"/events":
	default:
		http.Error(w, `{"error":{"code":"not_found","message":"no route"}}`, 404)
		return
	}
	p := s.plan(conn, r)
	if p.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.status)
		fmt.Fprintf(w, `{"error":{"code":"%s","message":"planned failure"}}`, codeForStatus(p.status))
		return
	}
	if p.json {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"session_id":%q,"status":"running"}`, fxTurn, fxSession)
		return
	}
	var after int64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, _ = strconv.ParseInt(v, 10, 64)
	} else if v := r.URL.Query().Get("after"); v != "" {
		after, _ = strconv.ParseInt(v, 10, 64)
	}
	if p.ignoreCursor {
		after = 0
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if p.turnHeader {
		w.Header().Set("Forge-Turn-Id", fxTurn)
	}
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	fmt.Fprint(w, ": ping\n\n")
	fl.Flush()
	written := 0
	for i, text := range s.texts {
		if s.seqs[i] <= after {
			continue
		}
		if p.frames >= 0 && written == p.frames {
			if p.errorFrame != "" {
				fmt.Fprintf(w, "event: error\ndata: {\"error\":{\"code\":%q,\"message\":\"planned\"}}\n\n", p.errorFrame)
				return
			}
			if p.partial {
				fmt.Fprint(w, text[:len(text)/2])
				fl.Flush()
			}
			if p.hang {
				<-r.Context().Done()
				return
			}
			panic(http.ErrAbortHandler) // drop the connection abruptly
		}
		fmt.Fprint(w, text)
		fl.Flush()
		written++
	}
}

func newTestClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{WithReconnect(5, time.Millisecond, 10*time.Millisecond)}, opts...)
	c, err := New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func collect(t *testing.T, seq func(func(forge.Event, error) bool)) ([]int64, error) {
	t.Helper()
	var got []int64
	var last error
	for ev, err := range seq {
		if err != nil {
			last = err
			continue
		}
		got = append(got, ev.Seq)
	}
	return got, last
}

func equalSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTurnEventsReconnectsWithoutDuplicates(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		switch conn {
		case 1:
			return connPlan{frames: 4, partial: true} // dropped inside a frame
		case 2:
			return connPlan{frames: 3} // dropped between frames
		case 3:
			return connPlan{frames: 5, ignoreCursor: true} // a server replaying old events
		}
		return connPlan{frames: -1}
	})
	c := newTestClient(t, srv.server.URL)
	got, err := collect(t, c.TurnEvents(context.Background(), fxSession, fxTurn, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !equalSeqs(got, srv.seqs) {
		t.Fatalf("got seqs %v\nwant      %v", got, srv.seqs)
	}
	reqs := srv.requests()
	var ids []string
	for _, r := range reqs {
		ids = append(ids, r.LastEventID)
		if r.LastEventID != r.After {
			t.Errorf("after=%q and Last-Event-ID %q differ", r.After, r.LastEventID)
		}
	}
	// conn 1 delivered seqs 3,4,5,6 (7 was cut); conn 2 delivered 7,9,10;
	// conn 3 replayed 3..7 (all skipped), conn 4 resumed after 10.
	want := []string{"", "6", "10", "10"}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("Last-Event-ID per connection = %v, want %v", ids, want)
	}
}

func TestTurnEventsAfter(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(int, *http.Request) connPlan { return connPlan{frames: -1} })
	c := newTestClient(t, srv.server.URL)
	got, err := collect(t, c.TurnEvents(context.Background(), fxSession, fxTurn, 12))
	if err != nil {
		t.Fatal(err)
	}
	if !equalSeqs(got, []int64{13, 14, 16, 17, 18, 19, 20, 21, 22, 24}) {
		t.Fatalf("got %v", got)
	}
	if r := srv.requests()[0]; r.LastEventID != "12" || r.After != "12" {
		t.Errorf("request %+v", r)
	}
}

func TestStreamTurnResumesOnTurnEvents(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		if conn == 1 {
			return connPlan{frames: 6, partial: true}
		}
		return connPlan{frames: -1}
	})
	c := newTestClient(t, srv.server.URL)
	var text strings.Builder
	var seqs []int64
	for ev, err := range c.StreamTurn(context.Background(), fxSession, TurnRequest{Input: Message("hello")}) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
		if ev.Type == forge.EventModelDelta && ev.ID == "prt_01J0TEXT" {
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			text.WriteString(d.Delta)
		}
	}
	if !equalSeqs(seqs, srv.seqs) {
		t.Fatalf("seqs %v, want %v", seqs, srv.seqs)
	}
	if text.String() != "Hello, world!" {
		t.Errorf("text %q", text.String())
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests: %+v", len(reqs), reqs)
	}
	post, get := reqs[0], reqs[1]
	if post.Method != "POST" || post.Body["stream"] != true || post.IdemKey == "" {
		t.Errorf("POST %+v", post)
	}
	in, _ := json.Marshal(post.Body["input"])
	if string(in) != `[{"text":"hello","type":"message"}]` {
		t.Errorf("input %s", in)
	}
	if get.Method != "GET" || get.Path != "/v1/sessions/"+fxSession+"/turns/"+fxTurn+"/events" || get.LastEventID != "9" {
		t.Errorf("resume %+v", get)
	}
}

func TestStreamTurnDropBeforeFirstEvent(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		switch conn {
		case 1:
			return connPlan{frames: 0, partial: true}
		case 2:
			return connPlan{json: true} // the idempotent replay of the POST
		}
		return connPlan{frames: -1}
	})
	c := newTestClient(t, srv.server.URL)
	got, err := collect(t, c.StreamTurn(context.Background(), fxSession, TurnRequest{Input: Message("hi"), IdempotencyKey: "k1"}))
	if err != nil {
		t.Fatal(err)
	}
	if !equalSeqs(got, srv.seqs) {
		t.Fatalf("got %v", got)
	}
	reqs := srv.requests()
	if len(reqs) != 3 || reqs[0].IdemKey != "k1" || reqs[1].IdemKey != "k1" || reqs[1].Method != "POST" || reqs[2].Method != "GET" {
		t.Fatalf("requests %+v", reqs)
	}
}

func TestStreamIdleTimeoutReconnects(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		if conn == 1 {
			return connPlan{frames: 5, hang: true}
		}
		return connPlan{frames: -1}
	})
	c := newTestClient(t, srv.server.URL, WithStreamIdleTimeout(150*time.Millisecond))
	start := time.Now()
	got, err := collect(t, c.TurnEvents(context.Background(), fxSession, fxTurn, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !equalSeqs(got, srv.seqs) {
		t.Fatalf("got %v", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if n := len(srv.requests()); n != 2 {
		t.Errorf("%d connections", n)
	}
}

func TestStreamRetriesAreBounded(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(int, *http.Request) connPlan { return connPlan{status: 503} })
	c := newTestClient(t, srv.server.URL, WithReconnect(2, time.Millisecond, time.Millisecond))
	got, err := collect(t, c.TurnEvents(context.Background(), fxSession, fxTurn, 0))
	if len(got) != 0 || err == nil || !strings.Contains(err.Error(), "2 reconnection attempts") {
		t.Fatalf("got %v, err %v", got, err)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 503 {
		t.Errorf("err %v does not carry the 503", err)
	}
	if n := len(srv.requests()); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestStreamProgressResetsRetries(t *testing.T) {
	t.Parallel()
	// Every connection delivers two events then drops: more drops than the
	// retry budget, but each one made progress.
	srv := newSSEServer(t, func(int, *http.Request) connPlan { return connPlan{frames: 2, partial: true} })
	c := newTestClient(t, srv.server.URL, WithReconnect(1, time.Millisecond, time.Millisecond))
	got, err := collect(t, c.TurnEvents(context.Background(), fxSession, fxTurn, 0))
	if err != nil || !equalSeqs(got, srv.seqs) {
		t.Fatalf("got %v, err %v", got, err)
	}
}

func TestStreamAPIErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(int, *http.Request) connPlan { return connPlan{status: 409} })
	c := newTestClient(t, srv.server.URL)
	n := 0
	var last error
	for _, err := range c.StreamTurn(context.Background(), fxSession, TurnRequest{Input: Message("x")}) {
		n++
		last = err
	}
	if n != 1 || !errors.Is(last, forge.ErrConflict) || !IsConflict(last) {
		t.Fatalf("%d items, last %v", n, last)
	}
	if len(srv.requests()) != 1 {
		t.Errorf("retried a 409")
	}
}

func TestStreamBreakAndCancel(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(int, *http.Request) connPlan { return connPlan{frames: 3, hang: true} })
	c := newTestClient(t, srv.server.URL)
	n := 0
	for _, err := range c.TurnEvents(context.Background(), fxSession, fxTurn, 0) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 2 {
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int64
	var last error
	for ev, err := range c.TurnEvents(ctx, fxSession, fxTurn, 0) {
		if err != nil {
			last = err
			continue
		}
		got = append(got, ev.Seq)
		if len(got) == 3 {
			go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		}
	}
	if len(got) != 3 || !errors.Is(last, context.Canceled) {
		t.Fatalf("got %v, last %v", got, last)
	}
}

func TestSessionEventsDoesNotStopAtTurnDone(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		if conn == 1 {
			return connPlan{frames: -1} // whole turn, then a clean end
		}
		return connPlan{frames: 0, hang: true}
	})
	c := newTestClient(t, srv.server.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int64
	for ev, err := range c.SessionEvents(ctx, fxSession, 0) {
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			continue
		}
		got = append(got, ev.Seq)
		if ev.Type == forge.EventTurnDone {
			go func() {
				for len(srv.requests()) < 2 {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
		}
	}
	if !equalSeqs(got, srv.seqs) {
		t.Fatalf("got %v", got)
	}
	reqs := srv.requests()
	if reqs[1].Path != "/v1/sessions/"+fxSession+"/events" || reqs[1].LastEventID != "24" {
		t.Errorf("resubscription %+v", reqs[1])
	}
}

func TestStreamTurnHeaderNamesTheTurn(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		if conn == 1 {
			return connPlan{frames: 0, partial: true, turnHeader: true}
		}
		return connPlan{frames: -1}
	})
	c := newTestClient(t, srv.server.URL)
	got, err := collect(t, c.StreamTurn(context.Background(), fxSession, TurnRequest{Input: Message("hi")}))
	if err != nil || !equalSeqs(got, srv.seqs) {
		t.Fatalf("got %v, %v", got, err)
	}
	reqs := srv.requests()
	if len(reqs) != 2 || reqs[1].Method != "GET" || reqs[1].LastEventID != "" {
		t.Fatalf("requests %+v", reqs)
	}
}

func TestStreamErrorFrames(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, func(conn int, r *http.Request) connPlan {
		if conn == 1 {
			return connPlan{frames: 3, errorFrame: "internal"}
		}
		return connPlan{frames: 2, errorFrame: "not_found"}
	})
	c := newTestClient(t, srv.server.URL)
	got, err := collect(t, c.TurnEvents(context.Background(), fxSession, fxTurn, 0))
	if !equalSeqs(got, srv.seqs[:5]) || !IsNotFound(err) {
		t.Fatalf("got %v, %v", got, err)
	}
	if n := len(srv.requests()); n != 2 {
		t.Errorf("%d connections", n)
	}
}
