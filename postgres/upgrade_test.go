package postgres_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// TestUpgradeKeepsTheOldLog: a database of schema version 4, whose log
// held one row per event (as that version's store wrote it: a session with
// an ended turn and a running one), upgrades; the old rows read back as
// that version read them, alone and beside new ones, and the running turn
// ends under the new code, packed.
func TestUpgradeKeepsTheOldLog(t *testing.T) {
	pgtest.URL(t)
	t.Parallel()
	ctx := context.Background()
	admin := pgtest.NewDatabase(t)
	if err := postgres.MigrateTo(ctx, admin, 4); err != nil {
		t.Fatal(err)
	}
	const (
		tenant  = "acme"
		session = "ses_01KV7AAAAAAAAAAAAAAAAAAAAA"
		ended   = "turn_01KV7AAAAAAAAAAAAAAAAAAAAC"
		running = "turn_01KV7AAAAAAAAAAAAAAAAAAAAM"
		thread  = "thr_01KV7AAAAAAAAAAAAAAAAAAAAB"
	)
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.UTC)
	c, err := pgx.Connect(ctx, pgtest.WithParam(t, admin, "search_path", "forge"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO sessions (tenant, id, kind, agent, title, main_thread_id, seq_reserved, created_at, updated_at)
		VALUES ($1, $2, 'direct', 'support', 'upgrade'::bytea, $3, 1024, $4, $4)`, tenant, session, thread, at)
	var old []forge.Event
	seq := int64(0)
	event := func(turn, typ, id string, th *string, v any) {
		seq++
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		e := forge.Event{Seq: seq, ID: id, Type: typ, SessionID: session, TurnID: ptr(turn), ThreadID: th,
			CreatedAt: at.Add(time.Duration(seq) * time.Millisecond), Data: b}
		exec(`INSERT INTO events (tenant, session_id, seq, id, type, turn_id, thread_id, created_at, data)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, tenant, session, e.Seq, e.ID, e.Type, e.TurnID, e.ThreadID,
			e.CreatedAt, string(e.Data))
		old = append(old, e)
	}
	for i, turn := range []string{ended, running} {
		status := "done"
		if turn == running {
			status = "running"
		}
		exec(`INSERT INTO turns (tenant, id, session_id, agent_id, agent_version, status, input, usage, iterations,
			last_seq, created_at) VALUES ($1, $2, $3, 'ag', 1, $4, '[{"type":"message","text":"hi"}]', '{}', 0, $5, $6)`,
			tenant, turn, session, status, int64(4*i+3), at)
		msg := "msg_01KV7AAAAAAAAAAAAAAAAAAAA" + string(rune('D'+i))
		prt := "prt_01KV7AAAAAAAAAAAAAAAAAAAA" + string(rune('F'+i))
		exec(`INSERT INTO messages (tenant, id, session_id, turn_id, thread_id, role, author, model, finish, summary, created_at)
			VALUES ($1, $2, $3, $4, $5, 'assistant', '', '', '', false, $6)`, tenant, msg, session, turn, thread, at)
		exec(`INSERT INTO parts (tenant, id, message_id, session_id, turn_id, type, text, state, call_id, tool, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, 'text', 'Order 42 '::bytea, 'streaming', '', '', $6, $6)`, tenant, prt, msg, session, turn, at)
		event(turn, forge.EventTurnCreated, turn, nil, map[string]string{"id": turn, "status": "running"})
		event(turn, forge.EventMessageCreated, msg, ptr(thread), map[string]any{"id": msg, "parts": []any{}})
		event(turn, forge.EventModelMessage, prt, ptr(thread), map[string]string{"id": prt, "state": "streaming"})
		if turn == ended {
			event(turn, forge.EventTurnDone, turn, nil, map[string]string{"id": turn, "status": "done"})
		}
	}

	s, err := postgres.Open(ctx, admin, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	list := func(q forge.EventQuery) []forge.Event {
		t.Helper()
		q.SessionID = session
		evs, err := s.ListEvents(ctx, tenant, q)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	same := func(got, want []forge.Event, what string) {
		t.Helper()
		g, w := wire(t, got), wire(t, want)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s:\n%s\nwant\n%s", what, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	}
	same(list(forge.EventQuery{}), old, "old log after the upgrade")
	same(list(forge.EventQuery{TurnID: ended}), old[:4], "old turn")

	// The running turn ends under the new code.
	hi, err := s.ReserveSeqs(ctx, tenant, session, 2)
	if err != nil {
		t.Fatal(err)
	}
	end := at.Add(time.Hour)
	turn, err := s.GetTurn(ctx, tenant, session, running)
	if err != nil {
		t.Fatal(err)
	}
	turn.Status, turn.EndedAt, turn.LastSeq = forge.TurnCancelled, &end, hi
	td, _ := json.Marshal(turn)
	closing := []forge.Event{
		{Seq: hi - 1, ID: "prt_01KV7AAAAAAAAAAAAAAAAAAAAG", Type: forge.EventModelMessage, SessionID: session,
			TurnID: ptr(running), ThreadID: ptr(thread), CreatedAt: end, Data: json.RawMessage(`{"state":"interrupted"}`)},
		{Seq: hi, ID: running, Type: forge.EventTurnDone, SessionID: session, TurnID: ptr(running), CreatedAt: end, Data: td},
	}
	if err := s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: session, TurnID: running, Turn: turn, Events: closing}); err != nil {
		t.Fatal(err)
	}
	all := append(append([]forge.Event{}, old...), closing...)
	check := func(what string) {
		t.Helper()
		same(list(forge.EventQuery{}), all, what+": log")
		same(list(forge.EventQuery{TurnID: running}), append(append([]forge.Event{}, old[4:]...), closing...), what+": running turn")
		for i := range all {
			same(list(forge.EventQuery{After: all[i].Seq - 1, Limit: 2}), all[i:min(len(all), i+2)], what+": page")
		}
	}
	check("ended")
	if err := s.FlushEventLog(ctx); err != nil {
		t.Fatal(err)
	}
	check("packed")
}

func wire(t *testing.T, evs []forge.Event) []string {
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
