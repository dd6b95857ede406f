// Package pgtest gives tests a PostgreSQL database of their own.
//
// Tests read a superuser URL from FORGE_TEST_POSTGRES_URL. Unset, they are
// skipped, unless FORGE_TEST_REQUIRE_SERVICES=1, which makes them fail.
// Each NewDatabase is a fresh database (CREATE DATABASE, about 50 ms),
// dropped when the test ends, so tests run in parallel.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env names the variables pgtest reads.
const (
	EnvURL     = "FORGE_TEST_POSTGRES_URL"
	EnvRequire = "FORGE_TEST_REQUIRE_SERVICES"
)

// URL returns the superuser URL, or skips (fails, with
// FORGE_TEST_REQUIRE_SERVICES=1) when there is none.
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("%s is not set and %s=1: start PostgreSQL and export a superuser URL", EnvURL, EnvRequire)
		}
		tb.Skipf("%s is not set: PostgreSQL tests skipped (set it to a superuser URL, e.g. postgres://postgres@127.0.0.1:5432/postgres)", EnvURL)
	}
	return u
}

// NewDatabase creates an empty database and returns its superuser URL. The
// database is dropped when tb ends (after cleanups registered later, such
// as closing a store on it).
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	admin := URL(tb)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "forge_test_" + hex.EncodeToString(b)
	Exec(tb, admin, "CREATE DATABASE "+name)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Errorf("drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop %s: %v", name, err)
		}
	})
	return WithDatabase(tb, admin, name)
}

// WithDatabase returns rawURL naming database db instead.
func WithDatabase(tb testing.TB, rawURL, db string) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatalf("%s: %v", EnvURL, err)
	}
	u.Path = "/" + db
	return u.String()
}

// WithUser returns rawURL logging in as user (no password: the test
// server trusts local connections).
func WithUser(tb testing.TB, rawURL, user string) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatalf("%s: %v", EnvURL, err)
	}
	u.User = url.User(user)
	return u.String()
}

// WithParam returns rawURL with the query parameter name set to value.
func WithParam(tb testing.TB, rawURL, name, value string) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatalf("%s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Exec runs sql on a connection of its own to rawURL.
func Exec(tb testing.TB, rawURL, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}
