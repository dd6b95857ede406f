package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/storetest"
)

func open(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) forge.Store {
			return open(t, filepath.Join(t.TempDir(), "forge.db"))
		},
		Reopen: func(t *testing.T, s forge.Store) forge.Store {
			path := s.(*sqlite.Store).Path()
			if err := s.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, path)
		},
	})
}

func TestSecondOpenIsLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "forge.db")
	s := open(t, path)
	_, err := sqlite.Open(context.Background(), path)
	if !errors.Is(err, forge.ErrLocked) {
		t.Fatalf("second Open: got %v, want ErrLocked", err)
	}
	// Closing releases ownership.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	open(t, path)
}

func TestDataSurvivesCloseAndOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	s := open(t, path)
	ses := &forge.Session{ID: "ses_1", Tenant: forge.DefaultTenant, Agent: "a", MainThreadID: "thr_1"}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveSeqs(ctx, forge.DefaultTenant, "ses_1", 41); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	got, err := s.GetSession(ctx, forge.DefaultTenant, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != forge.KindDirect || got.MainThreadID != "thr_1" {
		t.Fatalf("session after reopen: %+v", got)
	}
	if n, err := s.ReserveSeqs(ctx, forge.DefaultTenant, "ses_1", 1); err != nil || n != 42 {
		t.Fatalf("ReserveSeqs after reopen = %d, %v; want 42", n, err)
	}
}

// TestKilledOwnerReleasesTheFile runs an owner in another process, checks
// that it excludes us, kills it with SIGKILL and checks that its commits
// survived and the file can be owned again.
//
// It does not run in parallel: until the child execs, it holds a copy of
// every descriptor of this process, lock files included, so a parallel test
// that closes and reopens its database would find its own lock still held.
func TestKilledOwnerReleasesTheFile(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerProcess$")
	cmd.Env = append(os.Environ(), "FORGE_SQLITE_OWNER="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := false
	for sc := bufio.NewScanner(out); !ready && sc.Scan(); {
		ready = sc.Text() == "ready"
	}
	if !ready {
		t.Fatal("owner process did not get ready")
	}
	if _, err := sqlite.Open(ctx, path); !errors.Is(err, forge.ErrLocked) {
		t.Fatalf("Open while another process owns the file: got %v, want ErrLocked", err)
	}
	// The same file through a symlink and a hard link.
	links := t.TempDir()
	if err := os.Symlink(path, filepath.Join(links, "sym.db")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path, filepath.Join(links, "hard.db")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sym.db", "hard.db"} {
		if _, err := sqlite.Open(ctx, filepath.Join(links, p)); !errors.Is(err, forge.ErrLocked) {
			t.Fatalf("Open(%s) while another process owns the file: got %v, want ErrLocked", p, err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s := open(t, path)
	if _, err := s.GetSession(ctx, forge.DefaultTenant, "ses_owned"); err != nil {
		t.Fatalf("session committed before the kill: %v", err)
	}
	if n, err := s.ReserveSeqs(ctx, forge.DefaultTenant, "ses_owned", 1); err != nil || n != 6 {
		t.Fatalf("ReserveSeqs after the kill = %d, %v; want 6", n, err)
	}
}

// TestOwnerProcess is the owner TestKilledOwnerReleasesTheFile kills.
func TestOwnerProcess(t *testing.T) {
	path := os.Getenv("FORGE_SQLITE_OWNER")
	if path == "" {
		t.Skip("helper process for TestKilledOwnerReleasesTheFile")
	}
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, &forge.Session{ID: "ses_owned", Tenant: forge.DefaultTenant, Agent: "a", MainThreadID: "thr_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveSeqs(ctx, forge.DefaultTenant, "ses_owned", 5); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute) // until killed
}

// benchFixture is a session with a running turn, ready for commits.
type benchFixture struct {
	s    *sqlite.Store
	ids  *forge.ULIDGen
	ses  *forge.Session
	seq  int64
	turn *forge.Turn
}

func newBench(b *testing.B) *benchFixture {
	s := open(b, filepath.Join(b.TempDir(), "forge.db"))
	f := &benchFixture{s: s, ids: forge.NewULIDGen(nil)}
	f.ses = &forge.Session{ID: f.ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Agent: "a",
		MainThreadID: f.ids.New(forge.PrefixThread)}
	if err := s.CreateSession(context.Background(), f.ses); err != nil {
		b.Fatal(err)
	}
	// One reservation covers the run, as the engine's sequencer reserves
	// ranges rather than single seqs.
	if _, err := s.ReserveSeqs(context.Background(), f.ses.Tenant, f.ses.ID, 1<<40); err != nil {
		b.Fatal(err)
	}
	return f
}

// begin starts a turn the way the engine does: one user message with a
// text part, turn.created and message.created.
func (f *benchFixture) begin(b *testing.B) {
	ctx := context.Background()
	var prev *string
	if f.turn != nil {
		prev = &f.turn.ID
	}
	now := time.Now().UTC()
	t := &forge.Turn{ID: f.ids.New(forge.PrefixTurn), Tenant: f.ses.Tenant, SessionID: f.ses.ID, PreviousTurnID: prev,
		AgentID: "ag_1", AgentVersion: 1, Status: forge.TurnRunning,
		Input: []forge.Input{{Type: forge.InputMessage, Text: "hello"}}, CreatedAt: now}
	m := &forge.Message{ID: f.ids.New(forge.PrefixMessage), ThreadID: f.ses.MainThreadID, Role: forge.RoleUser, CreatedAt: now}
	m.Parts = []*forge.Part{{ID: f.ids.New(forge.PrefixPart), MessageID: m.ID, Type: forge.PartText, Text: "hello",
		State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
	f.seq += 2
	evs := []forge.Event{
		{Seq: f.seq - 1, ID: t.ID, Type: forge.EventTurnCreated, SessionID: f.ses.ID, TurnID: &t.ID, CreatedAt: now, Data: []byte(`{}`)},
		{Seq: f.seq, ID: m.ID, Type: forge.EventMessageCreated, SessionID: f.ses.ID, TurnID: &t.ID, CreatedAt: now, Data: []byte(`{}`)},
	}
	if err := f.s.BeginTurn(ctx, &forge.BeginTurn{Turn: t, Messages: []*forge.Message{m}, Events: evs}); err != nil {
		b.Fatal(err)
	}
	f.turn = t
}

func (f *benchFixture) end(b *testing.B) {
	f.turn.Status = forge.TurnDone
	now := time.Now().UTC()
	f.turn.EndedAt = &now
	f.seq++
	err := f.s.Commit(context.Background(), &forge.Batch{Tenant: f.ses.Tenant, SessionID: f.ses.ID, TurnID: f.turn.ID,
		Turn: f.turn, Events: []forge.Event{{Seq: f.seq, ID: f.turn.ID, Type: forge.EventTurnDone, SessionID: f.ses.ID,
			TurnID: &f.turn.ID, CreatedAt: now, Data: []byte(`{"status":"done"}`)}}})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCommit measures a typical mid-turn batch: an assistant envelope,
// one text part rewritten whole and its event.
func BenchmarkCommit(b *testing.B) {
	f := newBench(b)
	f.begin(b)
	ctx := context.Background()
	msg := &forge.Message{ID: f.ids.New(forge.PrefixMessage), ThreadID: f.ses.MainThreadID, Role: forge.RoleAssistant,
		Model: "openai/gpt-4.1-mini", CreatedAt: time.Now().UTC()}
	text := "The order shipped yesterday and should arrive on Monday."
	b.ResetTimer()
	for i := range b.N {
		now := time.Now().UTC()
		p := &forge.Part{ID: f.ids.New(forge.PrefixPart), MessageID: msg.ID, Type: forge.PartText, Text: text,
			State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}
		f.seq++
		err := f.s.Commit(ctx, &forge.Batch{Tenant: f.ses.Tenant, SessionID: f.ses.ID, TurnID: f.turn.ID,
			Messages: []*forge.Message{msg}, Parts: []*forge.Part{p},
			Events: []forge.Event{{Seq: f.seq, ID: p.ID, Type: forge.EventModelMessage, SessionID: f.ses.ID,
				TurnID: &f.turn.ID, CreatedAt: now, Data: fmt.Appendf(nil, `{"id":%q,"text":%q}`, p.ID, text)}}})
		if err != nil {
			b.Fatalf("Commit %d: %v", i, err)
		}
	}
}

// BenchmarkBeginTurn measures starting a turn (the previous one is ended
// outside the timer).
func BenchmarkBeginTurn(b *testing.B) {
	f := newBench(b)
	b.ResetTimer()
	for range b.N {
		if f.turn != nil {
			b.StopTimer()
			f.end(b)
			b.StartTimer()
		}
		f.begin(b)
	}
}

// TestOneOwnerWhateverThePath: a symlink and a hard link name the same file,
// so a second Store through either is refused, in this process and in
// another (TestKilledOwnerReleasesTheFile).
func TestOneOwnerWhateverThePath(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "forge.db")
	s := open(t, path)
	links := t.TempDir()
	sym, hard := filepath.Join(links, "sym.db"), filepath.Join(links, "hard.db")
	if err := os.Symlink(path, sym); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path, hard); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, sym, hard, filepath.Join(dir, ".", "forge.db")} {
		if _, err := sqlite.Open(ctx, p); !errors.Is(err, forge.ErrLocked) {
			t.Fatalf("Open(%s) while owned: %v, want ErrLocked", p, err)
		}
	}
	// The refused opens did not disturb the owner.
	if err := s.CreateSession(ctx, &forge.Session{ID: "ses_1", Tenant: forge.DefaultTenant, Agent: "a", MainThreadID: "thr_1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Through the symlink it is the same database, opened at its real path.
	s2 := open(t, sym)
	if s2.Path() != path {
		t.Errorf("Path() = %s, want the resolved %s", s2.Path(), path)
	}
	if _, err := s2.GetSession(ctx, forge.DefaultTenant, "ses_1"); err != nil {
		t.Fatal(err)
	}
	// A dangling symlink is refused rather than followed to a new file.
	dangling := filepath.Join(links, "dangling.db")
	if err := os.Symlink(filepath.Join(dir, "missing.db"), dangling); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(ctx, dangling); err == nil || errors.Is(err, forge.ErrLocked) {
		t.Fatalf("Open of a dangling symlink: %v", err)
	}
}
