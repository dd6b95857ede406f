package postgres_test

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge/postgres/pgtest"
)

// TestPurgeAndPackerWaitForEachOther: purge_session and the event log
// packer's event_log_swap of one deleted session, in two transactions at
// once, in either order: each waits for the other, the purge deletes the
// whole session (what the swap wrote included) and the swap fails nothing.
// Before, a swap committed while a purge ran failed the purge's delete of
// the session on the event_log foreign key (SQLSTATE 23503, seen in CI).
func TestPurgeAndPackerWaitForEachOther(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewDatabase(t)
	s := open(t, admin, testOpts)
	for _, c := range []struct {
		tenant    string
		swapFirst bool
	}{{"acme", false}, {"globex", true}} {
		ses := seed(t, s, c.tenant, false)
		if err := s.DeleteSession(ctx, c.tenant, ses.ID); err != nil {
			t.Fatal(err)
		}
		// The pool is small (testOpts): each case gives its connections
		// back before the next seeds its rows (and a failed one when the
		// test ends, before the store closes).
		var release []func()
		t.Cleanup(func() {
			for _, r := range release {
				r()
			}
		})
		begin := func() pgx.Tx {
			t.Helper()
			conn, err := s.Pool().Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				conn.Release()
				t.Fatal(err)
			}
			release = append(release, sync.OnceFunc(func() { _ = tx.Rollback(ctx); conn.Release() }))
			if _, err := tx.Exec(ctx, `SELECT set_config('forge.tenant', $1, true)`, c.tenant); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		purge := func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, `SELECT done FROM purge_session($1, 100000)`, ses.ID).Scan(&done); err != nil {
				return err
			}
			if !done {
				t.Errorf("%s: the purge did not finish in one call", c.tenant)
			}
			return nil
		}
		swap := func(tx pgx.Tx) error {
			// A pack of a turn's events (as the packer writes one), with
			// no waiting packs to replace.
			_, err := tx.Exec(ctx, `SELECT event_log_swap($1, 'turn_packed', '{}', '{900}', '{900}', ARRAY['\x00'::bytea])`, ses.ID)
			return err
		}
		first, second := purge, swap
		if c.swapFirst {
			first, second = swap, purge
		}
		txFirst, txSecond := begin(), begin()
		if err := first(txFirst); err != nil {
			t.Fatalf("%s: first: %v", c.tenant, err)
		}
		done := make(chan error, 1)
		go func() {
			err := second(txSecond)
			if err == nil {
				err = txSecond.Commit(ctx)
			}
			done <- err
		}()
		if err := txFirst.Commit(ctx); err != nil {
			t.Fatalf("%s: first commit: %v", c.tenant, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: second (%s): %v", c.tenant, map[bool]string{true: "purge", false: "swap"}[c.swapFirst], err)
		}
		check := begin()
		for _, table := range []string{"sessions", "event_log", "turns", "messages"} {
			col := "session_id"
			if table == "sessions" {
				col = "id"
			}
			if n := count(t, check, `SELECT count(*) FROM forge.`+table+` WHERE `+col+` = $1`, ses.ID); n != 0 {
				t.Errorf("%s: %d %s rows of the purged session left", c.tenant, n, table)
			}
		}
		for _, r := range release {
			r()
		}
	}
}
