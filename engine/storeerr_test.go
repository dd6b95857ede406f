package engine_test

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
	"github.com/forge-runtime/forge/engine"
)

// faultyStore is the real SQLite store with Commit failing for the batches
// fail picks: faults injected on a real store.
type faultyStore struct {
	forge.Store
	mu     sync.Mutex
	fail   func(*forge.Batch) bool
	failed int
}

var errDisk = errors.New("injected: disk I/O error")

func (s *faultyStore) Commit(ctx context.Context, b *forge.Batch) error {
	s.mu.Lock()
	fail := s.fail != nil && s.fail(b)
	if fail {
		s.failed++
	}
	s.mu.Unlock()
	if fail {
		return errDisk
	}
	return s.Store.Commit(ctx, b)
}

func (s *faultyStore) setFail(fail func(*forge.Batch) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

// sleeps records the waits between retries; nothing sleeps for real.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return nil
}

func (s *sleeps) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.d)
}

func withFaults(fs *faultyStore, sl *sleeps) func(*engine.Config) {
	return func(c *engine.Config) {
		fs.Store = c.Store
		c.Store = fs
		c.StoreRetryDelays = []time.Duration{time.Second, 2 * time.Second}
		c.Sleep = sl.sleep
	}
}

// hasRunningCall reports whether b writes a tool part as running: the
// flush that must land before tools run.
func hasRunningCall(b *forge.Batch) bool {
	for _, ev := range b.Events {
		if ev.Type == forge.EventToolCall && json.Valid(ev.Data) {
			var p forge.Part
			_ = json.Unmarshal(ev.Data, &p)
			if p.State == forge.StateRunning {
				return true
			}
		}
	}
	return false
}

// countingTool counts its calls: a side effect that must not happen on an
// unsaved state.
type countingTool struct{ calls atomic.Int64 }

func (c *countingTool) Def() forge.ToolDef {
	return forge.ToolDef{Name: "effect", Description: "has an effect", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (c *countingTool) Call(context.Context, json.RawMessage) (forge.ToolResult, error) {
	c.calls.Add(1)
	return forge.ToolResult{Output: "done"}, nil
}

func lastStored(t *testing.T, h *harness, sid string) forge.Event {
	t.Helper()
	evs := h.events(sid, 0)
	return evs[len(evs)-1]
}

// TestFailedWriteBeforeToolsRunsNoTool: when the write that makes the
// calls' running state durable keeps failing, no tool runs, the turn ends
// errored with code store_error after the retries, and the session goes on.
func TestFailedWriteBeforeToolsRunsNoTool(t *testing.T) {
	t.Parallel()
	tool := &countingTool{}
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl), func(c *engine.Config) { c.Tools = map[string]forge.Tool{"effect": tool} })
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "effect", BuiltIn: true}} })
	s := h.session("a")
	fs.setFail(hasRunningCall)
	h.model.push(reply{calls: []forge.ToolCall{call("effect", `{}`)}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeStoreError {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	if n := tool.calls.Load(); n != 0 {
		t.Fatalf("the tool ran %d times on an unsaved state", n)
	}
	if n := len(h.model.sent()); n != 1 {
		t.Fatalf("the model was called %d times", n)
	}
	// The flush and the full terminal write were each tried three times.
	if got := sl.String(); got != "[1s 2s 1s 2s]" {
		t.Fatalf("waits between tries %s", got)
	}
	if last := lastStored(t, h, s.ID); last.Type != forge.EventTurnDone || last.Seq != turn.LastSeq {
		t.Fatalf("last stored event %s %d, turn.last_seq %d", last.Type, last.Seq, turn.LastSeq)
	}
	// The session is not stuck.
	fs.setFail(nil)
	h.model.push(reply{deltas: []string{"fine"}})
	if next := h.run(s.ID, msg("again")); next.Status != forge.TurnDone || next.Output.Text != "fine" {
		t.Fatalf("next turn %+v", next)
	}
}

// TestTerminalWriteIsRetried: a terminal write that fails twice lands on
// the third try; the turn ends as it should have.
func TestTerminalWriteIsRetried(t *testing.T) {
	t.Parallel()
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl))
	h.agent("a", nil)
	s := h.session("a")
	failures := 2
	fs.setFail(func(b *forge.Batch) bool {
		if b.Turn != nil && b.Turn.Ended() && failures > 0 {
			failures--
			return true
		}
		return false
	})
	h.model.push(reply{deltas: []string{"ok"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnDone || turn.Output == nil || turn.Output.Text != "ok" {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	if got := sl.String(); got != "[1s 2s]" {
		t.Fatalf("waits between tries %s", got)
	}
}

// TestTerminalWriteThatKeepsFailingEndsStoreError: when the terminal write
// fails for good, the turn still ends (errored, store_error) in a minimal
// write, and the session is not left with a running turn.
func TestTerminalWriteThatKeepsFailingEndsStoreError(t *testing.T) {
	t.Parallel()
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl))
	h.agent("a", nil)
	s := h.session("a")
	// Every write that would end the turn done fails.
	fs.setFail(func(b *forge.Batch) bool { return b.Turn != nil && b.Turn.Status == forge.TurnDone })
	h.model.push(reply{deltas: []string{"lost"}})
	turn := h.run(s.ID, msg("go"))
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeStoreError || turn.Output != nil {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	if last := lastStored(t, h, s.ID); last.Type != forge.EventTurnDone || last.Seq != turn.LastSeq {
		t.Fatalf("last stored event %s", last.Type)
	}
	fs.setFail(nil)
	h.model.push(reply{deltas: []string{"fine"}})
	if next := h.run(s.ID, msg("again")); next.Status != forge.TurnDone {
		t.Fatalf("next turn %+v", next)
	}
}

// TestStoreOutageWithholdsWhatItCannotKeep (issue 22): while checkpoints
// fail, the deltas of a streaming reply are withheld, so that when the
// outage outlasts the turn, what a client was shown is at most about one
// checkpoint interval ahead of what the store kept. Before, every delta
// was shown and the text after the last checkpoint was lost.
func TestStoreOutageWithholdsWhatItCannotKeep(t *testing.T) {
	t.Parallel()
	const interval = 40 * time.Millisecond
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl), func(c *engine.Config) { c.CheckpointInterval = interval })
	h.agent("a", nil)
	s := h.session("a")
	var checkpoints atomic.Int64
	fs.setFail(func(b *forge.Batch) bool {
		if b.Turn != nil && b.Turn.Error != nil && b.Turn.Error.Code == forge.CodeStoreError {
			return false // the minimal terminal write lands
		}
		if b.Turn == nil && len(b.Events) == 0 && len(b.Parts) > 0 {
			// A checkpoint: the store goes down after the third.
			return checkpoints.Add(1) > 3
		}
		return checkpoints.Load() > 3
	})
	deltas := make([]string, 100)
	for i := range deltas {
		deltas[i] = "ab"
	}
	const gap = 5 * time.Millisecond
	h.model.push(reply{deltas: deltas, gap: gap})
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Second)
	defer cancel()
	turn, stream, err := h.eng.StreamTurn(ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for ev, err := range stream {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == forge.EventModelDelta {
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			shown += len(d.Delta)
		}
		if ev.Type == forge.EventTurnDone {
			break
		}
	}
	turn = h.wait(s.ID, turn.ID)
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeStoreError {
		t.Fatalf("turn %+v %+v", turn, turn.Error)
	}
	kept := keptReply(t, h.store, s.ID, turn.ID)
	if kept == 0 || kept >= 200 {
		t.Fatalf("kept %d of 200 characters: the outage did not cut the reply", kept)
	}
	// Shown beyond kept: what streamed in the interval and a quarter past
	// the last checkpoint that landed, at 2 characters a gap. Allow three
	// times that for a loaded machine; before the fix it was everything
	// after the checkpoint (well over 100 characters).
	bound := 3 * 2 * int((interval+interval/4)/gap)
	if shown-kept > bound {
		t.Fatalf("shown %d characters, kept %d: %d shown and lost (at most %d)", shown, kept, shown-kept, bound)
	}
	t.Logf("shown %d, kept %d of 200", shown, kept)
}

// TestStoreBlipReleasesWithheldDeltas: checkpoints that fail for a while
// withhold the deltas, and once one lands they all go out, in order: the
// stream has every character, no gap and no duplicate.
func TestStoreBlipReleasesWithheldDeltas(t *testing.T) {
	t.Parallel()
	const interval = 30 * time.Millisecond
	fs, sl := &faultyStore{}, &sleeps{}
	h := newHarness(t, withFaults(fs, sl), func(c *engine.Config) {
		c.CheckpointInterval = interval
		c.StoreRetryDelays = []time.Duration{time.Millisecond}
	})
	h.agent("a", nil)
	s := h.session("a")
	var checkpoints atomic.Int64
	fs.setFail(func(b *forge.Batch) bool {
		if b.Turn == nil && len(b.Events) == 0 && len(b.Parts) > 0 {
			n := checkpoints.Add(1)
			return n > 2 && n <= 8 // a blip: tries 3 to 8 fail
		}
		return false
	})
	var want strings.Builder
	deltas := make([]string, 100)
	for i := range deltas {
		deltas[i] = fmt.Sprintf("%02d", i)
		want.WriteString(deltas[i])
	}
	h.model.push(reply{deltas: deltas, gap: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Second)
	defer cancel()
	turn, stream, err := h.eng.StreamTurn(ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	var shown strings.Builder
	var last int64
	for ev, err := range stream {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq <= last {
			t.Fatalf("seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
		if ev.Type == forge.EventModelDelta {
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			shown.WriteString(d.Delta)
		}
		if ev.Type == forge.EventTurnDone {
			break
		}
	}
	turn = h.wait(s.ID, turn.ID)
	if turn.Status != forge.TurnDone || turn.Output == nil || turn.Output.Text != want.String() {
		t.Fatalf("turn %+v", turn)
	}
	if shown.String() != want.String() {
		t.Fatalf("shown %q\nwant  %q", shown.String(), want.String())
	}
	fs.mu.Lock()
	failed := fs.failed
	fs.mu.Unlock()
	if failed == 0 {
		t.Fatal("no checkpoint failed: the blip never happened")
	}
}

// keptReply is how many characters of the turn's reply the store kept: the
// longest text part of its assistant messages.
func keptReply(t *testing.T, st forge.Store, sid, tid string) int {
	t.Helper()
	msgs, _, err := st.ListMessages(context.Background(), forge.DefaultTenant, forge.MessageQuery{SessionID: sid, TipTurnID: tid})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, m := range msgs {
		for _, p := range m.Parts {
			if m.Role == forge.RoleAssistant && p.Type == forge.PartText {
				kept = max(kept, len(p.Text))
			}
		}
	}
	return kept
}
