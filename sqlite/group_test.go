package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/forge-runtime/forge"
)

// Group commit semantics, white-box: the writer is held busy so that the
// calls queue behind it and are written as one group.

func openT(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "forge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// hold occupies the writer until release is called.
func hold(t *testing.T, s *Store) (release func()) {
	t.Helper()
	entered, rel := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.write(context.Background(), func(*tx) error {
			close(entered)
			<-rel
			return nil
		})
	}()
	<-entered
	return sync.OnceFunc(func() { close(rel) })
}

// queue starts fns concurrently behind a held writer, waits until they
// are all queued, releases the writer and returns their errors. It runs in
// a synctest bubble.
func queue(t *testing.T, s *Store, fns ...func() error) []error {
	t.Helper()
	release := hold(t, s)
	defer release()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	synctest.Wait() // they are parked on the queue
	release()
	wg.Wait()
	return errs
}

type turnFixture struct {
	s    *Store
	ses  *forge.Session
	turn *forge.Turn
}

// running makes a session with a running turn and reserved seqs 1-1000
// (the turn.created event took seq 1).
func running(t *testing.T, s *Store) *turnFixture {
	t.Helper()
	ctx := context.Background()
	ses := &forge.Session{ID: s.ids.New(forge.PrefixSession), Tenant: "acme", Agent: "a", MainThreadID: "thr_1"}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveSeqs(ctx, ses.Tenant, ses.ID, 1000); err != nil {
		t.Fatal(err)
	}
	turn := &forge.Turn{ID: s.ids.New(forge.PrefixTurn), Tenant: ses.Tenant, SessionID: ses.ID, AgentID: "ag_1", AgentVersion: 1}
	ev := forge.Event{Seq: 1, ID: turn.ID, Type: forge.EventTurnCreated, TurnID: &turn.ID, Data: []byte(`{}`)}
	if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, Events: []forge.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	return &turnFixture{s: s, ses: ses, turn: turn}
}

// reply commits an assistant message with one part and an event at seq.
func (f *turnFixture) reply(seq int64, text string) (*forge.Message, func() error) {
	m := &forge.Message{ID: f.s.ids.New(forge.PrefixMessage), ThreadID: "thr_1", Role: forge.RoleAssistant}
	p := &forge.Part{ID: f.s.ids.New(forge.PrefixPart), MessageID: m.ID, Type: forge.PartText, Text: text, State: forge.StateCompleted}
	b := &forge.Batch{Tenant: f.ses.Tenant, SessionID: f.ses.ID, TurnID: f.turn.ID,
		Messages: []*forge.Message{m}, Parts: []*forge.Part{p},
		Events: []forge.Event{{Seq: seq, ID: p.ID, Type: forge.EventModelMessage, TurnID: &f.turn.ID, Data: []byte(`{}`)}}}
	return m, func() error { return f.s.Commit(context.Background(), b) }
}

func (f *turnFixture) end(seq int64) func() error {
	t := *f.turn
	t.Status = forge.TurnDone
	b := &forge.Batch{Tenant: f.ses.Tenant, SessionID: f.ses.ID, TurnID: f.turn.ID, Turn: &t,
		Events: []forge.Event{{Seq: seq, ID: t.ID, Type: forge.EventTurnDone, TurnID: &t.ID, Data: []byte(`{}`)}}}
	return func() error { return f.s.Commit(context.Background(), b) }
}

// messages returns the ids of the turn's messages.
func (f *turnFixture) messages(t *testing.T) map[string]bool {
	t.Helper()
	ms, err := f.s.TurnMessages(context.Background(), f.ses.Tenant, f.turn.ID)
	if err != nil && !errors.Is(err, forge.ErrNotFound) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range ms {
		out[m.ID] = true
	}
	return out
}

func (f *turnFixture) seqs(t *testing.T) []int64 {
	t.Helper()
	evs, err := f.s.ListEvents(context.Background(), f.ses.Tenant, forge.EventQuery{SessionID: f.ses.ID})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

// TestGroupCommitFailuresWriteNothing queues, in one group, commits that
// land, commits fenced by a terminal write queued just before them, and
// commits that fail after writing rows (a reused seq).
func TestGroupCommitFailuresWriteNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		const sessions = 12
		fs := make([]*turnFixture, sessions)
		for i := range fs {
			fs[i] = running(t, s)
		}
		commitsBefore := s.w.commits.Load()
		type want struct {
			f   *turnFixture
			msg *forge.Message
			err error
		}
		var (
			fns   []func() error
			wants []want
		)
		add := func(w want, fn func() error) {
			wants = append(wants, w)
			fns = append(fns, fn)
		}
		for i, f := range fs {
			m, ok := f.reply(2, fmt.Sprint("landed ", i))
			add(want{f: f, msg: m}, ok)
			switch i % 3 {
			case 0: // two terminal writes: the first queued wins
				add(want{f: f}, f.end(3))
				m, late := f.reply(4, "late")
				add(want{f: f, msg: m, err: forge.ErrTurnEnded}, late)
				add(want{f: f, err: forge.ErrTurnEnded}, f.end(5))
			case 1: // fails after its rows: seq 1 is taken
				m, dup := f.reply(1, "duplicate")
				add(want{f: f, msg: m, err: forge.ErrConflict}, dup)
			}
		}
		// Calls queued from separate goroutines run in any order, so queue
		// them in dependency order from one goroutine through the writer's
		// queue instead: each waits until the previous one is queued.
		errs := queueOrdered(t, s, fns)
		commits := s.w.commits.Load() - commitsBefore
		if commits > 3 {
			t.Errorf("%d calls took %d transactions; want them grouped", len(fns), commits)
		}
		for i, w := range wants {
			if !errors.Is(errs[i], w.err) || (w.err == nil) != (errs[i] == nil) {
				t.Errorf("call %d: got %v, want %v", i, errs[i], w.err)
			}
			if w.msg != nil && w.f.messages(t)[w.msg.ID] != (w.err == nil) {
				t.Errorf("call %d (%v): message stored = %v", i, w.err, !(w.err == nil))
			}
		}
		for i, f := range fs {
			want := []int64{1, 2}
			if i%3 == 0 {
				want = []int64{1, 2, 3}
			}
			if got := f.seqs(t); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("session %d: stored seqs %v, want %v", i, got, want)
			}
			turn, err := s.GetTurn(context.Background(), f.ses.Tenant, f.ses.ID, f.turn.ID)
			if err != nil {
				t.Fatal(err)
			}
			if turn.LastSeq != want[len(want)-1] {
				t.Errorf("session %d: LastSeq %d, want %d", i, turn.LastSeq, want[len(want)-1])
			}
		}
	})
}

// queueOrdered queues fns behind a held writer in order: each call is
// queued only once the previous one is parked on the queue, so the group
// runs them in this order. It runs in a synctest bubble.
func queueOrdered(t *testing.T, s *Store, fns []func() error) []error {
	t.Helper()
	release := hold(t, s)
	defer release()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
		synctest.Wait() // parked before the next is queued
	}
	release()
	wg.Wait()
	return errs
}

// TestGroupCommitSalvage: a call that loses the group's transaction (here
// by ending it itself) fails alone; the calls of its group still land.
func TestGroupCommitSalvage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		f := running(t, s)
		var fns []func() error
		var msgs []*forge.Message
		for i := range 6 {
			m, fn := f.reply(int64(2+i), fmt.Sprint("reply ", i))
			msgs = append(msgs, m)
			fns = append(fns, fn)
			if i == 2 {
				fns = append(fns, func() error {
					return s.write(context.Background(), func(x *tx) error {
						if _, err := x.exec(`ROLLBACK`); err != nil {
							return err
						}
						return errors.New("lost the transaction")
					})
				})
			}
		}
		errs := queueOrdered(t, s, fns)
		for i, err := range errs {
			if (i == 3) != (err != nil) {
				t.Errorf("call %d: %v", i, err)
			}
		}
		stored := f.messages(t)
		for i, m := range msgs {
			if !stored[m.ID] {
				t.Errorf("message %d was not stored", i)
			}
		}
	})
}

// TestGroupCommitPanic: a panicking call panics in its caller and fails
// alone.
func TestGroupCommitPanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		f := running(t, s)
		m1, ok1 := f.reply(2, "before")
		m2, ok2 := f.reply(3, "after")
		var recovered any
		errs := queueOrdered(t, s, []func() error{ok1, func() error {
			defer func() { recovered = recover() }()
			return s.write(context.Background(), func(x *tx) error {
				_, _ = x.exec(`UPDATE sessions SET title = 'panicked'`)
				panic("boom")
			})
		}, ok2})
		if recovered != "boom" {
			t.Errorf("caller recovered %v, want boom", recovered)
		}
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("calls beside the panic: %v", errs)
		}
		if stored := f.messages(t); !stored[m1.ID] || !stored[m2.ID] {
			t.Errorf("messages stored: %v", stored)
		}
		ses, err := s.GetSession(context.Background(), f.ses.Tenant, f.ses.ID)
		if err != nil || ses.Title == "panicked" {
			t.Errorf("the panicking call's write landed: %v %+v", err, ses)
		}
	})
}

// TestQueuedCallAbandoned: a call whose context ends while it is queued
// returns the context's error and is never run.
func TestQueuedCallAbandoned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		f := running(t, s)
		release := hold(t, s)
		defer release()
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan struct{}, 1)
		done := make(chan error)
		go func() {
			done <- s.write(ctx, func(*tx) error { ran <- struct{}{}; return nil })
		}()
		synctest.Wait() // the call is parked on the writer's queue
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned call: %v", err)
		}
		release()
		if _, ok := f.reply(2, "next"); ok() != nil {
			t.Fatal("the writer is stuck")
		}
		select {
		case <-ran:
			t.Fatal("the abandoned call ran")
		default:
		}
	})
}

// TestCloseWithQueuedCalls: Close waits for the group being written; calls
// still queued fail, and later calls fail at once.
func TestCloseWithQueuedCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		f := running(t, s)
		release := hold(t, s)
		_, write := f.reply(2, "queued")
		errc := make(chan error)
		go func() { errc <- write() }()
		synctest.Wait() // the write is parked on the queue
		closed := make(chan error)
		go func() { closed <- s.Close(context.Background()) }()
		synctest.Wait() // Close waits for the held group
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v while a write was running", err)
		default:
		}
		release()
		err := <-errc
		if err != nil && !errors.Is(err, errClosed) {
			t.Fatalf("queued call at Close: %v", err)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if _, write := f.reply(3, "late"); !errors.Is(write(), errClosed) {
			t.Fatal("a write after Close did not fail with errClosed")
		}
	})
}
