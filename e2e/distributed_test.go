package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
	"github.com/forge-runtime/forge/redis/redistest"
)

// testLease is the --lease of the replicas of these tests: short, so
// takeovers happen within seconds.
const testLease = time.Second

// replicaArgs are the flags of a replica of the cluster on db and Redis.
func replicaArgs(t testing.TB, db string, extra ...string) []string {
	return append([]string{"--redis", redistest.URL(t), "--lease", testLease.String(), "--sandbox-root", t.TempDir()}, extra...)
}

// cluster starts n forge serve replicas sharing one new PostgreSQL
// database and the test Redis.
func cluster(t testing.TB, n int, model *openaitest.Server, extra ...string) (string, []*server) {
	t.Helper()
	redistest.URL(t)
	db := pgtest.NewDatabase(t)
	var rs []*server
	for range n {
		rs = append(rs, start(t, db, model, replicaArgs(t, db, extra...)...))
	}
	return db, rs
}

// TestStreamResumedOnOtherReplicas: a turn streamed from one replica is
// resumed on the second, then the third, after the last seq each saw: no
// gap, no duplicate, every delta; once it has ended, any replica replays
// the stored log after any cursor.
func TestStreamResumedOnOtherReplicas(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	_, rs := cluster(t, 3, model)
	rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := rs[0].session("a")
	var pieces []string
	for i := range 40 {
		pieces = append(pieces, string(rune('a'+i%26)))
	}
	model.Enqueue(openaitest.Text(pieces...).DelayBetweenChunks(25 * time.Millisecond))

	ch, cancel := rs[0].stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
	got := until(t, ch, func(evs []event) bool { return len(deltaText(evs)) >= 5 })
	cancel()
	tid := got[0].Data["id"].(string)
	path := "/v1/sessions/" + sid + "/turns/" + tid + "/events"
	ch, cancel = rs[1].stream("GET", path, nil, "Last-Event-ID", itoa(got[len(got)-1].ID))
	n := len(deltaText(got))
	more := until(t, ch, func(evs []event) bool { return len(deltaText(evs)) >= 10 })
	cancel()
	got = append(got, more...)
	ch, cancel = rs[2].stream("GET", path, nil, "Last-Event-ID", itoa(got[len(got)-1].ID))
	defer cancel()
	got = append(got, collect(t, ch)...)
	assertIncreasing(t, got)
	if got[len(got)-1].Type != "turn.done" {
		t.Fatalf("the resumed stream ended with %s", got[len(got)-1].Type)
	}
	if text := deltaText(got); text != strings.Join(pieces, "") {
		t.Fatalf("deltas across three replicas: %q (after the first: %d)", text, n)
	}
	// Every stored event of the turn was in the stream.
	stored := rs[1].must(200, "GET", path, nil)["data"].([]any)
	seen := map[int64]bool{}
	for _, ev := range got {
		seen[ev.ID] = true
	}
	for _, e := range stored {
		if seq := int64(e.(obj)["seq"].(float64)); !seen[seq] {
			t.Fatalf("stored event %d (%s) missing from the resumed stream", seq, e.(obj)["type"])
		}
	}
	// After the end: any replica, any cursor, the stored log after it.
	for i, e := range stored {
		cursor := int64(e.(obj)["seq"].(float64))
		ch, cancel := rs[i%3].stream("GET", path, nil, "Last-Event-ID", itoa(cursor))
		rest := collect(t, ch)
		cancel()
		if len(rest) != len(stored)-i-1 {
			t.Fatalf("replay after %d on replica %d: %d events, want %d", cursor, i%3, len(rest), len(stored)-i-1)
		}
		for j, ev := range rest {
			if ev.ID != int64(stored[i+1+j].(obj)["seq"].(float64)) {
				t.Fatalf("replay after %d: seq %d at %d", cursor, ev.ID, j)
			}
		}
	}
}

// TestCancelOnAnotherReplica: a cancel sent to a replica that does not run
// the turn ends it (through Redis) and answers with the cancelled turn.
func TestCancelOnAnotherReplica(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	_, rs := cluster(t, 3, model)
	rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := rs[0].session("a")
	if st, out := rs[1].call("POST", "/v1/sessions/"+sid+"/cancel", nil); st != 409 {
		t.Fatalf("cancel with nothing running: %d %v", st, out)
	}
	model.Enqueue(openaitest.Text("never ", "finished").HangAfter(2))
	bg := rs[0].must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	waitFor(t, func() bool { return model.Pending() == 0 })
	began := time.Now()
	turn := rs[1].must(200, "POST", "/v1/sessions/"+sid+"/cancel", obj{"reason": "changed my mind"})
	t.Logf("cancel through another replica answered in %v", time.Since(began))
	if turn["id"] != bg["id"] || turn["status"] != "cancelled" || turn["cancel_reason"] != "client" {
		t.Fatalf("cancel answer %v", turn)
	}
	if got := rs[2].must(200, "GET", "/v1/sessions/"+sid+"/turns/"+bg["id"].(string), nil); got["status"] != "cancelled" {
		t.Fatalf("turn on a third replica %v", got)
	}
	// The next turn runs anywhere.
	model.Enqueue(openaitest.Text("fine"))
	next := rs[2].must(200, "POST", "/v1/sessions/"+sid+"/turns", message("again"))
	if next["status"] != "done" || next["previous_turn_id"] != bg["id"] {
		t.Fatalf("next turn %v", next)
	}
}

// TestKill9OwnerAnotherReplicaEndsTheTurn: the replica running a streamed
// turn is killed; another ends the turn cancelled / abandoned within three
// lease periods, keeping the checkpointed text; a client resuming on a
// third replica gets the closing events; the session goes on.
func TestKill9OwnerAnotherReplicaEndsTheTurn(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	_, rs := cluster(t, 3, model)
	rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := rs[0].session("a")
	model.Enqueue(openaitest.Text("confirmed ", "before ", "the crash").HangAfter(4))
	ch, cancel := rs[0].stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
	defer cancel()
	seen := until(t, ch, func(seen []event) bool { return deltaText(seen) == "confirmed before the crash" })
	tid := seen[0].Data["id"].(string)
	lastSeen := seen[len(seen)-1].ID
	// Wait for the checkpoint of the streamed text, seen from another
	// replica.
	waitFor(t, func() bool { return lastText(rs[1], sid) == "confirmed before the crash" })
	killed := time.Now()
	rs[0].kill9()

	ch2, cancel2 := rs[2].stream("GET", "/v1/sessions/"+sid+"/turns/"+tid+"/events", nil, "Last-Event-ID", itoa(lastSeen))
	defer cancel2()
	rest := collect(t, ch2)
	took := time.Since(killed)
	t.Logf("turn ended by another replica %v after the kill (lease %v)", took, testLease)
	if took > 3*testLease+2*time.Second {
		t.Errorf("the turn took %v to end, more than three lease periods", took)
	}
	if len(rest) < 2 || rest[0].Type != "model.message" || rest[len(rest)-1].Type != "turn.done" || rest[0].ID <= lastSeen {
		t.Fatalf("after the takeover: %v", rest)
	}
	turn := rs[1].must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil)
	if turn["status"] != "cancelled" || turn["cancel_reason"] != "abandoned" {
		t.Fatalf("taken-over turn %v", turn)
	}
	if text := lastText(rs[2], sid); text != "confirmed before the crash" {
		t.Fatalf("interrupted text %q", text)
	}
	model.Enqueue(openaitest.Text("back"))
	next := rs[1].must(200, "POST", "/v1/sessions/"+sid+"/turns", message("still there?"))
	if next["output"].(obj)["text"] != "back" || next["previous_turn_id"] != tid {
		t.Fatalf("next turn %v", next)
	}
	req, _ := model.LastRequest()
	if got := req.Messages[len(req.Messages)-2].Content; got != "confirmed before the crash" {
		t.Fatalf("model was sent the interrupted text %q", got)
	}
}

// lastText is the text of the last text part of the session's last
// message, as s reads it.
func lastText(s *server, sid string) string {
	msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	text := ""
	for _, p := range msgs[len(msgs)-1].(obj)["parts"].([]any) {
		if p.(obj)["type"] == "text" {
			text, _ = p.(obj)["text"].(string)
		}
	}
	return text
}

// TestKeysAndTenantsAcrossReplicas: keys created once work on every
// replica, and a tenant's objects are not_found for another on every
// replica.
func TestKeysAndTenantsAcrossReplicas(t *testing.T) {
	t.Parallel()
	redistest.URL(t)
	model := openaitest.New(t)
	db := pgtest.NewDatabase(t)
	acme, globex := createKey(t, db, "acme"), createKey(t, db, "globex")
	var rs []*server
	for range 3 {
		rs = append(rs, start(t, db, model, replicaArgs(t, db)...))
	}
	rs[0].must(201, "POST", "/v1/agents", obj{"name": "a", "model": "openai/gpt-test"}, bearer(acme)...)
	sid := rs[1].must(201, "POST", "/v1/sessions", obj{"agent": "a"}, bearer(acme)...)["id"].(string)
	model.Enqueue(openaitest.Text("hi"))
	turn := rs[2].must(200, "POST", "/v1/sessions/"+sid+"/turns", message("hello"), bearer(acme)...)
	for i, r := range rs {
		if st, _ := r.call("GET", "/v1/sessions/"+sid, nil); st != 401 {
			t.Fatalf("replica %d without a key: %d", i, st)
		}
		r.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+turn["id"].(string), nil, bearer(acme)...)
		for _, path := range []string{"/v1/sessions/" + sid, "/v1/sessions/" + sid + "/turns/" + turn["id"].(string),
			"/v1/sessions/" + sid + "/events", "/v1/agents/a"} {
			if st, out := r.call("GET", path, nil, bearer(globex)...); st != 404 || out["error"].(obj)["code"] != "not_found" {
				t.Fatalf("replica %d: globex GET %s: %d %v", i, path, st, out)
			}
		}
		if st, _ := r.call("POST", "/v1/sessions/"+sid+"/cancel", nil, bearer(globex)...); st != 404 {
			t.Fatalf("replica %d: globex cancels acme's session: %d", i, st)
		}
	}
}

// TestReadyzAndDrain: /readyz checks the database and Redis; on SIGTERM
// it fails at once while the replica keeps serving, running turns get the
// grace period, then end cancelled / shutdown.
func TestReadyzAndDrain(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	_, rs := cluster(t, 2, model, "--shutdown-grace", "3s")
	ready := rs[0].must(200, "GET", "/readyz", nil)
	checks := ready["checks"].(obj)
	if ready["status"] != "ready" || checks["store"] != "ok" || checks["redis"] != "ok" {
		t.Fatalf("readyz %v", ready)
	}
	rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := rs[0].session("a")
	model.Enqueue(openaitest.Text("stuck").HangAfter(1))
	bg := rs[0].must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	waitFor(t, func() bool { return model.Pending() == 0 })
	if err := rs[0].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st, out := rs[0].call("GET", "/readyz", nil)
		return st == 503 && out["status"] == "draining"
	})
	// Still serving while it drains.
	rs[0].must(200, "GET", "/v1/sessions/"+sid, nil)
	if err := <-rs[0].waitExit(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	turn := rs[1].must(200, "GET", "/v1/sessions/"+sid+"/turns/"+bg["id"].(string), nil)
	if turn["status"] != "cancelled" || turn["cancel_reason"] != "shutdown" {
		t.Fatalf("turn after the drain %v", turn)
	}
}
