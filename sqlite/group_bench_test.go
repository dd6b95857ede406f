package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// BenchmarkTurnWrites measures what a trivial turn's two writes cost the
// store, and what they would cost as one transaction: "two" commits the
// turn's creation (BeginTurn) and then its end (the terminal Commit), as
// the engine does; "one" queues both while the writer is held, so that
// they land in one group commit. Both variants hold the writer the same
// way once per turn (an empty write), so the difference is the second
// transaction alone. It reports WAL frames and commits per turn; compare
// the writer's CPU with -cpuprofile (sqlite.(*writer).run, per turn): the
// process's CPU time would count the wait loop that queues the calls of
// "one" in order. The rows are
// shaped like a trivial openai turn's (engine/testdata/text.golden): a
// user message with one part and two events at the start; an assistant
// message with three parts and seven events at the end.
//
// This is the figure behind docs/benchmarks.md's "one write per turn":
// the engine does not write a turn this way (a wait-mode turn would have
// no durable record until its end).
//
//	go test -run '^$' -bench TurnWrites/transactions=one -benchtime 4000x -cpuprofile one.prof ./sqlite/
func BenchmarkTurnWrites(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		name := "two"
		if grouped {
			name = "one"
		}
		b.Run("transactions="+name, func(b *testing.B) { benchTurnWrites(b, grouped) })
	}
}

func benchTurnWrites(b *testing.B, grouped bool) {
	ctx := context.Background()
	s, err := openStore(ctx, filepath.Join(b.TempDir(), "forge.db"), func(s *Store) { s.writerQueue = 4 })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	tw := newTurnWriter(b, s)
	for range 5 {
		tw.turn(b, grouped)
	}
	frames, commits := pagesWritten(b, s), s.w.commits.Load()
	n := 0
	for b.Loop() {
		n++
		tw.turn(b, grouped)
	}
	b.StopTimer()
	b.ReportMetric(float64(pagesWritten(b, s)-frames-1)/float64(n), "frames/turn")
	b.ReportMetric(float64(s.w.commits.Load()-commits-1)/float64(n), "commits/turn")
}

// turnWriter writes trivial turns into one session.
type turnWriter struct {
	s    *Store
	ses  *forge.Session
	seq  int64
	prev *string
	n    int
}

func newTurnWriter(b *testing.B, s *Store) *turnWriter {
	ctx := context.Background()
	ses := &forge.Session{Tenant: forge.DefaultTenant, Agent: "a", MainThreadID: s.ids.New(forge.PrefixThread)}
	if err := s.CreateSession(ctx, ses); err != nil {
		b.Fatal(err)
	}
	if _, err := s.ReserveSeqs(ctx, ses.Tenant, ses.ID, 1<<40); err != nil {
		b.Fatal(err)
	}
	return &turnWriter{s: s, ses: ses}
}

// data is an event payload of about n bytes.
func data(id string, n int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"text":%q}`, id, strings.Repeat("x", max(0, n-20-len(id))))
}

func (w *turnWriter) event(typ, id string, turnID *string, now time.Time, size int) forge.Event {
	w.seq++
	return forge.Event{Seq: w.seq, ID: id, Type: typ, SessionID: w.ses.ID, TurnID: turnID, CreatedAt: now,
		Data: data(id, size)}
}

// turn writes one turn's creation and end, in one transaction or two,
// after holding the writer once.
func (w *turnWriter) turn(b *testing.B, grouped bool) {
	ctx := context.Background()
	ids, thread, now := w.s.ids, w.ses.MainThreadID, time.Now().UTC()
	w.n++
	t := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: w.ses.Tenant, SessionID: w.ses.ID, PreviousTurnID: w.prev,
		AgentID: "ag_1", AgentVersion: 1, Status: forge.TurnRunning,
		Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}, CreatedAt: now}
	user := &forge.Message{ID: ids.New(forge.PrefixMessage), ThreadID: thread, Role: forge.RoleUser, CreatedAt: now}
	user.Parts = []*forge.Part{{ID: ids.New(forge.PrefixPart), MessageID: user.ID, Type: forge.PartText, Text: "hi",
		State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
	begin := &forge.BeginTurn{Turn: t, Messages: []*forge.Message{user}, Events: []forge.Event{
		w.event(forge.EventTurnCreated, t.ID, &t.ID, now, 330),
		w.event(forge.EventMessageCreated, user.ID, &t.ID, now, 420),
	}}

	reply := &forge.Message{ID: ids.New(forge.PrefixMessage), ThreadID: thread, Role: forge.RoleAssistant,
		ParentID: &user.ID, Model: "openai/gpt-4.1-mini", Finish: "stop", CreatedAt: now}
	part := func(typ, text string) *forge.Part {
		return &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: reply.ID, Type: typ, Text: text,
			State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}
	}
	start, text, finish := part(forge.PartStepStart, ""), part(forge.PartText, "Hello"), part(forge.PartStepFinish, "")
	done := *t
	done.Status = forge.TurnDone
	done.EndedAt = &now
	done.Usage = forge.Usage{InputTokens: 10, OutputTokens: 2}
	end := &forge.Batch{Tenant: w.ses.Tenant, SessionID: w.ses.ID, TurnID: t.ID, Turn: &done,
		Messages: []*forge.Message{reply}, Parts: []*forge.Part{start, text, finish},
		Events: []forge.Event{
			w.event(forge.EventMessageCreated, reply.ID, &t.ID, now, 250),
			w.event(forge.EventStepStarted, start.ID, &t.ID, now, 160),
			w.event(forge.EventModelMessage, text.ID, &t.ID, now, 130),
			w.event(forge.EventModelMessage, text.ID, &t.ID, now, 150),
			w.event(forge.EventStepFinished, finish.ID, &t.ID, now, 230),
			w.event(forge.EventMessageUpdated, reply.ID, &t.ID, now, 330),
			w.event(forge.EventTurnDone, t.ID, &t.ID, now, 560),
		}}
	w.prev = &t.ID

	// Hold the writer (both variants), then queue the writes.
	held, release := make(chan struct{}), make(chan struct{})
	holdDone := make(chan error, 1)
	go func() {
		holdDone <- w.s.write(ctx, func(*tx) error { close(held); <-release; return nil })
	}()
	<-held
	if !grouped {
		close(release)
		if err := <-holdDone; err != nil {
			b.Fatal(err)
		}
		if err := w.s.BeginTurn(ctx, begin); err != nil {
			b.Fatal(err)
		}
		if err := w.s.Commit(ctx, end); err != nil {
			b.Fatal(err)
		}
		return
	}
	beginDone, endDone := make(chan error, 1), make(chan error, 1)
	// The queue is a buffered channel here (writerQueue): each call is
	// queued before the next one starts.
	go func() { beginDone <- w.s.BeginTurn(ctx, begin) }()
	waitQueued(w.s, 1)
	go func() { endDone <- w.s.Commit(ctx, end) }()
	waitQueued(w.s, 2)
	close(release)
	for _, c := range []chan error{holdDone, beginDone, endDone} {
		if err := <-c; err != nil {
			b.Fatal(err)
		}
	}
}

// waitQueued waits until n calls are queued for the held writer.
func waitQueued(s *Store, n int) {
	for len(s.w.reqs) < n {
		runtime.Gosched()
	}
}
