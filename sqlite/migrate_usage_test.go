package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestMigrationSessionUsageBackfill: migration 0002 starts each existing
// session's usage total at the sum of its ended turns (running turns are
// added by their terminal write), per tenant.
func TestMigrationSessionUsageBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Version != 1 {
		t.Fatalf("first migration is %s", ms[0].Name)
	}
	now := func() time.Time { return time.Unix(1, 0) }
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,
		name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	if err := applyMigration(ctx, db, ms[0], now); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	session := func(tenant, id string) {
		exec(`INSERT INTO sessions (tenant, id, kind, agent, title, main_thread_id, created_at, updated_at)
			VALUES (?, ?, 'direct', 'a', '', 'thr_1', 1, 1)`, tenant, id)
	}
	turn := func(tenant, session, id, status, usage string) {
		exec(`INSERT INTO turns (tenant, id, session_id, agent_id, agent_version, status, usage, iterations,
			last_seq, created_at) VALUES (?, ?, ?, 'ag_1', 1, ?, ?, 1, 0, 1)`, tenant, id, session, status, usage)
	}
	session("acme", "ses_1")
	turn("acme", "ses_1", "turn_1", forge.TurnDone,
		`{"input_tokens":100,"output_tokens":20,"reasoning_tokens":5,"cache_read_tokens":50,"cache_write_tokens":7,"cost":0.25}`)
	turn("acme", "ses_1", "turn_2", forge.TurnCancelled, `{"input_tokens":10,"output_tokens":2,"cost":0.125}`)
	turn("acme", "ses_1", "turn_3", forge.TurnRunning, `{"input_tokens":1000,"output_tokens":1000,"cost":1}`)
	session("acme", "ses_2")
	session("globex", "ses_1")
	turn("globex", "ses_1", "turn_1", forge.TurnErrored, `{"input_tokens":3,"output_tokens":0,"cost":0}`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	for _, c := range []struct {
		tenant, id string
		want       forge.Usage
	}{
		{"acme", "ses_1", forge.Usage{InputTokens: 110, OutputTokens: 22, ReasoningTokens: 5, CacheReadTokens: 50,
			CacheWriteTokens: 7, Cost: 0.375}},
		{"acme", "ses_2", forge.Usage{}},
		{"globex", "ses_1", forge.Usage{InputTokens: 3}},
	} {
		ses, err := s.GetSession(ctx, c.tenant, c.id)
		if err != nil {
			t.Fatal(err)
		}
		got := ses.Usage
		if math.Abs(got.Cost-c.want.Cost) > 1e-12 {
			t.Errorf("%s/%s cost = %v, want %v", c.tenant, c.id, got.Cost, c.want.Cost)
		}
		got.Cost, c.want.Cost = 0, 0
		if got != c.want {
			t.Errorf("%s/%s usage = %+v, want %+v", c.tenant, c.id, got, c.want)
		}
	}

	// The running turn's terminal write adds its usage on top.
	end := &forge.Turn{ID: "turn_3", Status: forge.TurnDone, Usage: forge.Usage{InputTokens: 1000, Cost: 1}}
	if err := s.Commit(ctx, &forge.Batch{Tenant: "acme", SessionID: "ses_1", TurnID: "turn_3", Turn: end}); err != nil {
		t.Fatal(err)
	}
	ses, err := s.GetSession(ctx, "acme", "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ses.Usage.InputTokens, ses.Usage.Cost); got != "1110 1.375" {
		t.Errorf("usage after the running turn ended: %+v", ses.Usage)
	}
}
