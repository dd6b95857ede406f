package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/tools"
)

// callCounter counts the store calls the engine makes, by method.
type callCounter struct {
	forge.Store
	mu    sync.Mutex
	calls map[string]int
}

func (c *callCounter) count(name string) {
	c.mu.Lock()
	c.calls[name]++
	c.mu.Unlock()
}

func (c *callCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *callCounter) GetAgent(ctx context.Context, tenant, name string) (*forge.Agent, error) {
	c.count("GetAgent")
	return c.Store.GetAgent(ctx, tenant, name)
}

func (c *callCounter) GetAgentVersion(ctx context.Context, tenant, id string, v int) (*forge.Agent, error) {
	c.count("GetAgentVersion")
	return c.Store.GetAgentVersion(ctx, tenant, id, v)
}

func (c *callCounter) GetSession(ctx context.Context, tenant, id string) (*forge.Session, error) {
	c.count("GetSession")
	return c.Store.GetSession(ctx, tenant, id)
}

func (c *callCounter) ReserveSeqs(ctx context.Context, tenant, sid string, n int64) (int64, error) {
	c.count("ReserveSeqs")
	return c.Store.ReserveSeqs(ctx, tenant, sid, n)
}

func (c *callCounter) BeginTurn(ctx context.Context, b *forge.BeginTurn) error {
	c.count("BeginTurn")
	return c.Store.BeginTurn(ctx, b)
}

func (c *callCounter) Commit(ctx context.Context, b *forge.Batch) error {
	c.count("Commit")
	return c.Store.Commit(ctx, b)
}

func (c *callCounter) GetTurn(ctx context.Context, tenant, sid, tid string) (*forge.Turn, error) {
	c.count("GetTurn")
	return c.Store.GetTurn(ctx, tenant, sid, tid)
}

func (c *callCounter) GetSnapshot(ctx context.Context, tenant, tid string) (*forge.Snapshot, error) {
	c.count("GetSnapshot")
	return c.Store.GetSnapshot(ctx, tenant, tid)
}

func (c *callCounter) ListMessages(ctx context.Context, tenant string, q forge.MessageQuery) ([]*forge.Message, string, error) {
	c.count("ListMessages")
	return c.Store.ListMessages(ctx, tenant, q)
}

func (c *callCounter) TurnMessages(ctx context.Context, tenant, tid string) ([]*forge.Message, error) {
	c.count("TurnMessages")
	return c.Store.TurnMessages(ctx, tenant, tid)
}

func (c *callCounter) LatestCompaction(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.CompactionBoundary, error) {
	c.count("LatestCompaction")
	return c.Store.LatestCompaction(ctx, tenant, q)
}

func (c *callCounter) TurnHistory(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.TurnHistory, error) {
	c.count("TurnHistory")
	return c.Store.TurnHistory(ctx, tenant, q)
}

func (c *callCounter) ListEvents(ctx context.Context, tenant string, q forge.EventQuery) ([]forge.Event, error) {
	c.count("ListEvents")
	return c.Store.ListEvents(ctx, tenant, q)
}

// BenchmarkTrivialTurn runs one-reply turns (scripted/echo) through the
// engine on the PostgreSQL store, in sessions of 10 turns, and reports the
// store's network round trips and calls per turn: on a single node, and
// with turn leases (distributed mode: the lease rides in the same round
// trips; its renewals are per replica, not per turn).
func BenchmarkTrivialTurn(b *testing.B) {
	for _, leases := range []bool{false, true} {
		b.Run(fmt.Sprintf("leases=%v", leases), func(b *testing.B) { benchTrivialTurn(b, leases) })
	}
}

func benchTrivialTurn(b *testing.B, leases bool) {
	url := pgtest.NewDatabase(b)
	rt := &roundTrips{}
	st, err := postgres.Open(context.Background(), url, postgres.WithDial(postgres.Options{}, rt.dial))
	if err != nil {
		b.Fatal(err)
	}
	counter := &callCounter{Store: st, calls: map[string]int{}}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	cfg := engine.Config{Store: counter, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: slog.New(slog.DiscardHandler)}
	if leases {
		cfg.Leases = st
	}
	eng := engine.New(cfg)
	b.Cleanup(func() {
		_ = eng.Close(context.Background())
		_ = st.Close(context.Background())
	})
	const tenant = forge.DefaultTenant
	agent := &forge.Agent{Tenant: tenant, Name: "a", Model: "scripted/echo"}
	if err := agent.Normalize(nil); err != nil {
		b.Fatal(err)
	}
	if err := st.CreateAgent(ctx, agent); err != nil {
		b.Fatal(err)
	}
	ids := forge.NewULIDGen(nil)
	var (
		ses          *forge.Session
		trips        int64
		before       map[string]int
		calls        = map[string]int{}
		turns        int
		sessionsMade int
	)
	runTurn := func() {
		before = counter.snapshot()
		start := rt.n.Load()
		turn, err := eng.StartTurn(ctx, tenant, ses.ID, engine.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}})
		if err != nil {
			b.Fatal(err)
		}
		if t, err := eng.WaitTurn(ctx, tenant, ses.ID, turn.ID); err != nil || t.Status != forge.TurnDone {
			b.Fatalf("%v %+v", err, t)
		}
		trips += rt.n.Load() - start
		for k, v := range counter.snapshot() {
			calls[k] += v - before[k]
		}
		turns++
	}
	newSession := func() {
		ses = &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Agent: "a", MainThreadID: ids.New(forge.PrefixThread)}
		if err := st.CreateSession(ctx, ses); err != nil {
			b.Fatal(err)
		}
		sessionsMade++
	}
	// Warm the statement caches of the pool's connections.
	newSession()
	for range 3 {
		runTurn()
	}
	trips, turns, calls = 0, 0, map[string]int{}
	i := 0
	b.ResetTimer()
	for b.Loop() {
		if i%10 == 0 {
			b.StopTimer()
			newSession()
			b.StartTimer()
		}
		i++
		runTurn()
	}
	b.ReportMetric(float64(trips)/float64(turns), "roundtrips/turn")
	var names []string
	total := 0
	for k, v := range calls {
		names = append(names, fmt.Sprintf("%s=%.2f", k, float64(v)/float64(turns)))
		total += v
	}
	sort.Strings(names)
	b.ReportMetric(float64(total)/float64(turns), "storecalls/turn")
	b.Logf("store calls per turn: %s", strings.Join(names, " "))
}
