package engine_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
)

func TestResumeAfterDeltaHasNoGapNoDuplicate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	release := make(chan struct{})
	deltas := []string{"a", "b", "c", "d", "e"}
	h.model.push(reply{deltas: deltas, block: release})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	// Read up to the third delta, then drop the stream.
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	var seen []forge.Event
	n := 0
	for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
		if ev.Type == forge.EventModelDelta {
			if n++; n == 3 {
				break
			}
		}
	}
	cursor := seen[len(seen)-1].Seq
	// Resume while running (the resumed stream has its first event: the
	// fourth delta), then let the turn finish.
	var resumed []forge.Event
	done, live := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID, After: cursor}) {
			if err != nil {
				t.Error(err)
				return
			}
			if resumed = append(resumed, ev); len(resumed) == 1 {
				close(live)
			}
		}
	}()
	<-live
	close(release)
	<-done
	all := append(seen, resumed...)
	var text strings.Builder
	final := ""
	for i, ev := range all {
		if i > 0 && ev.Seq <= all[i-1].Seq {
			t.Fatalf("seq %d after %d: duplicate or out of order", ev.Seq, all[i-1].Seq)
		}
		if ev.Type == forge.EventModelDelta {
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			text.WriteString(d.Delta)
		}
		if ev.Type == forge.EventModelMessage {
			var p forge.Part
			_ = json.Unmarshal(ev.Data, &p)
			if p.State == forge.StateCompleted {
				final = p.Text
			}
		}
	}
	if text.String() != "abcde" || final != "abcde" {
		t.Fatalf("deltas %q final %q", text.String(), final)
	}
	if all[len(all)-1].Type != forge.EventTurnDone {
		t.Fatal("stream did not end with turn.done")
	}
	// After the end: resuming after the same cursor yields the stored log:
	// the completed part row, no deltas.
	var after []forge.Event
	for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID, After: cursor}) {
		if err != nil {
			t.Fatal(err)
		}
		after = append(after, ev)
	}
	if got := types(after); got != "model.message step.finished message.updated turn.done" {
		t.Fatalf("replay after end: %s", got)
	}
}

func TestRecoveryClosesAbandonedTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) { c.CheckpointInterval = 20 * time.Millisecond })
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"partial"}, block: make(chan struct{})})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	delta := waitForEvent(t, h, s.ID, forge.EventModelDelta)
	// Wait for a checkpoint tick to write the streamed text.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
		if len(msgs) > 1 && len(msgs[1].Parts) > 1 && msgs[1].Parts[1].Text == "partial" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint of the streaming part")
		}
	}
	// Simulate a dead process: reopen the database with a new engine
	// without letting the old one write anything more.
	snapshotPath := h.path
	copyDB(t, snapshotPath)
	cancelRunning(t, h, s.ID) // the crashed process is gone; no need to wait for it
	h2 := &harness{t: t, path: snapshotPath + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open()
	defer h2.close()
	got, err := h2.store.GetTurn(h.ctx, forge.DefaultTenant, s.ID, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != forge.TurnCancelled || *got.CancelReason != forge.CancelAbandoned {
		t.Fatalf("recovered %+v", got)
	}
	if got.LastSeq <= delta.Seq {
		t.Fatalf("turn.done seq %d not above a seen delta %d", got.LastSeq, delta.Seq)
	}
	msgs, _ := h2.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
	if p := msgs[1].Parts[1]; p.Text != "partial" || p.State != forge.StateInterrupted {
		t.Fatalf("checkpointed part %+v", p)
	}
	evs := h2.events(s.ID, delta.Seq)
	if got := types(evs); got != "model.message turn.done" {
		t.Fatalf("closing events %s", got)
	}
	// The session continues.
	h2.model.push(reply{deltas: []string{"again"}})
	if next := h2.run(s.ID, msg("continue")); next.Status != forge.TurnDone || *next.PreviousTurnID != turn.ID {
		t.Fatalf("next %+v", next)
	}
}

// copyDB copies a SQLite database and its WAL to path+".copy", as a crashed
// process would have left them.
func copyDB(t *testing.T, path string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			if suffix != "" && os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".copy"+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSessionStreamSpansTurns(t *testing.T) {
	t.Parallel()
	b := bus.New(0, 0)
	h := newHarness(t, func(c *engine.Config) { c.Bus = b })
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"one"}}, reply{deltas: []string{"two"}})
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	got := make(chan forge.Event, 100)
	go func() {
		for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{}) {
			if err != nil {
				return
			}
			got <- ev
		}
	}()
	for b.Subscribers(s.ID) == 0 {
		time.Sleep(time.Millisecond)
	}
	h.run(s.ID, msg("a"))
	h.run(s.ID, msg("b"))
	var text strings.Builder
	dones := 0
	timeout := time.After(10 * time.Second)
	var last int64
	for dones < 2 {
		select {
		case ev := <-got:
			if ev.Seq <= last {
				t.Fatalf("seq %d after %d", ev.Seq, last)
			}
			last = ev.Seq
			if ev.Type == forge.EventTurnDone {
				dones++
			}
			if ev.Type == forge.EventModelDelta {
				var d forge.DeltaData
				_ = json.Unmarshal(ev.Data, &d)
				text.WriteString(d.Delta)
			}
		case <-timeout:
			t.Fatalf("saw %d turn.done", dones)
		}
	}
	if s := text.String(); s != "onetwo" {
		t.Fatalf("deltas %q", s)
	}
}

// TestResumeOlderThanTrimmedBacklogGetsTextSoFar: a cursor older than a
// trimmed live backlog first gets the streaming part's row with the text
// up to the backlog, then the backlog's deltas: the text adds up exactly.
func TestResumeOlderThanTrimmedBacklogGetsTextSoFar(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *engine.Config) { c.Bus = bus.New(0, 20) })
	h.agent("a", nil)
	s := h.session("a")
	release := make(chan struct{})
	var deltas []string
	for i := range 60 {
		deltas = append(deltas, string(rune('a'+i%26)))
	}
	h.model.push(reply{deltas: deltas, block: release})
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	// Subscribed before the turn begins, this stream sees every delta:
	// wait until all are published (the backlog keeps only the newest),
	// then resume from the turn's start.
	turn, stream, err := h.eng.StreamTurn(ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ev, err := range stream {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == forge.EventModelDelta {
			if n++; n == len(deltas) {
				break
			}
		}
	}
	var first forge.Event
	for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == forge.EventTurnCreated {
			first = ev
			break
		}
	}
	var got []forge.Event
	done, live := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{TurnID: turn.ID, After: first.Seq}) {
			if err != nil {
				return
			}
			if got = append(got, ev); len(got) == 1 {
				close(live) // the resume has started while the turn runs
			}
		}
	}()
	<-live
	close(release)
	<-done
	var text strings.Builder
	sawRow := false
	for i, ev := range got {
		if i > 0 && ev.Seq <= got[i-1].Seq {
			t.Fatalf("seq %d after %d", ev.Seq, got[i-1].Seq)
		}
		switch ev.Type {
		case forge.EventModelMessage:
			var p forge.Part
			_ = json.Unmarshal(ev.Data, &p)
			if p.State == forge.StateStreaming && p.Text != "" {
				sawRow = true
				text.Reset()
				text.WriteString(p.Text)
			}
		case forge.EventModelDelta:
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			text.WriteString(d.Delta)
		}
	}
	if !sawRow || text.String() != strings.Join(deltas, "") {
		t.Fatalf("row with text so far: %v; text %q, want %q", sawRow, text.String(), strings.Join(deltas, ""))
	}
}

// TestSlowSessionSubscribersGetEveryDeltaAcrossTurns: session-stream
// subscribers slower than the model, with a small bus buffer, are cut off
// again and again over several turns of long delta streams, and still get
// every delta exactly once, in order (docs/decisions.md: a slow
// subscriber resumes from its cursor and sees no gap).
func TestSlowSessionSubscribersGetEveryDeltaAcrossTurns(t *testing.T) {
	t.Parallel()
	const subscribers, turns, deltas = 16, 3, 1000
	b := bus.New(8, 0)
	h := newHarness(t, func(c *engine.Config) { c.Bus = b })
	h.agent("a", nil)
	s := h.session("a")
	var script []string
	for i := range deltas {
		script = append(script, fmt.Sprintf("%d,", i))
	}
	want := strings.Join(script, "")
	for range turns {
		h.model.push(reply{deltas: script})
	}
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	texts := make(chan []string, subscribers)
	for i := range subscribers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got []string // per turn: the deltas' text
			var cur strings.Builder
			n := 0
			var last int64
			for ev, err := range h.eng.Events(ctx, forge.DefaultTenant, s.ID, engine.EventsQuery{}) {
				if err != nil {
					t.Error(err)
					break
				}
				if ev.Seq <= last {
					t.Errorf("seq %d after %d", ev.Seq, last)
				}
				last = ev.Seq
				if n++; n%(5+i) == 0 {
					time.Sleep(20 * time.Microsecond) // a slow reader
				}
				switch ev.Type {
				case forge.EventModelDelta:
					var d forge.DeltaData
					_ = json.Unmarshal(ev.Data, &d)
					cur.WriteString(d.Delta)
				case forge.EventTurnDone:
					got = append(got, cur.String())
					cur.Reset()
				}
				if len(got) == turns {
					break
				}
			}
			texts <- got
		}()
	}
	for b.Subscribers(s.ID) < subscribers {
		time.Sleep(time.Millisecond) // a poll until all have subscribed, not ordering
	}
	for range turns {
		if turn := h.run(s.ID, msg("go")); turn.Status != forge.TurnDone {
			t.Fatalf("turn %+v", turn)
		}
	}
	wg.Wait()
	close(texts)
	for got := range texts {
		if len(got) != turns {
			t.Fatalf("a subscriber saw %d turns", len(got))
		}
		for i, text := range got {
			if text != want {
				t.Fatalf("turn %d: a subscriber got %d of %d bytes of deltas", i+1, len(text), len(want))
			}
		}
	}
}

// TestRecoveryEndsATurnOfADeletedSession: a turn still running in a
// session that is deleted (the store now refuses to delete a session
// with a running turn, but a database written by an older version, where
// a delete could race a supersede, may hold one) must not stop the
// restarted process from starting: recovery ends it cancelled/abandoned
// like any other.
func TestRecoveryEndsATurnOfADeletedSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	block := make(chan struct{})
	defer close(block) // lets the first engine's turn end before its cleanup
	h.model.push(reply{deltas: []string{"partial"}, block: block})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	copyDB(t, h.path) // as the crashed process left it; the first engine runs on until cleanup
	// The older version's leftover: the session deleted under its turn.
	db, err := sql.Open("sqlite", h.path+".copy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(h.ctx, `UPDATE sessions SET deleted_at = 1 WHERE id = ?`, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	h2 := &harness{t: t, path: h.path + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open() // fails the test if Recover fails
	defer h2.close()
	// Reads do not show a deleted session's turns; RunningTurns does.
	if running, err := h2.store.RunningTurns(h.ctx); err != nil || len(running) != 0 {
		t.Fatalf("turn %s still running after recovery: %v %v", turn.ID, running, err)
	}
	// The restarted engine serves other sessions.
	other := h2.session("a")
	h2.model.push(reply{deltas: []string{"fine"}})
	if next := h2.run(other.ID, msg("hello")); next.Status != forge.TurnDone {
		t.Fatalf("a turn after recovery: %+v", next)
	}
}
