package engine_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// turnCost is what one trivial turn cost a replica in PostgreSQL.
type turnCost struct{ trips, commits int64 }

// costMeter measures a replica's PostgreSQL traffic: round trips on the
// wire (a proxy in front of the database) and write transactions (the
// store's ObserveWrites: every write call is one transaction).
type costMeter struct {
	proxy   *pgtest.Proxy
	commits atomic.Int64
}

func (c *cluster) meteredReplica() (*replica, *costMeter) {
	c.t.Helper()
	m := &costMeter{}
	var url string
	m.proxy, url = pgtest.NewProxy(c.t, c.db)
	r := c.replicaOn(url)
	r.store.ObserveWrites(func(time.Duration, error) { m.commits.Add(1) })
	return r, m
}

// trivialTurn runs one wait-mode turn (one model call, one text reply, no
// tools) on r and returns what it cost m's replica, from the request to the
// answer. The log packer's round (off the turn's path, 100 ms after its
// end) is left out: it runs before the next measurement starts.
func (c *cluster) trivialTurn(r *replica, m *costMeter, sid string) turnCost {
	c.t.Helper()
	trips, commits := m.proxy.RoundTrips(), m.commits.Load()
	turn, err := r.eng.StartTurn(c.ctx, forge.DefaultTenant, sid, msg("hi"))
	if err != nil {
		c.t.Fatal(err)
	}
	if got := c.wait(r, sid, turn.ID); got.Status != forge.TurnDone || got.Output == nil || got.Output.Text != "ok" {
		c.t.Fatalf("turn %+v", got)
	}
	cost := turnCost{m.proxy.RoundTrips() - trips, m.commits.Load() - commits}
	time.Sleep(300 * time.Millisecond) // the packer's round
	return cost
}

// TestDistributedTrivialTurnCost: a trivial turn in distributed mode
// (PostgreSQL store, Redis bus, leases) on the replica that ran the
// session's previous turn costs at most 3 PostgreSQL round trips and 2
// commits (the turn's creation and its terminal write): the session and
// agent rows come from the store's row cache, the reply's first rows ride
// in the terminal write, nothing is read back to answer. Issue 22: before,
// 7 round trips and 3 commits on one replica.
func TestDistributedTrivialTurnCost(t *testing.T) {
	c := newCluster(t, time.Minute)
	a, am := c.meteredReplica()
	sess := c.setup(a)
	for range 3 { // warm: statements prepared on the pool's connections
		c.trivialTurn(a, am, sess.ID)
	}
	var worst turnCost
	for i := range 5 {
		got := c.trivialTurn(a, am, sess.ID)
		t.Logf("turn %d: %d round trips, %d commits", i, got.trips, got.commits)
		worst.trips, worst.commits = max(worst.trips, got.trips), max(worst.commits, got.commits)
	}
	if worst.trips > 3 || worst.commits > 2 {
		t.Errorf("a trivial turn cost up to %d round trips and %d commits, want at most 3 and 2", worst.trips, worst.commits)
	}
}
