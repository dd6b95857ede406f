// Package migrate is the one schema-migration mechanism of Forge's stores:
// numbered SQL files embedded in each store (NNNN_description.sql, one
// directory per SQL dialect) applied in order, each in its own transaction
// together with its row in the store's schema_migrations table.
//
// The package knows the file format, the order and the rules (no gaps in
// what is applied, never run against a schema newer than the binary); each
// store supplies a Target that runs one migration the way its database
// needs (SQLite's single writer, PostgreSQL's owner role and advisory lock).
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string // the file name, e.g. 0001_init.sql
	SQL     string
}

// Load reads the migrations in dir of fsys, ordered by version. Every .sql
// file must be named NNNN_description.sql with a positive, unique NNNN.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var out []Migration
	seen := map[int]string{}
	for _, name := range names {
		base := path.Base(name)
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || rest == ".sql" {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", base)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, base, v)
		}
		seen[v] = base
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: base, SQL: string(body)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Latest is the version a database has once every migration is applied.
func Latest(ms []Migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Target is a database being migrated.
type Target interface {
	// Applied returns the versions recorded in its schema_migrations table
	// (creating the table when it is missing).
	Applied(ctx context.Context) ([]int, error)
	// Apply runs m and records it, in one transaction, unless m is already
	// recorded (someone else applied it meanwhile): then it does nothing.
	Apply(ctx context.Context, m Migration) error
}

// ErrTooNew is wrapped by Up's error when the database was migrated by a
// newer binary: this one could misread what it holds.
var ErrTooNew = fmt.Errorf("database schema is newer than this binary")

// Up applies the migrations t has not recorded, oldest first, and returns
// the versions it applied.
func Up(ctx context.Context, t Target, ms []Migration) ([]int, error) {
	pending, err := Pending(ctx, t, ms)
	if err != nil {
		return nil, err
	}
	var done []int
	for _, m := range pending {
		if err := t.Apply(ctx, m); err != nil {
			return done, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// Pending returns the migrations t has not recorded, oldest first. It fails
// when t records a version this binary does not know.
func Pending(ctx context.Context, t Target, ms []Migration) ([]Migration, error) {
	applied, err := t.Applied(ctx)
	if err != nil {
		return nil, err
	}
	known := map[int]bool{}
	for _, m := range ms {
		known[m.Version] = true
	}
	have := map[int]bool{}
	for _, v := range applied {
		if !known[v] {
			if v > Latest(ms) {
				return nil, fmt.Errorf("%w: it has version %d, this binary knows up to %d", ErrTooNew, v, Latest(ms))
			}
			return nil, fmt.Errorf("database records migration %d, which this binary does not have", v)
		}
		have[v] = true
	}
	var out []Migration
	for _, m := range ms {
		if !have[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}
