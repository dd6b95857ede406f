package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// A bare broadcaster: the floor of forge's fan-out of a session's events
// to its SSE subscribers. It runs in the fake model's process (a process of
// its own, as forge serve is, so that its CPU time is read from /proc the
// same way and the readers' is not counted), on the control server:
//
//	GET  /broadcast/subscribe?topic=T  an SSE stream of what the runs of
//	                           topic T send
//	POST /broadcast/run?topic=T&subscribers=K&deltas=N&pace=D
//	                           waits until K streams are subscribed to T,
//	                           then sends each of them N model.message.delta
//	                           frames, D apart, and a turn.done frame
//
// Each frame is encoded once, with the bytes forge writes for a delta (the
// same envelope fields, ids of the same length), and queued to every
// subscriber; a goroutine per subscriber writes its queue and flushes once
// the queue is empty, as forge's streams do. Queues are unbounded: the
// floor never drops a subscriber.
type broadcaster struct {
	mu   sync.Mutex                        // guards subs
	subs map[string]map[*bcastSub]struct{} // by topic
}

type bcastSub struct {
	mu   sync.Mutex // guards q
	q    [][]byte
	wake chan struct{} // capacity 1: q is not empty
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[string]map[*bcastSub]struct{}{}}
}

func (b *broadcaster) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /broadcast/subscribe", b.subscribe)
	mux.HandleFunc("POST /broadcast/run", b.run)
}

func (b *broadcaster) subscribe(w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	s := &bcastSub{wake: make(chan struct{}, 1)}
	b.mu.Lock()
	if b.subs[topic] == nil {
		b.subs[topic] = map[*bcastSub]struct{}{}
	}
	b.subs[topic][s] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.subs[topic], s)
		if len(b.subs[topic]) == 0 {
			delete(b.subs, topic)
		}
		b.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	var batch [][]byte
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch, s.q = s.q, batch[:0]
		s.mu.Unlock()
		for _, f := range batch {
			if _, err := w.Write(f); err != nil {
				return
			}
		}
		clear(batch)
		if rc.Flush() != nil {
			return
		}
	}
}

func (s *bcastSub) push(f []byte) {
	s.mu.Lock()
	s.q = append(s.q, f)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (b *broadcaster) run(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topic := q.Get("topic")
	k, err1 := strconv.Atoi(q.Get("subscribers"))
	n, err2 := strconv.Atoi(q.Get("deltas"))
	pace, err3 := time.ParseDuration(q.Get("pace"))
	if err1 != nil || err2 != nil || err3 != nil || k < 1 || k > 100_000 || n < 1 || n > 1_000_000 || pace < 0 || pace > 10*time.Second {
		http.Error(w, "want subscribers=1..100000, deltas=1..1000000 and pace=0s..10s", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var subs []*bcastSub
	for {
		b.mu.Lock()
		if len(b.subs[topic]) >= k {
			for s := range b.subs[topic] {
				subs = append(subs, s)
			}
		}
		b.mu.Unlock()
		if subs != nil {
			break
		}
		select {
		case <-ctx.Done():
			http.Error(w, fmt.Sprintf("fewer than %d subscribers within 10 s", k), http.StatusConflict)
			return
		case <-time.After(time.Millisecond):
		}
	}
	const sid, tid, thr, prt = "ses_01M8T1BZ0W4A59BJDWJ11X1G0R", "turn_01M8T1BZ2R3XMBP2H0C8VWC5KH",
		"thr_01M8T1BZ0W4A59BJDWJ11X1G0S", "prt_01M8T1BZ32AD9QNFQHS0FTM7E2"
	start := time.Now()
	for i := range n {
		if i > 0 && pace > 0 {
			if d := time.Until(start.Add(time.Duration(i) * pace)); d > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(d):
				}
			}
		}
		seq := i + 1
		f := fmt.Appendf(make([]byte, 0, 320), "id: %d\nevent: model.message.delta\ndata: {\"seq\":%d,\"id\":%q,\"type\":\"model.message.delta\","+
			"\"session_id\":%q,\"turn_id\":%q,\"thread_id\":%q,\"created_at\":%q,\"data\":{\"delta\":", seq, seq, prt, sid, tid, thr,
			time.Now().UTC().Format(time.RFC3339Nano))
		f = appendJSONString(f, pacedPiece(i))
		f = append(f, "}}\n\n"...)
		for _, s := range subs {
			s.push(f)
		}
	}
	done := fmt.Appendf(nil, "id: %d\nevent: turn.done\ndata: {\"seq\":%d,\"id\":%q,\"type\":\"turn.done\",\"session_id\":%q,\"turn_id\":%q,"+
		"\"thread_id\":null,\"created_at\":%q,\"data\":{\"id\":%q,\"status\":\"done\"}}\n\n", n+1, n+1, tid, sid, tid,
		time.Now().UTC().Format(time.RFC3339Nano), tid)
	for _, s := range subs {
		s.push(done)
	}
}
