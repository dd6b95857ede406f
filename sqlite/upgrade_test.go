package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/forge-runtime/forge"
)

// TestUpgradeFromSchemaV3 opens a database written by Forge before the
// shared migration mechanism (schema version 3, testdata/schema-v3.db,
// made by that version's sqlite.Open and store calls): the new binary
// applies only what is missing, and everything stored before reads back.
func TestUpgradeFromSchemaV3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, err := os.ReadFile("testdata/schema-v3.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "forge.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	before := appliedMigrations(t, path)
	if len(before) != 3 {
		t.Fatalf("fixture has migrations %v, want 3", before)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ses, err := s.GetSession(ctx, "acme", "ses_01JNJ7Y9Z8V3K4M5N6P7Q8R9S0")
	if err != nil {
		t.Fatal(err)
	}
	if ses.Title != "order 42" || ses.Usage.InputTokens != 12 || *ses.TipTurnID != "turn_01JNJ7Y9Z8V3K4M5N6P7Q8R9S5" {
		t.Fatalf("session after upgrade: %+v", ses)
	}
	ms, err := s.TurnMessages(ctx, "acme", "turn_01JNJ7Y9Z8V3K4M5N6P7Q8R9S2")
	if err != nil || len(ms) != 1 || ms[0].Parts[0].Text != "Where is order 42?" {
		t.Fatalf("messages after upgrade: %v, %v", ms, err)
	}
	running, err := s.RunningTurns(ctx)
	if err != nil || len(running) != 1 || running[0].IdempotencyKey != "idem-1" {
		t.Fatalf("running turns after upgrade: %v, %v", running, err)
	}
	if _, err := s.GetIdempotency(ctx, "acme", "POST /v1/sessions/x/turns", "idem-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAgent(ctx, "acme", "support"); err != nil {
		t.Fatal(err)
	}
	// The new migration's table works.
	k, secret, err := s.CreateKey(ctx, "acme", "after upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.KeyByHash(ctx, forge.HashAPIKey(secret)); err != nil || got.ID != k.ID {
		t.Fatalf("KeyByHash: %v, %v", got, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	after := appliedMigrations(t, path)
	ms2, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(ms2) || !reflect.DeepEqual(after[:3], before) {
		t.Fatalf("schema_migrations after upgrade: %v (before %v)", after, before)
	}
}

// appliedMigrations reads schema_migrations as "version name applied_at".
func appliedMigrations(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT version || ' ' || name || ' ' || applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}
