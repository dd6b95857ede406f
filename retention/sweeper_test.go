package retention_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/retention"
	"github.com/forge-runtime/forge/sqlite"
)

// aheadClock is the wall clock moved by a fixed offset: the sweeper's
// "later" while the store stamps rows with the real time.
type aheadClock time.Duration

func (c aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c)).UTC() }

type store interface {
	forge.Store
	forge.RetentionStore
}

func seed(t *testing.T, st store, tenant string, ttl time.Duration) (short, kept *forge.Session) {
	t.Helper()
	ctx := context.Background()
	for _, a := range []*forge.Agent{
		{Tenant: tenant, Name: "short", Model: "scripted/echo", Retention: &forge.Retention{SessionTTL: forge.TTL(ttl)}},
		{Tenant: tenant, Name: "kept", Model: "scripted/echo"},
	} {
		if err := st.CreateAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	ids := forge.NewULIDGen(nil)
	mk := func(agent string) *forge.Session {
		now := time.Now().UTC()
		s := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: agent,
			MainThreadID: ids.New(forge.PrefixThread), CreatedAt: now, UpdatedAt: now}
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return mk("short"), mk("kept")
}

// TestSweeperLoopExpiresAndPurges: a started sweeper, on its own interval,
// deletes the session past its agent's TTL, purges it, and leaves the
// session whose agent keeps sessions; Close waits for it.
func TestSweeperLoopExpiresAndPurges(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "forge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	short, kept := seed(t, st, forge.DefaultTenant, time.Hour)
	sw := retention.New(retention.Config{Store: st, Clock: aheadClock(2 * time.Hour), Interval: 20 * time.Millisecond,
		PurgeAfter: -1})
	sw.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		refs, err := st.DeletedSessions(ctx, time.Now().Add(time.Hour), 10)
		if err != nil {
			t.Fatal(err)
		}
		_, gone := st.GetSession(ctx, forge.DefaultTenant, short.ID)
		if errors.Is(gone, forge.ErrNotFound) && len(refs) == 0 {
			break // expired and purged
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper did not expire and purge %s (deleted still listed: %v)", short.ID, refs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := sw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSession(ctx, forge.DefaultTenant, kept.ID); err != nil {
		t.Fatalf("the session without a TTL: %v", err)
	}
}

// TestOneReplicaSweepsAtATime: on PostgreSQL, a sweep while another
// replica holds the sweep's lock is skipped, and runs once it is free.
func TestOneReplicaSweepsAtATime(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	a, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	short, _ := seed(t, a, "acme", time.Hour)
	release, ok, err := a.TryRetentionLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TryRetentionLock: %v %v", ok, err)
	}
	sw := retention.New(retention.Config{Store: b, Clock: aheadClock(2 * time.Hour), PurgeAfter: -1})
	st, err := sw.Sweep(ctx, 0)
	if err != nil || !st.Skipped || st.Expired != 0 {
		t.Fatalf("sweep while another replica sweeps: %+v, %v", st, err)
	}
	release()
	st, err = sw.Sweep(ctx, 0)
	if err != nil || st.Skipped || st.Expired != 1 || st.Purged != 1 {
		t.Fatalf("sweep once the lock is free: %+v, %v", st, err)
	}
	if _, err := a.GetSession(ctx, "acme", short.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("the expired session: %v", err)
	}
}
