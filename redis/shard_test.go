package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus/bustest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// openSharded returns a Bus over the servers at urls (comma-separated),
// closed when t ends.
func openSharded(t *testing.T, urls, prefix string, o redis.Options) *redis.Bus {
	t.Helper()
	o.Prefix = prefix
	b, err := redis.Open(context.Background(), urls, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// reversed is a comma-separated list in the opposite order.
func reversed(urls string) string {
	parts := strings.Split(urls, ",")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ",")
}

// TestShardedConformance: a Bus sharded over three servers passes the
// suite every bus passes.
func TestShardedConformance(t *testing.T) {
	_, urls := redistest.Shards(t, 3)
	t.Parallel()
	n := 0
	var mu sync.Mutex
	bustest.Run(t, func(t *testing.T, o bustest.Options) forge.Bus {
		mu.Lock()
		n++
		prefix := fmt.Sprintf("conf%d", n)
		mu.Unlock()
		return openSharded(t, urls, prefix, redis.Options{Buffer: o.Buffer, MaxLen: o.BacklogMax, Retention: time.Minute})
	})
}

// TestShardedKeysLandOnTheSessionsServer: every key of a session (stream,
// open parts, meta, writer hold) is on the one server its id hashes to,
// and on no other; sessions spread over all three servers; two replicas
// listing the servers in different orders agree on every session's
// server; named locks spread too, each on one server.
func TestShardedKeysLandOnTheSessionsServer(t *testing.T) {
	servers, urls := redistest.Shards(t, 3)
	t.Parallel()
	ctx := t.Context()
	a := openSharded(t, urls, "p", redis.Options{WriterID: "a"})
	b := openSharded(t, reversed(urls), "p", redis.Options{WriterID: "b"})
	if a.Nodes() != 3 {
		t.Fatalf("Nodes() = %d", a.Nodes())
	}
	perServer := make([]int, 3)
	for i := range 3000 {
		sid := fmt.Sprintf("ses_%04d", i)
		at := a.NodeOf(sid)
		if other := 2 - b.NodeOf(sid); other != at {
			t.Fatalf("%s: server %d for one replica, %d for the other (lists in reverse order)", sid, at, other)
		}
		perServer[at]++
	}
	for i, n := range perServer {
		if n < 800 {
			t.Fatalf("sessions per server %v: server %d has %d of 3000", perServer, i, n)
		}
	}
	for i := range 30 {
		sid := fmt.Sprintf("ses_%04d", i)
		at := a.NodeOf(sid)
		turn := "turn_" + sid
		if err := a.Publish(ctx, stored(sid, turn, forge.EventTurnCreated, 1)); err != nil {
			t.Fatal(err)
		}
		hold, _, err := a.Acquire(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		for j, s := range servers {
			keys, err := s.Client().Keys(ctx, "p:{"+sid+"}:*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if j == at {
				slices.Sort(keys)
				if want := []string{"p:{" + sid + "}:m", "p:{" + sid + "}:s", "p:{" + sid + "}:w"}; !slices.Equal(keys, want) {
					t.Fatalf("%s: keys %v on its server %d, want its stream, meta and hold %v", sid, keys, j, want)
				}
				continue
			}
			if len(keys) != 0 {
				t.Fatalf("%s belongs to server %d but server %d has %v", sid, at, j, keys)
			}
		}
		if err := a.Release(ctx, sid, hold, nil); err != nil {
			t.Fatal(err)
		}
	}
	lockServers := map[int]bool{}
	for i := range 30 {
		name := fmt.Sprintf("stint-%d", i)
		if ok, err := a.TryLock(ctx, name, time.Minute); err != nil || !ok {
			t.Fatalf("TryLock %s: %v %v", name, ok, err)
		}
		if ok, err := b.TryLock(ctx, name, time.Minute); err != nil || ok {
			t.Fatalf("the other replica took %s (held by the first): %v %v", name, ok, err)
		}
		holders := 0
		for j, s := range servers {
			if n, _ := s.Client().Exists(ctx, "p:lock:{"+name+"}").Result(); n == 1 {
				holders++
				lockServers[j] = true
			}
		}
		if holders != 1 {
			t.Fatalf("lock %s is on %d servers", name, holders)
		}
		if err := a.Unlock(ctx, name); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.TryLock(ctx, name, time.Minute); err != nil || !ok {
			t.Fatalf("after Unlock, the other replica cannot take %s: %v %v", name, ok, err)
		}
	}
	if len(lockServers) != 3 {
		t.Fatalf("30 locks on servers %v, want all three", lockServers)
	}
}

// TestShardedCancelReachesTheOtherReplica: a cancel signal sent by one
// replica, for a session on each of the three servers, reaches the other
// replica, once.
func TestShardedCancelReachesTheOtherReplica(t *testing.T) {
	_, urls := redistest.Shards(t, 3)
	t.Parallel()
	ctx := t.Context()
	a := openSharded(t, urls, "p", redis.Options{WriterID: "a"})
	b := openSharded(t, reversed(urls), "p", redis.Options{WriterID: "b"})
	got := make(chan forge.CancelSignal, 16)
	b.OnCancel(func(sig forge.CancelSignal) { got <- sig })
	// One session per server.
	sessions := map[int]string{}
	for i := 0; len(sessions) < 3; i++ {
		sid := fmt.Sprintf("ses_%d", i)
		if _, ok := sessions[a.NodeOf(sid)]; !ok {
			sessions[a.NodeOf(sid)] = sid
		}
	}
	for node, sid := range sessions {
		sig := forge.CancelSignal{Tenant: "t", SessionID: sid, TurnID: "turn_1", Reason: forge.CancelClient}
		if err := a.SendCancel(ctx, sig); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != sig {
				t.Fatalf("server %d: got %+v, sent %+v", node, s, sig)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the cancel of a session on server %d did not reach the other replica", node)
		}
	}
	select {
	case s := <-got:
		t.Fatalf("a cancel arrived twice: %+v", s)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestShardedPingWithAServerDown: with one server of three stopped, Ping
// still answers (readiness: the other servers' sessions go on), the
// sessions of the other servers publish and subscribe, those of the
// stopped one fail with an error (the event log's 503); with every server
// stopped Ping fails.
func TestShardedPingWithAServerDown(t *testing.T) {
	servers, urls := redistest.Shards(t, 3)
	t.Parallel()
	ctx := t.Context()
	b := openSharded(t, urls+"?dial_timeout=200ms&read_timeout=200ms", "p", redis.Options{})
	// The last URL has the query: fine, each URL has its own options.
	servers[1].Stop()
	if err := b.Ping(ctx); err != nil {
		t.Fatalf("Ping with one server of three down: %v", err)
	}
	for i := range 30 {
		sid := fmt.Sprintf("ses_%d", i)
		err := b.Publish(ctx, stored(sid, "", forge.EventMessageCreated, 1))
		_, sub, serr := b.Subscribe(ctx, sid, 0)
		if serr == nil {
			sub.Close()
		}
		if b.NodeOf(sid) == 1 {
			if err == nil || serr == nil {
				t.Fatalf("session %s on the stopped server: publish %v, subscribe %v", sid, err, serr)
			}
			continue
		}
		if err != nil || serr != nil {
			t.Fatalf("session %s on server %d (up): publish %v, subscribe %v", sid, b.NodeOf(sid), err, serr)
		}
	}
	servers[0].Stop()
	servers[2].Stop()
	if err := b.Ping(ctx); err == nil {
		t.Fatal("Ping with every server down answered")
	}
}

// TestShardedURLListErrors: a list with an empty element, an invalid URL
// or the same server twice is refused with an error that says which.
func TestShardedURLListErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ urls, want string }{
		{"", "no URL"},
		{"redis://127.0.0.1:1/0,,redis://127.0.0.1:2/0", "URL 2 of 3 in the list is empty"},
		{"redis://127.0.0.1:1/0,", "URL 2 of 2 in the list is empty"},
		{"redis://127.0.0.1:1/0,http://127.0.0.1:2/0", "URL 2 of 2: redis: bad URL"},
		{"redis://127.0.0.1:1/0,redis://127.0.0.1:2/x", "URL 2 of 2: redis: bad URL"},
		{"redis://127.0.0.1:1/0,redis://127.0.0.1:1/0?pool_size=4", "URLs 1 and 2 name the same server (127.0.0.1:1/0)"},
		{"redis://u:secret@127.0.0.1:1/0 , redis://127.0.0.1:1", "URLs 1 and 2 name the same server"},
	} {
		_, err := redis.Open(t.Context(), tc.urls, redis.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want %q", tc.urls, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error shows the password: %v", tc.urls, err)
		}
	}
	// A server that does not answer is named (every server must answer
	// at startup: a typo would otherwise stop a third of the sessions).
	s := redistest.Own(t)
	_, err := redis.Open(t.Context(), s.URL()+",redis://127.0.0.1:1/0?dial_timeout=200ms", redis.Options{})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open with a server that does not answer: %v", err)
	}
	if got := redis.Redacted("redis://u:pw@a:1/0,redis://b:2/0"); got != "redis://u:xxxxx@a:1/0,redis://b:2/0" {
		t.Fatalf("Redacted list: %s", got)
	}
}
