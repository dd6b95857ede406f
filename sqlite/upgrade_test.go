package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestUpgradeFromSchemaV3 opens a database written by Forge before the
// shared migration mechanism (schema version 3, testdata/schema-v3.db,
// made by that version's sqlite.Open and store calls): the new binary
// applies only what is missing, and everything stored before reads back.
func TestUpgradeFromSchemaV3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, err := os.ReadFile("testdata/schema-v3.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "forge.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	before := appliedMigrations(t, path)
	if len(before) != 3 {
		t.Fatalf("fixture has migrations %v, want 3", before)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ses, err := s.GetSession(ctx, "acme", "ses_01JNJ7Y9Z8V3K4M5N6P7Q8R9S0")
	if err != nil {
		t.Fatal(err)
	}
	if ses.Title != "order 42" || ses.Usage.InputTokens != 12 || *ses.TipTurnID != "turn_01JNJ7Y9Z8V3K4M5N6P7Q8R9S5" {
		t.Fatalf("session after upgrade: %+v", ses)
	}
	ms, err := s.TurnMessages(ctx, "acme", "turn_01JNJ7Y9Z8V3K4M5N6P7Q8R9S2")
	if err != nil || len(ms) != 1 || ms[0].Parts[0].Text != "Where is order 42?" {
		t.Fatalf("messages after upgrade: %v, %v", ms, err)
	}
	running, err := s.RunningTurns(ctx)
	if err != nil || len(running) != 1 || running[0].IdempotencyKey != "idem-1" {
		t.Fatalf("running turns after upgrade: %v, %v", running, err)
	}
	if _, err := s.GetIdempotency(ctx, "acme", "POST /v1/sessions/x/turns", "idem-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAgent(ctx, "acme", "support"); err != nil {
		t.Fatal(err)
	}
	// The new migration's table works.
	k, secret, err := s.CreateKey(ctx, "acme", "after upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.KeyByHash(ctx, forge.HashAPIKey(secret)); err != nil || got.ID != k.ID {
		t.Fatalf("KeyByHash: %v, %v", got, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	after := appliedMigrations(t, path)
	ms2, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(ms2) || !reflect.DeepEqual(after[:3], before) {
		t.Fatalf("schema_migrations after upgrade: %v (before %v)", after, before)
	}
}

// appliedMigrations reads schema_migrations as "version name applied_at".
func appliedMigrations(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT version || ' ' || name || ' ' || applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestUpgradeFromSchemaV7 opens a database written by the store of schema
// version 7, whose log held one row per event with a copy of its row
// (testdata/schema-v7.db: a session with an ended turn and a running one,
// its streaming part checkpointed; testdata/schema-v7.events.jsonl: that
// version's ListEvents of it, as clients got it). The old rows read back
// byte for byte, alone and beside new ones; the running turn ends under
// the new code, its old and new events in one log, packed.
func TestUpgradeFromSchemaV7(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, err := os.ReadFile("testdata/schema-v7.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "forge.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	want := readWire(t, "testdata/schema-v7.events.jsonl")
	const (
		tenant  = "acme"
		session = "ses_01KV7AAAAAAAAAAAAAAAAAAAAA"
		ended   = "turn_01KV7AAAAAAAAAAAAAAAAAAAAC"
		running = "turn_01KV7AAAAAAAAAAAAAAAAAAAAM"
	)
	s, err := openStore(ctx, path, func(s *Store) { s.noPacker = true })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	list := func(q forge.EventQuery) []string {
		t.Helper()
		q.SessionID = session
		evs, err := s.ListEvents(ctx, tenant, q)
		if err != nil {
			t.Fatal(err)
		}
		return wireOf(t, evs)
	}
	if got := list(forge.EventQuery{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("old log after the upgrade:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		if got := list(forge.EventQuery{After: int64(i), Limit: 2}); !reflect.DeepEqual(got, want[i:min(len(want), i+2)]) {
			t.Fatalf("old log after %d: %v", i, got)
		}
	}
	old := map[string][]string{}
	for _, w := range want {
		var e forge.Event
		if err := json.Unmarshal([]byte(w), &e); err != nil {
			t.Fatal(err)
		}
		old[*e.TurnID] = append(old[*e.TurnID], w)
	}
	if got := list(forge.EventQuery{TurnID: ended}); !reflect.DeepEqual(got, old[ended]) {
		t.Fatalf("old turn's log: %v", got)
	}
	snap, err := s.GetSnapshot(ctx, tenant, ended)
	if err != nil || snap.TurnID != ended || snap.ContextTokens != 34 {
		t.Fatalf("old snapshot: %+v, %v", snap, err)
	}
	ms, err := s.TurnMessages(ctx, tenant, ended)
	if err != nil || len(ms) != 2 || ms[1].Parts[0].Text != "Order 42 shipped." || ms[1].Parts[0].TurnID != ended {
		t.Fatalf("old messages: %v, %v", ms, err)
	}

	// The running turn ends under the new code: recovery closes its part.
	turns, err := s.RunningTurns(ctx)
	if err != nil || len(turns) != 1 || turns[0].ID != running {
		t.Fatalf("running turns: %v, %v", turns, err)
	}
	rt := turns[0]
	ms, err = s.TurnMessages(ctx, tenant, running)
	if err != nil || len(ms) != 2 {
		t.Fatalf("running turn's messages: %v, %v", ms, err)
	}
	part := ms[1].Parts[0]
	if part.Text != "Order 42 " || part.State != forge.StateStreaming {
		t.Fatalf("checkpointed part: %+v", part)
	}
	hi, err := s.ReserveSeqs(ctx, tenant, session, 2)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	part.State, part.UpdatedAt = forge.StateInterrupted, at
	rt.Status, rt.CancelReason, rt.EndedAt, rt.LastSeq = forge.TurnCancelled, ptr(forge.CancelAbandoned), &at, hi
	pd, _ := json.Marshal(part)
	td, _ := json.Marshal(rt)
	thr := "thr_01KV7AAAAAAAAAAAAAAAAAAAAB"
	closing := []forge.Event{
		{Seq: hi - 1, ID: part.ID, Type: forge.EventModelMessage, SessionID: session, TurnID: ptr(running), ThreadID: &thr, CreatedAt: at, Data: pd},
		{Seq: hi, ID: running, Type: forge.EventTurnDone, SessionID: session, TurnID: ptr(running), CreatedAt: at, Data: td},
	}
	if err := s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: session, TurnID: running, Turn: rt,
		Parts: []*forge.Part{part}, Events: closing}); err != nil {
		t.Fatal(err)
	}
	all := append(append([]string{}, want...), wireOf(t, closing)...)
	check := func(what string) {
		t.Helper()
		if got := list(forge.EventQuery{}); !reflect.DeepEqual(got, all) {
			t.Fatalf("%s: log\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(all, "\n"))
		}
		if got, w := list(forge.EventQuery{TurnID: running}), append(old[running], wireOf(t, closing)...); !reflect.DeepEqual(got, w) {
			t.Fatalf("%s: running turn's log\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(w, "\n"))
		}
		for i := range all {
			var e forge.Event
			if err := json.Unmarshal([]byte(all[i]), &e); err != nil {
				t.Fatal(err)
			}
			if got := list(forge.EventQuery{After: e.Seq - 1, Limit: 3}); !reflect.DeepEqual(got, all[i:min(len(all), i+3)]) {
				t.Fatalf("%s: log after %d: %v", what, e.Seq-1, got)
			}
		}
	}
	check("after the end")
	if err := s.FlushEventLog(ctx); err != nil {
		t.Fatal(err)
	}
	var open int
	if err := s.r.db.QueryRowContext(ctx, `SELECT count(*) FROM event_log WHERE turn_id IS NOT NULL`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("packs waiting after the flush: %d, %v", open, err)
	}
	check("packed")
}

func readWire(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func wireOf(t *testing.T, evs []forge.Event) []string {
	t.Helper()
	out := make([]string, len(evs))
	for i, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
