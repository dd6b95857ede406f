package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/sqlite"
)

// store is what the CLI needs of a database: the store and its API keys.
type store interface {
	forge.Store
	forge.KeyStore
}

// defaultDB is the --db of every command that opens the database.
const defaultDB = "./forge.db"

const dbFlagHelp = "database: a SQLite file, or a postgres:// URL"

// isPostgres reports whether a --db value names a PostgreSQL database.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openStore opens the database --db names, migrating it if needed: a
// postgres:// URL opens PostgreSQL, anything else is a SQLite file.
func openStore(ctx context.Context, db string) (store, error) {
	if isPostgres(db) {
		s, err := postgres.Open(ctx, db, postgres.Options{})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		if errors.Is(err, forge.ErrLocked) {
			return nil, fmt.Errorf("%s is in use by a running forge serve (one process owns a SQLite file): %w", db, err)
		}
		return nil, err
	}
	return s, nil
}

// displayDB is a --db value safe to log: a URL's password is hidden.
func displayDB(db string) string {
	if !isPostgres(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
