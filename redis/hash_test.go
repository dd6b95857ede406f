package redis

import (
	"fmt"
	"testing"
)

func hashBus(ids ...string) *Bus {
	b := &Bus{}
	for _, id := range ids {
		b.nodes = append(b.nodes, &node{id: id, hash: hashString(fnvOffset, id)})
	}
	return b
}

// TestShardHashIsStable: the server of a session is a function of its id
// and the set of servers only. A change to the hash would move every
// deployment's sessions at the next upgrade (docs/distributed.md: moving
// sessions needs every replica stopped), so these placements are fixed.
func TestShardHashIsStable(t *testing.T) {
	b := hashBus("redis-a:6379/0", "redis-b:6379/0", "redis-c:6379/0")
	got := ""
	for i := range 16 {
		got += b.pick(fmt.Sprintf("ses_%02d", i)).id[6:7]
	}
	if want := "ccccccabcbcbabaa"; got != want {
		t.Fatalf("placements of ses_00..ses_15: %s, want %s", got, want)
	}
}

// TestRemovingAServerMovesOnlyItsSessions: with rendezvous hashing, the
// sessions of the servers that stay stay where they were; those of the
// removed one spread over the others.
func TestRemovingAServerMovesOnlyItsSessions(t *testing.T) {
	three := hashBus("a:1/0", "b:1/0", "c:1/0")
	two := hashBus("c:1/0", "a:1/0")
	moved := map[string]int{}
	for i := range 3000 {
		sid := fmt.Sprintf("ses_%d", i)
		before, after := three.pick(sid).id, two.pick(sid).id
		if before != "b:1/0" && before != after {
			t.Fatalf("%s moved from %s to %s though %s stays", sid, before, after, before)
		}
		if before == "b:1/0" {
			moved[after]++
		}
	}
	if moved["a:1/0"] < 300 || moved["c:1/0"] < 300 {
		t.Fatalf("the removed server's sessions went to %v", moved)
	}
}
