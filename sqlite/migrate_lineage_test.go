package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/forge-runtime/forge/storetest"
)

// TestMigrationTurnLineage: migration 0010 gives the turns of an existing
// database their lineage and depth, so that their branches list as
// before: a database whose turns were written without them (the columns
// dropped, the migration unrecorded) is migrated again on open, and every
// branch of a forked session, a broken chain's included, reads back.
func TestMigrationTurnLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	fk := storetest.WriteForks(t, s, "acme")
	// A broken chain: a turn whose previous turn is gone reads as a root.
	broken := storetest.WriteForks(t, s, "acme")
	orphan := broken.Turns["G"]
	broken.Branches[orphan] = broken.Branches[orphan][2:]
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP INDEX messages_summary`,
		`ALTER TABLE turns DROP COLUMN lineage`,
		`ALTER TABLE turns DROP COLUMN depth`,
		`DELETE FROM schema_migrations WHERE version = 10`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE turns SET previous_turn_id = 'turn_gone' WHERE id = ?`, orphan); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	fk.Check(t, s)
	broken.Check(t, s)
}
