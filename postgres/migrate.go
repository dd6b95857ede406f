package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

func migrations() ([]migrate.Migration, error) {
	ms, err := migrate.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return ms, nil
}

// target is a PostgreSQL database as internal/migrate sees it. Migrations
// run as the owner role, on the connection that holds the migration lock.
type target struct {
	conn     *pgx.Conn
	roles    roles
	readOnly bool // only read what is applied (a runtime role)
}

func (t *target) Applied(ctx context.Context) ([]int, error) {
	if !t.readOnly {
		_, err := t.conn.Exec(ctx, `SET ROLE `+t.roles.owner+`;
			CREATE TABLE IF NOT EXISTS `+schema+`.schema_migrations (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL
			);
			RESET ROLE`)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	rows, err := t.conn.Query(ctx, `SELECT version FROM `+schema+`.schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read the applied migrations: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

func (t *target) Apply(ctx context.Context, m migrate.Migration) error {
	tx, err := t.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var done bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+schema+`.schema_migrations WHERE version = $1)`,
		m.Version).Scan(&done); err != nil {
		return err
	}
	if done {
		return nil
	}
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+t.roles.owner+`; SET LOCAL search_path = `+schema); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, t.roles.expand(m.SQL)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.schema_migrations (version, name, applied_at) VALUES ($1, $2, now())`,
		m.Version, m.Name); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
