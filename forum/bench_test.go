package forum_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
)

// BenchmarkForumFanOut posts one message to a forum with 10 agent members
// (trigger mention: the post mentions none, so it is copied into every
// monologue and starts no turn) and 100 readers of the forum's SSE
// stream, and reports, per post, the time to the last reader's frame and
// to the last monologue copy (p50/p99), and the heap held per idle
// reader.
func BenchmarkForumFanOut(b *testing.B) {
	const agents, readers = 10, 100
	ctx := context.Background()
	var (
		mu     sync.Mutex
		copies = map[string]int{}
		copied = map[string]chan struct{}{}
	)
	onCopy := func(src string) {
		mu.Lock()
		defer mu.Unlock()
		copies[src]++
		if copies[src] == agents {
			if ch := copied[src]; ch != nil {
				close(ch)
			}
		}
	}
	n := openNode(b, b.TempDir()+"/forge.db", onCopy)
	defer n.close()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: n.st, Engine: n.eng, Forums: n.forums}).Handler())
	defer srv.Close()
	f, err := n.forums.CreateForum(ctx, tenant, "bench", json.RawMessage(`{}`), forge.DefaultForumGuards())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: "alice"}, ""); err != nil {
		b.Fatal(err)
	}
	for i := range agents {
		name := fmt.Sprint("agent", i)
		if err := n.st.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: name, Model: "scripted/echo"}); err != nil {
			b.Fatal(err)
		}
		if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: name}, forge.TriggerMention); err != nil {
			b.Fatal(err)
		}
	}

	// Readers follow the stream from the forum's newest stored event on,
	// and report each forum.message frame they see.
	evs, err := n.st.ListEvents(ctx, tenant, forge.EventQuery{SessionID: f.ID, Limit: 100000})
	if err != nil {
		b.Fatal(err)
	}
	after := evs[len(evs)-1].Seq
	type seen struct{ id string }
	frames := make(chan seen, readers*16)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	var ready sync.WaitGroup
	var wg sync.WaitGroup
	for range readers {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(rctx, "GET", srv.URL+"/v1/forums/"+f.ID+"/events?after="+fmt.Sprint(after), nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			ready.Done()
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 4<<10), 1<<20)
			for sc.Scan() {
				line := sc.Bytes()
				if !bytes.HasPrefix(line, []byte("data: ")) || !bytes.Contains(line, []byte(`"forum.message"`)) {
					continue
				}
				var ev struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(line[6:], &ev) == nil {
					select {
					case frames <- seen{ev.ID}:
					case <-rctx.Done():
						return
					}
				}
			}
		}()
	}
	ready.Wait()
	time.Sleep(200 * time.Millisecond) // every stream subscribed
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	perReader := float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / readers
	goroutines := float64(runtime.NumGoroutine()-g0) / readers

	var toReaders, toCopies []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		done := make(chan struct{})
		m, err := n.forums.Post(ctx, tenant, f.ID, "alice", fmt.Sprint("hello ", i), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		if copies[m.ID] == agents {
			close(done)
		} else {
			copied[m.ID] = done
		}
		mu.Unlock()
		for got := 0; got < readers; {
			if s := <-frames; s.id == m.ID {
				got++
			}
		}
		toReaders = append(toReaders, time.Since(start))
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatal("copies did not arrive")
		}
		toCopies = append(toCopies, time.Since(start))
	}
	b.StopTimer()
	cancel()
	srv.CloseClientConnections()
	wg.Wait()
	pct := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(toReaders, 0.5), "p50-readers-ms")
	b.ReportMetric(pct(toReaders, 0.99), "p99-readers-ms")
	b.ReportMetric(pct(toCopies, 0.5), "p50-copies-ms")
	b.ReportMetric(pct(toCopies, 0.99), "p99-copies-ms")
	b.ReportMetric(perReader, "heap-B/idle-reader")
	b.ReportMetric(goroutines, "goroutines/idle-reader")
}

// BenchmarkForumReply posts to a 1:1 chat (one human, one echoing agent)
// and waits for the agent's reply on the forum's event stream: the whole
// path of a reply (copy, trigger, monologue turn, the guards' decision,
// publish), per post.
func BenchmarkForumReply(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := openNode(b, b.TempDir()+"/forge.db", nil)
	defer n.close()
	f, err := n.forums.CreateForum(ctx, tenant, "chat", nil, forge.DefaultForumGuards())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: "alice"}, ""); err != nil {
		b.Fatal(err)
	}
	if err := n.st.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: "helper", Model: "scripted/echo"}); err != nil {
		b.Fatal(err)
	}
	if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: "helper"}, ""); err != nil {
		b.Fatal(err)
	}
	events, err := n.forums.Events(ctx, tenant, f.ID, 0)
	if err != nil {
		b.Fatal(err)
	}
	replies := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range events {
			if err != nil {
				return
			}
			var m struct{ Kind string }
			if ev.Type == forge.EventForumMessage && json.Unmarshal(ev.Data, &m) == nil && m.Kind == forge.ForumKindReply {
				replies <- struct{}{}
			}
		}
	}()
	b.ResetTimer()
	for i := range b.N {
		if _, err := n.forums.Post(ctx, tenant, f.ID, "alice", fmt.Sprint("question ", i), nil, nil); err != nil {
			b.Fatal(err)
		}
		select {
		case <-replies:
		case <-time.After(20 * time.Second):
			b.Fatal("no reply in 20 s")
		}
	}
	b.StopTimer()
	cancel()
	<-done
}
