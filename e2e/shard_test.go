package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
	"github.com/forge-runtime/forge/redis/redistest"
)

// sessionServer is the index of the Redis server (of servers) holding the
// session's keys, -1 when none does (default prefix "forge").
func sessionServer(t *testing.T, servers []*redistest.Server, sid string) int {
	t.Helper()
	at := -1
	for i, s := range servers {
		keys, err := s.Client().Keys(t.Context(), "forge:{"+sid+"}:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			if at >= 0 {
				t.Fatalf("session %s has keys on servers %d and %d", sid, at, i)
			}
			at = i
		}
	}
	return at
}

// TestShardedRedisReplicas: two forge serve replicas on one PostgreSQL
// database and --redis listing three servers (each replica in another
// order). Sessions spread over all three servers; a cancel sent to the
// replica that does not run a turn ends it, for sessions on each server.
// With one server stopped, /readyz stays ready on both replicas, sessions
// on the other servers run streamed turns, and a streamed turn of a
// session on the stopped server is refused before any SSE header (503
// store_error with Retry-After); once it is back, that session streams
// again.
func TestShardedRedisReplicas(t *testing.T) {
	servers, urls := redistest.Shards(t, 3)
	db := pgtest.NewDatabase(t)
	t.Parallel()
	model := openaitest.New(t)
	parts := strings.Split(urls, ",")
	a := start(t, db, model, "--redis", urls, "--lease", testLease.String(), "--sandbox-root", t.TempDir())
	b := start(t, db, model, "--redis", strings.Join([]string{parts[1], parts[2], parts[0]}, ","), "--lease", testLease.String(), "--sandbox-root", t.TempDir())
	a.agent(obj{"name": "a", "model": "openai/gpt-test"})

	// Sessions until each server has one (a turn leaves the session's
	// keys on its server for 30 s).
	bySrv := map[int]string{}
	for i := 0; len(bySrv) < 3; i++ {
		if i == 30 {
			t.Fatalf("30 sessions on servers %v only", bySrv)
		}
		sid := a.session("a")
		model.Enqueue(openaitest.Text("hi"))
		if turn := a.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("hello")); turn["status"] != "done" {
			t.Fatalf("turn %v", turn)
		}
		at := sessionServer(t, servers, sid)
		if at < 0 {
			t.Fatalf("session %s: no keys on any server after a turn", sid)
		}
		if _, ok := bySrv[at]; !ok {
			bySrv[at] = sid
		}
	}

	for at, sid := range bySrv {
		model.Enqueue(openaitest.Text("never ", "finished").HangAfter(2))
		bg := a.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
		waitFor(t, func() bool { return model.Pending() == 0 })
		turn := b.must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{"reason": "changed my mind"})
		if turn["id"] != bg["id"] || turn["status"] != "cancelled" || turn["cancel_reason"] != "client" {
			t.Fatalf("server %d: cancel through the other replica answered %v", at, turn)
		}
	}

	const down = 1
	servers[down].Stop()
	for _, r := range []*server{a, b} {
		if ready := r.must(200, "GET", "/readyz", nil); ready["status"] != "ready" {
			t.Fatalf("readyz with one Redis server of three down: %v", ready)
		}
	}
	for at, sid := range bySrv {
		if at == down {
			continue
		}
		model.Enqueue(openaitest.Text("still ", "here"))
		ch, cancel := b.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
		got := collect(t, ch)
		cancel()
		if text := deltaText(got); text != "still here" || got[len(got)-1].Type != "turn.done" {
			t.Fatalf("server %d up, another down: streamed %q, last %s", at, text, got[len(got)-1].Type)
		}
	}
	sid := bySrv[down]
	body, _ := json.Marshal(obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
	req, _ := http.NewRequest("POST", a.URL+"/v1/sessions/"+sid+"/turns", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer obj
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("streamed turn of a session on the stopped server: %d, Retry-After %q, Content-Type %q, %v",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), answer)
	}
	if e, _ := answer["error"].(obj); e == nil || e["code"] != "store_error" {
		t.Fatalf("streamed turn of a session on the stopped server: %v", answer)
	}

	servers[down].Start()
	deadline := time.Now().Add(20 * time.Second)
	for {
		model.Enqueue(openaitest.Text("back"))
		st, turn := a.call("POST", "/v1/sessions/"+sid+"/turns", message("again"))
		if st == 200 && turn["status"] == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session on the restarted server: %d %v", st, turn)
		}
		time.Sleep(100 * time.Millisecond)
	}
	model.Enqueue(openaitest.Text("streams ", "again"))
	ch, cancel := b.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
	defer cancel()
	if got := collect(t, ch); deltaText(got) != "streams again" {
		t.Fatalf("after the restart: %q", deltaText(got))
	}
}

// TestShardedRedisURLListRefusedAtStartup: forge serve refuses a --redis
// list with an empty element, an invalid URL or the same server twice,
// before it listens, saying which.
func TestShardedRedisURLListRefusedAtStartup(t *testing.T) {
	db := pgtest.NewDatabase(t)
	t.Parallel()
	model := openaitest.New(t)
	for _, tc := range []struct{ redis, want string }{
		{"redis://127.0.0.1:1/0,,redis://127.0.0.1:2/0", "--redis: redis: URL 2 of 3 in the list is empty"},
		{"redis://127.0.0.1:1/0,ftp://127.0.0.1:2/0", "--redis: redis: URL 2 of 2: redis: bad URL"},
		{"redis://127.0.0.1:1/0,redis://127.0.0.1:1/0?pool_size=8", "--redis: redis: URLs 1 and 2 name the same server (127.0.0.1:1/0)"},
	} {
		_, err := tryStart(t, db, model, "--redis", tc.redis)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--redis %q: %v, want %q", tc.redis, err, tc.want)
		}
	}
}
