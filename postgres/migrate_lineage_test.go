package postgres_test

import (
	"context"
	"testing"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/storetest"
)

// TestMigrationTurnLineage: migration 0006 gives the turns of an existing
// database their lineage and depth, so that their branches list as
// before: a database whose turns were written without them (the columns
// dropped, the migration unrecorded) is migrated again on open, and every
// branch of a forked session, a broken chain's included, reads back.
func TestMigrationTurnLineage(t *testing.T) {
	url := pgtest.NewDatabase(t)
	t.Parallel()
	s := open(t, url, testOpts)
	fk := storetest.WriteForks(t, s, "acme")
	// A broken chain: a turn whose previous turn is gone reads as a root.
	broken := storetest.WriteForks(t, s, "globex")
	orphan := broken.Turns["G"]
	broken.Branches[orphan] = broken.Branches[orphan][2:]
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP INDEX forge.messages_summary`,
		`ALTER TABLE forge.turns DROP COLUMN lineage, DROP COLUMN depth`,
		`DELETE FROM forge.schema_migrations WHERE version = 6`,
	} {
		pgtest.Exec(t, url, q)
	}
	pgtest.Exec(t, url, `UPDATE forge.turns SET previous_turn_id = 'turn_gone' WHERE id = $1`, orphan)

	s = open(t, url, testOpts)
	fk.Check(t, s)
	broken.Check(t, s)
}
