package server

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

// Store is what a server needs of a database: the store, its API keys and
// its files.
type Store interface {
	forge.Store
	forge.KeyStore
	forge.FileStore
	forge.WebhookStore
	forge.RetentionStore
}

// DefaultDB is the database a Config without one opens.
const DefaultDB = "./forge.db"

// IsPostgres reports whether db names a PostgreSQL database.
func IsPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// OpenStore opens the database db names, migrating it if needed: a
// postgres:// URL opens PostgreSQL, anything else is a SQLite file.
func OpenStore(ctx context.Context, db string) (Store, error) {
	if IsPostgres(db) {
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

// DisplayDB is a database name safe to log: a URL's password is hidden.
func DisplayDB(db string) string {
	if !IsPostgres(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
