package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/eventlog"
	"github.com/forge-runtime/forge/sqlite"
)

// faultStore is a real SQLite store whose Commit and ReserveSeqs fail while
// failCommits / failReserves are above zero (each failure counts one down).
type faultStore struct {
	*sqlite.Store
	failCommits  atomic.Int64
	failReserves atomic.Int64
	reserves     atomic.Int64
}

var errInjected = errors.New("injected: disk I/O error")

func (f *faultStore) Commit(ctx context.Context, b *forge.Batch) error {
	if f.failCommits.Add(-1) >= 0 {
		return errInjected
	}
	return f.Store.Commit(ctx, b)
}

func (f *faultStore) ReserveSeqs(ctx context.Context, tenant, sid string, n int64) (int64, error) {
	if f.failReserves.Add(-1) >= 0 {
		return 0, errInjected
	}
	f.reserves.Add(1)
	return f.Store.ReserveSeqs(ctx, tenant, sid, n)
}

type fixture struct {
	t     *testing.T
	ctx   context.Context
	store *faultStore
	bus   *bus.Bus
	log   *eventlog.Log
	sess  *forge.Session
	ids   forge.IDGen
	// sleeps records the waits between retries (nothing sleeps for real).
	mu     sync.Mutex
	sleeps []time.Duration
}

func newFixture(t *testing.T, cfg eventlog.Config, busOpts bus.Options) *fixture {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, t.TempDir()+"/forge.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	f := &fixture{t: t, ctx: ctx, store: &faultStore{Store: st}, bus: bus.NewWithOptions(busOpts), ids: forge.NewULIDGen(nil)}
	f.log = f.newLog(cfg)
	now := time.Now().UTC()
	f.sess = &forge.Session{ID: f.ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect,
		Agent: "a", MainThreadID: f.ids.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) newLog(cfg eventlog.Config) *eventlog.Log {
	cfg.Store, cfg.Bus = f.store, f.bus
	if cfg.Sleep == nil {
		cfg.Sleep = func(_ context.Context, d time.Duration) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.sleeps = append(f.sleeps, d)
			return nil
		}
	}
	return eventlog.New(cfg)
}

// turn is a running turn the fixture writes for.
type turn struct {
	*forge.Turn
	msg  *forge.Message
	text *forge.Part
}

// begin creates a turn with turn.created.
func (f *fixture) begin() *turn {
	f.t.Helper()
	t := &forge.Turn{ID: f.ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: f.sess.ID, AgentID: "ag",
		AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: time.Now().UTC()}
	if _, err := f.log.Begin(f.ctx, forge.DefaultTenant, &forge.BeginTurn{Turn: t},
		eventlog.Draft{Type: forge.EventTurnCreated, ID: t.ID, TurnID: t.ID, Data: t}); err != nil {
		f.t.Fatal(err)
	}
	return &turn{Turn: t}
}

func (f *fixture) batch(t *turn) *forge.Batch {
	return &forge.Batch{Tenant: forge.DefaultTenant, SessionID: f.sess.ID, TurnID: t.ID}
}

// startText writes a message with a streaming text part of thread.
func (f *fixture) startText(t *turn, thread string) *forge.Part {
	f.t.Helper()
	now := time.Now().UTC()
	if t.msg == nil || t.msg.ThreadID != thread {
		t.msg = &forge.Message{ID: f.ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: f.sess.ID, TurnID: t.ID,
			ThreadID: thread, Role: forge.RoleAssistant, CreatedAt: now}
	}
	p := &forge.Part{ID: f.ids.New(forge.PrefixPart), MessageID: t.msg.ID, Type: forge.PartText, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
	b := f.batch(t)
	b.Messages, b.Parts = []*forge.Message{t.msg}, []*forge.Part{p}
	if _, err := f.log.Commit(f.ctx, b, eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: t.ID, ThreadID: thread, Data: p}); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) delta(t *turn, p *forge.Part, thread, text string) forge.Event {
	f.t.Helper()
	ev, err := f.log.PublishDelta(f.ctx, forge.DefaultTenant, f.sess.ID, eventlog.Draft{Type: forge.EventModelDelta, ID: p.ID, TurnID: t.ID, ThreadID: thread, Data: forge.DeltaData{Delta: text}})
	if err != nil {
		f.t.Fatal(err)
	}
	p.Text += text
	return ev
}

func (f *fixture) complete(t *turn, p *forge.Part, thread string) {
	f.t.Helper()
	p.State = forge.StateCompleted
	b := f.batch(t)
	b.Parts = []*forge.Part{p}
	if _, err := f.log.Commit(f.ctx, b, eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: t.ID, ThreadID: thread, Data: p}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) end(t *turn) forge.Event {
	f.t.Helper()
	t.Status = forge.TurnDone
	b := f.batch(t)
	b.Turn = t.Turn
	final := *t.Turn
	evs, err := f.log.Commit(f.ctx, b, eventlog.Draft{Type: forge.EventTurnDone, ID: t.ID, TurnID: t.ID, Data: &final,
		OnSeq: func(seq int64) { final.LastSeq, t.LastSeq = seq, seq }})
	if err != nil {
		f.t.Fatal(err)
	}
	return evs[0]
}

// collect reads q until the stream ends or, for a session stream, until n
// turn.done events.
func (f *fixture) collect(q eventlog.Query, dones int) []forge.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	var out []forge.Event
	for ev, err := range f.log.Events(ctx, forge.DefaultTenant, f.sess.ID, q) {
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, ev)
		if ev.Type == forge.EventTurnDone {
			if dones--; dones == 0 {
				break
			}
		}
	}
	return out
}

func types(evs []forge.Event) string {
	var b []string
	for _, ev := range evs {
		b = append(b, ev.Type)
	}
	return strings.Join(b, " ")
}

func TestSeqsAreReservedInBlocksAndContinueAboveThemAfterARestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{SeqBlock: 4}, bus.Options{})
	tr := f.begin()
	p := f.startText(tr, f.sess.MainThreadID)
	var last int64
	for i := range 9 {
		ev := f.delta(tr, p, f.sess.MainThreadID, fmt.Sprint(i))
		if ev.Seq <= last {
			t.Fatalf("seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
	}
	if last != 11 || f.store.reserves.Load() != 3 {
		t.Fatalf("11 events: last seq %d, %d reservations (want 11, 3)", last, f.store.reserves.Load())
	}
	if c := f.log.Cursor(f.sess.ID); c != last {
		t.Fatalf("cursor %d, want %d", c, last)
	}
	// A new process (a new Log on the same store) continues above every
	// reserved seq, even those handed out to deltas that were never stored.
	f.log = f.newLog(eventlog.Config{SeqBlock: 4})
	if c := f.log.Cursor(f.sess.ID); c != 0 {
		t.Fatalf("cursor of a new log %d", c)
	}
	if ev := f.delta(tr, p, f.sess.MainThreadID, "x"); ev.Seq != 13 {
		t.Fatalf("first seq after the restart %d, want 13 (above the reserved 12)", ev.Seq)
	}
}

func TestAFailedCommitPublishesNothingAndIsRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{RetryDelays: []time.Duration{time.Millisecond, 2 * time.Millisecond}}, bus.Options{})
	tr := f.begin()
	held, sub, err := f.bus.Subscribe(f.ctx, f.sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if len(held) != 1 {
		t.Fatalf("held %s", types(held))
	}
	// Three failures: the first try and both retries fail.
	f.store.failCommits.Store(3)
	b := f.batch(tr)
	_, err = f.log.Commit(f.ctx, b, eventlog.Draft{Type: forge.EventStepStarted, ID: "prt_x", TurnID: tr.ID})
	if !errors.Is(err, errInjected) {
		t.Fatalf("commit: %v", err)
	}
	if evs, _ := sub.Next(f.ctx, false); len(evs) != 0 {
		t.Fatalf("a failed commit published %s", types(evs))
	}
	if fmt.Sprint(f.sleeps) != "[1ms 2ms]" {
		t.Fatalf("waits between tries %v", f.sleeps)
	}
	// Two failures: the second retry lands, then it is published.
	f.store.failCommits.Store(2)
	evs, err := f.log.Commit(f.ctx, b, eventlog.Draft{Type: forge.EventStepStarted, ID: "prt_y", TurnID: tr.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := sub.Next(f.ctx, false); len(got) != 1 || got[0].Seq != evs[0].Seq || got[0].Seq <= held[0].Seq+1 {
		t.Fatalf("published %v after the retried commit (the failed write's seq %d is burned)", got, held[0].Seq+1)
	}
	stored, _ := f.store.ListEvents(f.ctx, forge.DefaultTenant, forge.EventQuery{SessionID: f.sess.ID})
	if types(stored) != "turn.created step.started" || stored[1].ID != "prt_y" {
		t.Fatalf("stored %s", types(stored))
	}
	// A final error (the turn ended) is not retried.
	f.end(tr)
	f.sleeps = nil
	if _, err := f.log.Commit(f.ctx, b, eventlog.Draft{Type: forge.EventStepStarted, ID: "prt_z", TurnID: tr.ID}); !errors.Is(err, forge.ErrTurnEnded) || len(f.sleeps) != 0 {
		t.Fatalf("write after the end: %v after %d waits", err, len(f.sleeps))
	}
}

// TestEventsOutsideTurns: a writer that is not a turn (forum ingestion)
// writes events with no turn id.
func TestEventsOutsideTurns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{}, bus.Options{})
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	got := make(chan forge.Event, 1)
	s, err := f.log.Subscribe(ctx, forge.DefaultTenant, f.sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev, err := range s.Events(ctx, "") {
			if err == nil {
				got <- ev
			}
			return
		}
	}()
	var committed []forge.Event
	evs, err := f.log.Write(f.ctx, forge.DefaultTenant, f.sess.ID, []eventlog.Draft{{Type: forge.EventMessageCreated, ID: "msg_forum", Data: map[string]string{"text": "hi"}}},
		func(_ context.Context, evs []forge.Event) error { committed = evs; return nil })
	if err != nil || len(committed) != 1 || evs[0].TurnID != nil || evs[0].ThreadID != nil {
		t.Fatalf("write: %v %+v", err, evs)
	}
	select {
	case ev := <-got:
		if ev.Seq != evs[0].Seq || ev.TurnID != nil {
			t.Fatalf("subscriber got %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event did not reach the subscriber")
	}
}

// TestResumeAfterAnySeq: at every cursor, a resume while the turn runs
// gets exactly what followed (deltas included); once the turn ended, a new
// subscriber gets the stored log.
func TestResumeAfterAnySeq(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{SeqBlock: 8}, bus.Options{})
	tr := f.begin()
	p := f.startText(tr, f.sess.MainThreadID)
	for i := range 5 {
		f.delta(tr, p, f.sess.MainThreadID, fmt.Sprint(i))
	}
	running := make(chan []forge.Event)
	var wg sync.WaitGroup
	cursors := []int64{0, 1, 2, 4, 6, 7}
	for _, c := range cursors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			running <- f.collect(eventlog.Query{After: c, TurnID: tr.ID}, 1)
		}()
	}
	go func() { wg.Wait(); close(running) }()
	for f.bus.Subscribers(f.sess.ID) < len(cursors) {
		time.Sleep(time.Millisecond) // wait for the readers to subscribe (a poll, not ordering)
	}
	f.delta(tr, p, f.sess.MainThreadID, "5")
	f.complete(tr, p, f.sess.MainThreadID)
	done := f.end(tr)
	for got := range running {
		text := ""
		for i, ev := range got {
			if i > 0 && ev.Seq <= got[i-1].Seq {
				t.Fatalf("seq %d after %d", ev.Seq, got[i-1].Seq)
			}
			if ev.Type == forge.EventModelDelta {
				var d forge.DeltaData
				_ = json.Unmarshal(ev.Data, &d)
				text += d.Delta
			}
		}
		first := got[0].Seq - 1
		want := "012345"[max(0, min(6, int(first)-2)):]
		if text != want || got[len(got)-1].Seq != done.Seq {
			t.Fatalf("resume after %d: deltas %q (want %q), ends at %d", first, text, want, got[len(got)-1].Seq)
		}
	}
	// After the end, a new subscriber gets the stored log: no deltas.
	for _, c := range []int64{0, 4} {
		got := f.collect(eventlog.Query{After: c, TurnID: tr.ID}, 1)
		if strings.Contains(types(got), forge.EventModelDelta) || got[len(got)-1].Seq != done.Seq {
			t.Fatalf("after the end, after %d: %s", c, types(got))
		}
	}
	if got := f.collect(eventlog.Query{After: done.Seq, TurnID: tr.ID}, 1); len(got) != 0 {
		t.Fatalf("after turn.done: %s", types(got))
	}
}

// TestResumePastTheEndOfARunningTurnEnds: a turn stream resumed with a
// cursor beyond the seq the turn will end at (seqs are not dense: a
// client may hold a larger one) ends when the turn ends, with nothing to
// send, as it does for a turn that had already ended.
func TestResumePastTheEndOfARunningTurnEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, eventlog.Config{}, bus.Options{})
	tr := f.begin()
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	ended := make(chan []forge.Event)
	go func() {
		var out []forge.Event
		for ev, err := range f.log.Events(ctx, forge.DefaultTenant, f.sess.ID, eventlog.Query{After: 1 << 40, TurnID: tr.ID}) {
			if err != nil {
				break
			}
			out = append(out, ev)
		}
		ended <- out
	}()
	for f.bus.Subscribers(f.sess.ID) < 1 {
		time.Sleep(time.Millisecond) // wait for the reader to subscribe (a poll, not ordering)
	}
	f.end(tr)
	got := <-ended
	if ctx.Err() != nil {
		t.Fatal("the stream did not end when the turn did")
	}
	if len(got) != 0 {
		t.Fatalf("a cursor past the end got %s", types(got))
	}
}
