package postgres_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// roundTrips counts network round trips on every connection it dials: a
// read that follows a write is the answer to one trip.
type roundTrips struct{ n atomic.Int64 }

func (rt *roundTrips) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, rt: rt}, nil
}

type countingConn struct {
	net.Conn
	rt      *roundTrips
	written atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.written.Store(true)
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.written.Swap(false) {
		c.rt.n.Add(1)
	}
	return c.Conn.Read(p)
}

// TestRoundTripsPerCall: with its statements prepared (the first call on
// a connection prepares them, once), each store call of a turn costs one
// round trip (RunningTurns two when some turn is running).
func TestRoundTripsPerCall(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	rt := &roundTrips{}
	// One connection, so every call after the first finds its statements
	// prepared on it. The packer's round trips are counted apart
	// (FlushEventLog), not among the calls it would run beside.
	s := open(t, url, postgres.WithoutPacker(postgres.WithDial(postgres.Options{MaxConns: 1, MinIdleConns: 1}, rt.dial)))
	ids := forge.NewULIDGen(nil)
	const tenant = "acme"

	measure := func(what string, fn func() error) int64 {
		t.Helper()
		before := rt.n.Load()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return rt.n.Load() - before
	}
	var packing int64
	// turn runs what a trivial turn writes and reads, and returns the
	// round trips of each call.
	turn := func(ses *forge.Session, prev *string) (map[string]int64, string) {
		t.Helper()
		got := map[string]int64{}
		var bound int64
		turnID := ids.New(forge.PrefixTurn)
		user := &forge.Message{ID: ids.New(forge.PrefixMessage), ThreadID: ses.MainThreadID, Role: forge.RoleUser,
			Parts: []*forge.Part{{ID: ids.New(forge.PrefixPart), Type: forge.PartText, Text: "hi", State: forge.StateCompleted}}}
		got["ReserveSeqs"] = measure("ReserveSeqs", func() (err error) {
			bound, err = s.ReserveSeqs(ctx, tenant, ses.ID, 16)
			return err
		})
		ev := func(i int64, typ string) forge.Event {
			return forge.Event{Seq: bound - 16 + i, ID: ids.New(forge.PrefixPart), Type: typ, SessionID: ses.ID,
				TurnID: &turnID, Data: []byte(`{}`)}
		}
		got["GetSession"] = measure("GetSession", func() error { _, err := s.GetSession(ctx, tenant, ses.ID); return err })
		got["SessionWithTip"] = measure("SessionWithTip", func() error {
			_, _, err := s.SessionWithTip(ctx, tenant, ses.ID)
			return err
		})
		got["GetAgent"] = measure("GetAgent", func() error { _, err := s.GetAgent(ctx, tenant, "support"); return err })
		got["BeginTurn"] = measure("BeginTurn", func() error {
			return s.BeginTurn(ctx, &forge.BeginTurn{
				Turn:     &forge.Turn{ID: turnID, Tenant: tenant, SessionID: ses.ID, PreviousTurnID: prev, AgentID: "ag", AgentVersion: 1},
				Messages: []*forge.Message{user}, ExpectTip: ses.TipTurnID,
				Events: []forge.Event{ev(1, forge.EventTurnCreated), ev(2, forge.EventMessageCreated)},
				// Seqs claimed in the same batch (forge.SeqClaim).
				Claim: &forge.SeqClaim{Above: bound, Through: bound + 16},
			})
		})
		if prev != nil {
			got["ListMessages"] = measure("ListMessages", func() error {
				_, _, err := s.ListMessages(ctx, tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: turnID})
				return err
			})
			got["LatestCompaction"] = measure("LatestCompaction", func() error {
				_, err := s.LatestCompaction(ctx, tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: turnID})
				return err
			})
			// The three reads of a turn beginning from a history it has
			// not cached, together.
			got["TurnHistory"] = measure("TurnHistory", func() error {
				_, err := s.TurnHistory(ctx, tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: *prev, ListOptions: forge.ListOptions{Limit: 200}})
				return err
			})
		}
		reply := &forge.Message{ID: ids.New(forge.PrefixMessage), ThreadID: ses.MainThreadID, Role: forge.RoleAssistant}
		part := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: reply.ID, Type: forge.PartText, State: forge.StateStreaming}
		got["Commit (step)"] = measure("Commit", func() error {
			return s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: ses.ID, TurnID: turnID,
				Messages: []*forge.Message{reply}, Parts: []*forge.Part{part},
				Events: []forge.Event{ev(3, forge.EventMessageCreated), ev(4, forge.EventModelMessage)}})
		})
		part.Text, part.State = "hello", forge.StateCompleted
		reply.Finish = forge.FinishStop
		got["Commit (terminal)"] = measure("Commit", func() error {
			return s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: ses.ID, TurnID: turnID,
				Turn:     &forge.Turn{Status: forge.TurnDone, Usage: forge.Usage{InputTokens: 3, OutputTokens: 1}, LastSeq: bound - 16 + 6},
				Messages: []*forge.Message{reply}, Parts: []*forge.Part{part}, Snapshot: &forge.Snapshot{},
				Events: []forge.Event{ev(5, forge.EventModelMessage), ev(6, forge.EventTurnDone)}})
		})
		got["GetTurn"] = measure("GetTurn", func() error { _, err := s.GetTurn(ctx, tenant, ses.ID, turnID); return err })
		got["ListEvents"] = measure("ListEvents", func() error {
			_, err := s.ListEvents(ctx, tenant, forge.EventQuery{SessionID: ses.ID, TurnID: turnID})
			return err
		})
		got["RunningTurns"] = measure("RunningTurns", func() error {
			_, err := s.RunningTurns(ctx)
			return err
		})
		// Packing the ended turn's log: the sweep for waiting turns, the
		// read of its packs and rows, the swap; the same for many turns.
		packing = measure("FlushEventLog", func() error { return s.FlushEventLog(ctx) })
		return got, turnID
	}

	if err := s.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: "support", Model: "openai/x"}); err != nil {
		t.Fatal(err)
	}
	ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Agent: "support", MainThreadID: "thr_main"}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	// Warm up: the first turns prepare every statement on the connection.
	_, first := turn(ses, nil)
	ses.TipTurnID = &first
	_, second := turn(ses, &first)
	ses.TipTurnID = &second
	got, _ := turn(ses, &second)

	var total int64
	for what, n := range got {
		total += n
		// RunningTurns finds no running turn here, so it does not need its
		// second trip.
		// One, at most: a loaded machine can let the counter miss one (an
		// answer read together with the previous one's), never add one.
		if n > 1 {
			t.Errorf("%s: %d round trips, want 1", what, n)
		}
	}
	// Three trips, at most: a loaded machine can let the counter see two
	// (a write that lands while the previous answer is still being read
	// counts with it), never more.
	if packing < 1 || packing > 3 {
		t.Errorf("packing a turn's log: %d round trips, want 3 at most", packing)
	}
	t.Logf("round trips per call, prepared: %v (total %d), packing the log %d", fmt.Sprint(got), total, packing)
}

// TestPoolDefaults: defaults apply unless the URL or Options say otherwise.
func TestPoolDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := postgres.PoolConfig("postgres://u@h/db", postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConns != postgres.DefaultMaxConns || cfg.MinIdleConns != postgres.DefaultMinIdleConns ||
		cfg.MaxConnLifetime != postgres.DefaultMaxConnLifetime || cfg.MaxConnIdleTime != postgres.DefaultMaxConnIdleTime ||
		cfg.ConnConfig.RuntimeParams["search_path"] != "forge" {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = postgres.PoolConfig("postgres://u@h/db?pool_max_conns=3&pool_max_conn_idle_time=1m", postgres.Options{})
	if err != nil || cfg.MaxConns != 3 || cfg.MaxConnIdleTime.Minutes() != 1 || cfg.MaxConnLifetime != postgres.DefaultMaxConnLifetime {
		t.Fatalf("URL settings: %+v, %v", cfg, err)
	}
	cfg, err = postgres.PoolConfig("postgres://u@h/db?pool_max_conns=3", postgres.Options{MaxConns: 7})
	if err != nil || cfg.MaxConns != 7 {
		t.Fatalf("Options over URL: %+v, %v", cfg, err)
	}
	for _, bad := range []string{"", "./forge.db", "mysql://u@h/db", "postgres://u:s3cret@h:notaport/db"} {
		_, err := postgres.PoolConfig(bad, postgres.Options{})
		if err == nil {
			t.Errorf("PoolConfig(%q) accepted it", bad)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("PoolConfig error shows the password: %v", err)
		}
	}
}
