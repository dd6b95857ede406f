package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestMigrationTurnSnapshot: migration 0007 moves each turn's snapshot from
// the snapshots table into the turn's row; GetSnapshot reads them there, and
// a turn without one still has none.
func TestMigrationTurnSnapshot(t *testing.T) {
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
	now := func() time.Time { return time.Unix(1, 0) }
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,
		name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= 7 {
			break
		}
		if err := applyMigration(ctx, db, m, now); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO sessions (tenant, id, kind, agent, title, main_thread_id, created_at, updated_at)
		VALUES ('acme', 'ses_1', 'direct', 'a', '', 'thr_1', 1, 1)`)
	for _, id := range []string{"turn_1", "turn_2"} {
		exec(`INSERT INTO turns (tenant, id, session_id, agent_id, agent_version, status, usage, iterations,
			last_seq, created_at) VALUES ('acme', ?, 'ses_1', 'ag_1', 1, 'done', '{}', 1, 0, 1)`, id)
	}
	exec(`INSERT INTO snapshots (tenant, turn_id, session_id, body) VALUES ('acme', 'turn_1', 'ses_1', ?)`,
		`{"turn_id":"turn_1","threads":{"thr_1":{"id":"thr_1","parent_id":null,"agent":"a","state":"finished"}},"context_tokens":42}`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	snap, err := s.GetSnapshot(ctx, "acme", "turn_1")
	if err != nil || snap.TurnID != "turn_1" || snap.ContextTokens != 42 || snap.Threads["thr_1"].State != forge.ThreadFinished {
		t.Fatalf("snapshot of turn_1 after the migration: %+v %v", snap, err)
	}
	if _, err := s.GetSnapshot(ctx, "acme", "turn_2"); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("turn_2 has no snapshot: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "other", "turn_1"); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("another tenant's snapshot: %v", err)
	}
}
