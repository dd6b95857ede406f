package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/forge-runtime/forge/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations returns the embedded migrations ordered by version.
func migrations() ([]migrate.Migration, error) {
	ms, err := migrate.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ms, nil
}

// migrate applies the migrations db has not recorded yet (internal/migrate),
// each in its own transaction together with its schema_migrations row, so
// a crash leaves either all of a migration or none of it. The table is the
// one Forge has always used, so databases made by earlier versions upgrade
// in place.
func migrateDB(ctx context.Context, db *sql.DB, now func() time.Time) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := migrate.Up(ctx, &target{db: db, now: now}, ms); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// target is a SQLite database as internal/migrate sees it.
type target struct {
	db  *sql.DB
	now func() time.Time
}

func (t *target) Applied(ctx context.Context) ([]int, error) {
	if _, err := t.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	rows, err := t.db.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (t *target) Apply(ctx context.Context, m migrate.Migration) error {
	return applyMigration(ctx, t.db, m, t.now)
}

// foreignKeysOff is the first line of a migration that rebuilds a table
// other tables reference: SQLite's procedure for that runs with foreign
// keys off (the pragma is a no-op inside a transaction) and checks them
// before the commit.
const foreignKeysOff = "-- forge:foreign-keys-off"

// applyMigration runs m in one (immediate) transaction with its
// schema_migrations row, unless m is recorded already.
func applyMigration(ctx context.Context, db *sql.DB, m migrate.Migration, now func() time.Time) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if strings.HasPrefix(m.SQL, foreignKeysOff) {
		if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
			return err
		}
		defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`) }()
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// Checked inside the transaction, which holds the write lock: nobody
	// can apply it between the check and the write.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	if strings.HasPrefix(m.SQL, foreignKeysOff) {
		var bad int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_foreign_key_check`).Scan(&bad); err != nil {
			return err
		}
		if bad > 0 {
			return fmt.Errorf("migration %d leaves %d foreign key violations", m.Version, bad)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, now().UnixNano()); err != nil {
		return err
	}
	return tx.Commit()
}
