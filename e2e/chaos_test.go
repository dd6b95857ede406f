package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
	"github.com/forge-runtime/forge/redis/redistest"
)

var (
	chaosTurns   = flag.Int("chaos.turns", 240, "turns TestChaos runs over three replicas (a soak: -chaos.turns=3000 -timeout 60m)")
	chaosWorkers = flag.Int("chaos.workers", 12, "sessions TestChaos drives at once")
)

// fleet is a cluster whose replicas get killed and restarted.
type fleet struct {
	t     *testing.T
	db    string
	model *openaitest.Server

	mu       sync.Mutex // guards the following
	servers  []*server
	kills    int
	failures []string // invariant violations, reported at the end
}

func (f *fleet) url(rng *rand.Rand) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[rng.IntN(len(f.servers))].URL
}

func (f *fleet) fail(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

// killOne kills a replica with SIGKILL and starts a new one in its place.
func (f *fleet) killOne(rng *rand.Rand) {
	f.mu.Lock()
	i := rng.IntN(len(f.servers))
	victim := f.servers[i]
	f.kills++
	f.mu.Unlock()
	victim.kill9()
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // down for a moment
	s, err := tryStart(f.t, f.db, f.model, replicaArgs(f.t, f.db)...)
	if err != nil {
		f.fail("restart: %v", err)
		return
	}
	f.mu.Lock()
	f.servers[i] = s
	f.mu.Unlock()
}

var chaosClient = &http.Client{Timeout: 30 * time.Second}

// try is one JSON request that may fail (a replica killed under it).
func try(method, url string, body any, headers ...string) (int, obj, error) {
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := chaosClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var out obj
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%d %s", resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out, nil
}

// tryStream reads an SSE stream into events until it ends or fails; it
// reports whether it saw turn.done.
func tryStream(method, url string, body any, onEvent func(event), headers ...string) (bool, error) {
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, r)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return false, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	rd := bufio.NewReader(resp.Body)
	var ev event
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return false, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.Type != "" {
				onEvent(ev)
				if ev.Type == "turn.done" {
					return true, nil
				}
				if ev.Type == "error" {
					return false, fmt.Errorf("error frame: %v", ev.Data)
				}
			}
			ev = event{}
		case strings.HasPrefix(line, "id: "):
			ev.ID, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			ev.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(line[6:]), &ev.Data)
		}
	}
}

// chaosAnswer is what the model answers every turn of TestChaos.
var chaosPieces = []string{"the ", "answer ", "is ", "forty", "-two", ", ", "as ", "always", "."}

// TestChaos: sessions run hundreds of turns over three replicas (streamed,
// in the background, or waited for, each on a random replica) while
// replicas are killed with SIGKILL and restarted. Clients retry on another
// replica with the same Idempotency-Key and resume streams after their
// last seq. Afterwards: every turn is terminal (done, or cancelled /
// abandoned when its replica died), every done turn's answer is stored
// whole, every stream had no gap and no duplicate, and every session
// continues.
func TestChaos(t *testing.T) {
	t.Parallel()
	redistest.URL(t)
	model := openaitest.New(t)
	model.SetDefault(openaitest.Text(chaosPieces...).DelayBetweenChunks(40 * time.Millisecond))
	f := &fleet{t: t, db: pgtest.NewDatabase(t), model: model}
	for range 3 {
		f.servers = append(f.servers, start(t, f.db, model, replicaArgs(t, f.db)...))
	}
	f.servers[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	want := strings.Join(chaosPieces, "")

	workers := *chaosWorkers
	perWorker := (*chaosTurns + workers - 1) / workers
	type outcome struct {
		sid, tid, status, reason string
	}
	var mu sync.Mutex
	var outcomes []outcome
	var wg sync.WaitGroup
	var done atomic.Bool
	began := time.Now()
	sessions := make([]string, workers)
	for w := range workers {
		sessions[w] = f.servers[0].session("a")
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			sid := sessions[w]
			for i := range perWorker {
				key := fmt.Sprintf("chaos-%d-%d", w, i)
				tid, streamed := f.runTurn(rng, sid, key, rng.IntN(3))
				if tid == "" {
					return
				}
				final := f.waitTerminal(rng, sid, tid)
				if final == nil {
					return
				}
				o := outcome{sid: sid, tid: tid, status: final["status"].(string)}
				if r, ok := final["cancel_reason"].(string); ok {
					o.reason = r
				}
				switch {
				case o.status == "done":
					if out, _ := final["output"].(obj); out == nil || out["text"] != want {
						f.fail("turn %s done with output %v", tid, final["output"])
					}
					if streamed != nil && *streamed != want {
						f.fail("turn %s: streamed deltas %q, output %q", tid, *streamed, want)
					}
				case o.status == "cancelled" && o.reason == "abandoned":
				default:
					f.fail("turn %s ended %s (%v): %v", tid, o.status, o.reason, final["error"])
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}
		}()
	}
	// Kill a replica every one to three seconds while the turns run.
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		rng := rand.New(rand.NewPCG(99, 1))
		for !done.Load() {
			time.Sleep(time.Second + time.Duration(rng.IntN(2000))*time.Millisecond)
			if done.Load() {
				return
			}
			f.killOne(rng)
		}
	}()
	wg.Wait()
	done.Store(true)
	<-chaosDone

	// Every session continues, and keeps every completed answer.
	rng := rand.New(rand.NewPCG(5, 5))
	for _, sid := range sessions {
		tid, _ := f.runTurn(rng, sid, "chaos-final-"+sid, 2)
		if final := f.waitTerminal(rng, sid, tid); final == nil || final["status"] != "done" {
			f.fail("session %s does not continue: %v", sid, final)
		}
	}
	byID := map[string]string{}
	for _, sid := range sessions {
		_, page, err := try("GET", f.url(rng)+"/v1/sessions/"+sid+"/messages?limit=10000", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page["data"].([]any) {
			var text string
			for _, p := range m.(obj)["parts"].([]any) {
				if s, ok := p.(obj)["text"].(string); ok && p.(obj)["type"] == "text" {
					text += s
				}
			}
			byID[m.(obj)["id"].(string)] = text
		}
	}
	counts := map[string]int{}
	for _, o := range outcomes {
		counts[o.status+"/"+o.reason]++
		if o.status != "done" {
			continue
		}
		_, turn, err := try("GET", f.url(rng)+"/v1/sessions/"+o.sid+"/turns/"+o.tid, nil)
		if err != nil {
			t.Fatal(err)
		}
		mid := turn["output"].(obj)["message_id"].(string)
		if byID[mid] != want {
			f.fail("done turn %s: its answer %s is stored as %q", o.tid, mid, byID[mid])
		}
	}
	t.Logf("%d turns in %v over 3 replicas, %d kills: %v", len(outcomes), time.Since(began).Round(time.Second), f.kills, counts)
	if len(outcomes) != workers*perWorker {
		t.Errorf("%d turns finished, want %d", len(outcomes), workers*perWorker)
	}
	for _, msg := range f.failures {
		t.Error(msg)
	}
}

// runTurn creates a turn on random replicas (retrying with the same key
// when one dies under it) in mode 0 stream, 1 background, 2 wait, and
// returns its id; for a stream that saw turn.done, the deltas' text.
func (f *fleet) runTurn(rng *rand.Rand, sid, key string, mode int) (string, *string) {
	body := obj{"input": []obj{{"type": "message", "text": key}}}
	switch mode {
	case 0:
		body["stream"] = true
	case 1:
		body["background"] = true
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		url := f.url(rng)
		if mode == 0 {
			if tid, text, ok := f.streamTurn(rng, url, sid, key, body); ok {
				return tid, text
			}
			continue
		}
		st, out, err := try("POST", url+"/v1/sessions/"+sid+"/turns", body, "Idempotency-Key", key)
		if err != nil || st >= 500 || st == 409 {
			time.Sleep(50 * time.Millisecond) // a replica died, or the previous turn is still ending
			continue
		}
		if st != 200 && st != 202 {
			f.fail("POST turn %s: %d %v", key, st, out)
			return "", nil
		}
		return out["id"].(string), nil
	}
	f.fail("turn %s could not be created in 90 s", key)
	return "", nil
}

// streamTurn streams a turn, resuming on other replicas after the last
// seq when the stream breaks, and checks the events: strictly increasing,
// every stored event of the turn among them. ok is false when the turn
// could not be created on this replica (retry).
func (f *fleet) streamTurn(rng *rand.Rand, url, sid, key string, body obj) (tid string, text *string, ok bool) {
	var evs []event
	collect := func(ev event) { evs = append(evs, ev) }
	ended, err := tryStream("POST", url+"/v1/sessions/"+sid+"/turns", body, collect, "Idempotency-Key", key)
	if len(evs) == 0 || evs[0].Type != "turn.created" {
		if err != nil && !strings.Contains(err.Error(), "status 5") && !strings.Contains(err.Error(), "status 409") &&
			!isConnErr(err) {
			f.fail("stream turn %s: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
		return "", nil, false
	}
	tid = evs[0].Data["id"].(string)
	for attempt := 0; !ended; attempt++ {
		if attempt > 200 {
			f.fail("stream of %s never ended", tid)
			return tid, nil, true
		}
		last := evs[len(evs)-1].ID
		ended, err = tryStream("GET", f.url(rng)+"/v1/sessions/"+sid+"/turns/"+tid+"/events", nil, collect, "Last-Event-ID", strconv.FormatInt(last, 10))
		if !ended {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].ID <= evs[i-1].ID {
			f.fail("stream of %s: seq %d after %d", tid, evs[i].ID, evs[i-1].ID)
			return tid, nil, true
		}
	}
	got := map[int64]bool{}
	for _, ev := range evs {
		got[ev.ID] = true
	}
	for {
		_, out, err := try("GET", f.url(rng)+"/v1/sessions/"+sid+"/turns/"+tid+"/events", nil)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for _, e := range out["data"].([]any) {
			if seq := int64(e.(obj)["seq"].(float64)); !got[seq] {
				f.fail("stream of %s: stored event %d (%s) missing", tid, seq, e.(obj)["type"])
			}
		}
		break
	}
	s := deltaText(evs)
	return tid, &s, true
}

func isConnErr(err error) bool {
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "EOF", "broken pipe"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// waitTerminal polls the turn on random replicas until it has ended.
func (f *fleet) waitTerminal(rng *rand.Rand, sid, tid string) obj {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st, out, err := try("GET", f.url(rng)+"/v1/sessions/"+sid+"/turns/"+tid, nil)
		if err == nil && st == 200 && out["status"] != "running" {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.fail("turn %s still running after 60 s", tid)
	return nil
}
