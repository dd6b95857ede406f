package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/tools"
)

// BenchmarkStoragePerTurn measures what a turn leaves on disk: the engine
// runs wait-mode turns on scripted models, 100 to a session, then the
// store is closed (its log packed), the WAL checkpointed, and the
// benchmark reports the database's size per turn (B/turn) and, for the
// largest tables and indexes, their pages per turn (dbstat). A trivial
// turn echoes a short message; a tool turn calls the echo tool, then
// answers.
//
//	go test -run '^$' -bench StoragePerTurn -benchtime 2000x ./sqlite/
func BenchmarkStoragePerTurn(b *testing.B) {
	for _, kind := range []string{"trivial", "tool"} {
		b.Run(kind, func(b *testing.B) { benchStorage(b, kind) })
	}
}

// turnRunner runs turns through the engine on a fresh store.
type turnRunner struct {
	s     *Store
	eng   *engine.Engine
	ses   *forge.Session
	agent string
	n     int
}

func newTurnRunner(tb testing.TB, path, kind string, perSession int) *turnRunner {
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		tb.Fatal(err)
	}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	eng := engine.New(engine.Config{Store: s, Models: models, Tools: tools.Builtins(), Bus: bus.New(0, 0),
		Logger: slog.New(slog.DiscardHandler)})
	a := &forge.Agent{Tenant: forge.DefaultTenant, Name: "echo", Model: "scripted/echo", Instructions: "be brief", IterationLimit: 8}
	if kind == "tool" {
		// Turn k of a session plays steps 2k (a call of echo) and 2k+1.
		var steps []scripted.Step
		for range perSession {
			steps = append(steps, scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "echo", Arguments: []byte(`{"message":"ping"}`)}}},
				scripted.Step{Text: "the tool said pong"})
		}
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
		a.ModelParams.Script = scripted.Script(steps...)
	}
	if err := s.CreateAgent(ctx, a); err != nil {
		tb.Fatal(err)
	}
	return &turnRunner{s: s, eng: eng, agent: a.Name}
}

func (r *turnRunner) turn(tb testing.TB, perSession int) {
	ctx := context.Background()
	if r.ses == nil || r.n%perSession == 0 {
		r.ses = &forge.Session{Tenant: forge.DefaultTenant, Agent: r.agent}
		if err := r.s.CreateSession(ctx, r.ses); err != nil {
			tb.Fatal(err)
		}
	}
	r.n++
	t, err := r.eng.StartTurn(ctx, forge.DefaultTenant, r.ses.ID, engine.TurnRequest{Input: []forge.Input{{Type: forge.InputMessage, Text: "ping"}}})
	if err != nil {
		tb.Fatal(err)
	}
	if t, err := r.eng.WaitTurn(ctx, forge.DefaultTenant, r.ses.ID, t.ID); err != nil || t.Status != forge.TurnDone {
		if err == nil && t.Error != nil {
			err = fmt.Errorf("%s: %s", t.Error.Code, t.Error.Message)
		}
		tb.Fatalf("turn %d ended %v: %v", r.n, t, err)
	}
}

func (r *turnRunner) close(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.eng.Close(ctx)
	if err := r.s.Close(ctx); err != nil {
		tb.Fatal(err)
	}
}

func benchStorage(b *testing.B, kind string) {
	path := filepath.Join(b.TempDir(), "forge.db")
	const perSession = 100
	r := newTurnRunner(b, path, kind, perSession)
	n := 0
	for b.Loop() {
		r.turn(b, perSession)
		n++
	}
	b.StopTimer()
	r.close(b)
	size, tables := diskUse(b, path)
	b.ReportMetric(float64(size)/float64(n), "B/turn")
	type table struct {
		name  string
		bytes int64
	}
	var ts []table
	for name, bytes := range tables {
		ts = append(ts, table{name, bytes})
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].bytes > ts[j].bytes })
	for _, t := range ts[:min(len(ts), 8)] {
		b.ReportMetric(float64(t.bytes)/float64(n), t.name+"-B/turn")
	}
}

// diskUse checkpoints the database at path and returns the size of its
// files and the bytes of each table and index (dbstat).
func diskUse(tb testing.TB, path string) (int64, map[string]int64) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		tb.Fatal(err)
	}
	var size int64
	for _, p := range []string{path, path + "-wal"} {
		if st, err := os.Stat(p); err == nil {
			size += st.Size()
		}
	}
	rows, err := db.Query(`SELECT name, sum(pgsize) FROM dbstat GROUP BY name`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var bytes int64
		if err := rows.Scan(&name, &bytes); err != nil {
			tb.Fatal(err)
		}
		out[name] = bytes
	}
	return size, out
}

// BenchmarkListEvents measures the read of a replay: a page of 1000 stored
// events (about 110 trivial turns of one session), and one turn's log.
//
//	go test -run '^$' -bench ListEvents ./sqlite/
func BenchmarkListEvents(b *testing.B) {
	path := filepath.Join(b.TempDir(), "forge.db")
	r := newTurnRunner(b, path, "trivial", 1000)
	for range 120 {
		r.turn(b, 1000)
	}
	ctx := context.Background()
	if f, ok := any(r.s).(interface{ FlushEventLog(context.Context) error }); ok {
		if err := f.FlushEventLog(ctx); err != nil {
			b.Fatal(err)
		}
	}
	defer r.close(b)
	evs, err := r.s.ListEvents(ctx, forge.DefaultTenant, forge.EventQuery{SessionID: r.ses.ID, Limit: 1000})
	if err != nil || len(evs) != 1000 {
		b.Fatalf("%d events, %v", len(evs), err)
	}
	turn := *evs[500].TurnID
	for _, c := range []struct {
		name string
		q    forge.EventQuery
		want int
		cold bool
	}{
		{"page=1000", forge.EventQuery{SessionID: r.ses.ID, Limit: 1000}, 1000, false},
		{"turn", forge.EventQuery{SessionID: r.ses.ID, TurnID: turn}, 0, false},
		{"page=1000/cold", forge.EventQuery{SessionID: r.ses.ID, Limit: 1000}, 1000, true},
		{"turn/cold", forge.EventQuery{SessionID: r.ses.ID, TurnID: turn}, 0, true},
	} {
		if c.cold && forgetDictionaries == nil {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if c.cold {
					forgetDictionaries(r.s)
				}
				evs, err := r.s.ListEvents(ctx, forge.DefaultTenant, c.q)
				if err != nil || c.want > 0 && len(evs) != c.want {
					b.Fatalf("%d events, %v", len(evs), err)
				}
			}
		})
	}
}

// forgetDictionaries, when set, empties a store's cache of row
// dictionaries (the cold reads of BenchmarkListEvents).
var forgetDictionaries func(*Store)
