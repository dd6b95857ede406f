package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestForumOnTwoReplicas: a forum served by two replicas (posts, joins and
// reads on either): every message is copied into the agent's monologue
// once and answered exactly once, typing reaches a reader on the replica
// that does not run the agent's turns, and when the replica running the
// agent's worker is killed the other takes the stint over and the room
// goes on, still answering each message once.
func TestForumOnTwoReplicas(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	model.SetDefault(openaitest.Text("noted").DelayBetweenChunks(20 * time.Millisecond))
	db, rs := cluster(t, 2, model)
	a, b := rs[0], rs[1]
	a.agent(obj{"name": "helper", "model": "openai/gpt-test"})
	f := a.forum(nil)
	onB := &room{s: b, id: f.id}
	onB.human("alice")
	stint := f.agent("helper", "always")
	mono := stint["metadata"].(obj)["monologue_id"].(string)

	// A forum stream on b, reading typing and messages.
	ch, cancel := b.stream("GET", "/v1/forums/"+f.id+"/events", nil)
	defer cancel()
	var mu sync.Mutex
	var typing int
	go func() {
		for ev := range ch {
			if ev.Type == "forum.typing" {
				mu.Lock()
				typing++
				mu.Unlock()
			}
		}
	}()

	rng := rand.New(rand.NewPCG(3, 4))
	ask := func(i int, rooms ...*room) string {
		r := rooms[rng.IntN(len(rooms))]
		return r.post("alice", fmt.Sprintf("question %d", i))["id"].(string)
	}
	waitReply := func(r *room, id string) {
		t.Helper()
		waitFor(t, func() bool {
			for _, rep := range r.replies() {
				if rep["reply_to"] == id {
					return true
				}
			}
			return false
		})
	}
	var asked []string
	for i := range 12 {
		id := ask(i, f, onB)
		asked = append(asked, id)
		waitReply(onB, id)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return typing >= 2 })

	// Kill the replica holding the stint's worker (whichever it is: the
	// lock moves when the holder dies), keep talking on the other.
	holder, other := a, onB
	if strings.Contains(b.logs.String(), "forum: trigger") && !strings.Contains(a.logs.String(), "forum: trigger") {
		holder, other = b, f
	}
	holder.kill9()
	for i := 12; i < 18; i++ {
		id := other.post("alice", fmt.Sprintf("question %d", i))["id"].(string)
		asked = append(asked, id)
		waitReply(other, id)
	}

	// A burst from both sides of the room (a third replica joins it): each
	// message is copied once; no message is answered twice.
	c := start(t, db, model, replicaArgs(t, db)...)
	onC := &room{s: c, id: f.id}
	var wg sync.WaitGroup
	var burst []string
	var bmu sync.Mutex
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := other
			if i%2 == 0 {
				r = onC
			}
			id := r.post("alice", fmt.Sprintf("burst %d", i))["id"].(string)
			bmu.Lock()
			burst = append(burst, id)
			bmu.Unlock()
		}()
	}
	wg.Wait()
	asked = append(asked, burst...)
	// The newest message is answered (by the follow-up that answers the
	// burst).
	newest := ""
	for _, m := range onC.messages() {
		if m["kind"] == "message" {
			newest = m["id"].(string)
		}
	}
	waitReply(onC, newest)

	replies := map[string]int{}
	for _, rep := range onC.replies() {
		replies[rep["reply_to"].(string)]++
	}
	for _, id := range asked[:18] {
		if replies[id] != 1 {
			t.Errorf("message %s has %d replies, want 1", id, replies[id])
		}
	}
	for id, n := range replies {
		if n > 1 {
			t.Errorf("message %s answered %d times", id, n)
		}
	}
	copies := map[string]int{}
	for _, m := range c.sessionMessages(mono) {
		if src, ok := metaOf(m)["source_message_id"].(string); ok {
			copies[src]++
		}
	}
	for _, id := range asked {
		if copies[id] != 1 {
			t.Errorf("message %s copied %d times into the monologue", id, copies[id])
		}
	}
}
