package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestMigrationIdempotencyExpiry: records written before migration 0004
// keep binding their key for the 24 h they were kept, and match any
// request (they have no request hash).
func TestMigrationIdempotencyExpiry(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,
		name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Unix(1, 0) }
	for _, m := range ms {
		if m.Version >= 4 {
			break
		}
		if err := applyMigration(ctx, db, m, now); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if _, err := db.ExecContext(ctx, `INSERT INTO idempotency (tenant, scope, key, status, body, created_at)
		VALUES ('acme', 'cancel:ses_1', 'k', 409, x'7b7d', ?)`, created.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	rec, err := s.GetIdempotency(ctx, "acme", "cancel:ses_1", "k")
	if err != nil {
		t.Fatal(err)
	}
	if rec.RequestHash != "" || rec.Status != 409 || !rec.CreatedAt.Equal(created) || !rec.ExpiresAt.Equal(created.Add(24*time.Hour)) {
		t.Fatalf("migrated record %+v", rec)
	}
}
