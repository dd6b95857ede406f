package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// long pads s to about 400 characters (about 100 estimated tokens).
func long(s string) string { return s + strings.Repeat(" x", 195) }

func compactionAgent(window int64, threshold float64, enabled bool) func(*forge.Agent) {
	return func(a *forge.Agent) {
		a.Compaction = forge.Compaction{Enabled: &enabled, ContextWindow: &window, Threshold: &threshold}
	}
}

func usage(in, out int64) forge.Usage { return forge.Usage{InputTokens: in, OutputTokens: out} }

// reqTexts is what one model request held: role:first-text-part per message.
func reqTexts(r *forge.ModelRequest) []string {
	var out []string
	for _, m := range r.Messages {
		text := ""
		for _, p := range m.Parts {
			if p.Type == forge.ModelPartText {
				text = p.Text
				break
			}
		}
		out = append(out, m.Role+":"+short(text))
	}
	return out
}

func msgTexts(ms []*forge.Message) []string {
	var out []string
	for _, m := range ms {
		if m.Role == forge.RoleAssistant && textParts(m) == "" {
			continue // an errored call: nothing for the model
		}
		out = append(out, m.Role+":"+short(textParts(m)))
	}
	return out
}

func short(s string) string {
	if i := strings.IndexAny(s, " :"); i > 0 {
		return s[:i]
	}
	return s
}

func (h *harness) view(sid string) []*forge.Message {
	h.t.Helper()
	var out []*forge.Message
	opts := forge.ListOptions{Limit: 2}
	for {
		page, next, err := h.eng.ModelView(h.ctx, forge.DefaultTenant, sid, opts)
		if err != nil {
			h.t.Fatalf("ModelView: %v", err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		opts.Cursor = next
	}
}

func (h *harness) full(sid, tip string) []*forge.Message {
	h.t.Helper()
	var out []*forge.Message
	s, err := h.store.GetSession(h.ctx, forge.DefaultTenant, sid)
	if err != nil {
		h.t.Fatal(err)
	}
	q := forge.MessageQuery{SessionID: sid, TipTurnID: tip, ThreadID: s.MainThreadID, ListOptions: forge.ListOptions{Limit: 3}}
	for {
		page, next, err := h.store.ListMessages(h.ctx, forge.DefaultTenant, q)
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		q.Cursor = next
	}
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func countType(evs []forge.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestCompactionAtThreshold(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", compactionAgent(1000, 0.8, true))
	s := h.session("a")
	// Reported usage grows: 310, 510, 710; turn 4 then estimates 710 + ~100
	// for its message, over 800.
	h.model.push(
		reply{deltas: []string{long("a1")}, usage: usage(300, 10)},
		reply{deltas: []string{long("a2")}, usage: usage(500, 10)},
		reply{deltas: []string{long("a3")}, usage: usage(700, 10)},
		reply{deltas: []string{"SUMMARY: objective and state"}, usage: usage(650, 40)},
		reply{deltas: []string{long("a4")}, usage: usage(300, 10)},
	)
	var last *forge.Turn
	for _, q := range []string{"q1", "q2", "q3", "q4"} {
		last = h.run(s.ID, msg(long(q)))
		if last.Status != forge.TurnDone {
			t.Fatalf("turn %s: %+v %+v", q, last, last.Error)
		}
	}
	sent := h.model.sent()
	if len(sent) != 5 {
		t.Fatalf("%d model calls, want 5 (3 turns, summary, step)", len(sent))
	}
	if sent[2].System != "be brief" || len(reqTexts(sent[2])) != 5 {
		t.Fatalf("turn 3 compacted too early: %q", reqTexts(sent[2]))
	}
	sum := sent[3]
	if sum.System != engine.SummarySystem || len(sum.Tools) != 0 {
		t.Fatalf("summary call: system %q tools %d", sum.System, len(sum.Tools))
	}
	eq(t, "summary request", reqTexts(sum), []string{"user:q1", "assistant:a1", "user:q2", "assistant:a2", "user:q3", "assistant:a3", "user:Context"})
	eq(t, "request after compaction", reqTexts(sent[4]), []string{"user:Context", "assistant:SUMMARY", "user:q4"})
	if last.Output == nil || short(last.Output.Text) != "a4" || last.Usage.InputTokens != 950 {
		t.Fatalf("turn 4 output %+v usage %+v", last.Output, last.Usage)
	}

	evs := h.events(s.ID, 0)
	if n := countType(evs, forge.EventSessionCompacted); n != 1 {
		t.Fatalf("%d session.compacted events", n)
	}
	var b forge.CompactionBoundary
	for _, e := range evs {
		if e.Type == forge.EventSessionCompacted {
			if err := json.Unmarshal(e.Data, &b); err != nil {
				t.Fatal(err)
			}
		}
	}

	full := h.full(s.ID, last.ID)
	eq(t, "full history", msgTexts(full), []string{"user:q1", "assistant:a1", "user:q2", "assistant:a2", "user:q3", "assistant:a3",
		"user:q4", "user:Context", "assistant:SUMMARY", "assistant:a4"})
	if full[7].ID != b.RequestID || full[8].ID != b.SummaryID || full[6].ID != b.TailStartID || !full[8].Summary {
		t.Fatalf("boundary %+v does not match the stored messages", b)
	}
	view := h.view(s.ID)
	eq(t, "model view", msgTexts(view), []string{"user:Context", "assistant:SUMMARY", "user:q4", "assistant:a4"})
	eq(t, "in-memory filterCompacted", msgTexts(engine.FilterCompacted(full)), msgTexts(view))
	snap, err := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, last.ID)
	if err != nil || snap.ContextTokens != 310 {
		t.Fatalf("snapshot context %+v %v", snap, err)
	}

	// After a restart the next turn reads its history from the store: the
	// model is sent exactly the model view, and nothing older.
	h.close()
	h.open()
	h.model.push(reply{deltas: []string{"a5"}, usage: usage(400, 5)})
	t5 := h.run(s.ID, msg(long("q5")))
	if t5.Status != forge.TurnDone {
		t.Fatalf("turn 5 %+v", t5.Error)
	}
	sent = h.model.sent()
	eq(t, "request after restart", reqTexts(sent[len(sent)-1]), append(msgTexts(view), "user:q5"))
	if n := len(h.full(s.ID, t5.ID)); n != 12 {
		t.Fatalf("full history has %d messages, want 12", n)
	}
}

func TestCompactionDisabledNeverRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.agent("a", compactionAgent(1000, 0.5, false))
	s := h.session("a")
	for i := range 4 {
		h.model.push(reply{deltas: []string{long("a")}, usage: usage(int64(400+300*i), 10)})
	}
	for _, q := range []string{"q1", "q2", "q3", "q4"} {
		if tr := h.run(s.ID, msg(long(q))); tr.Status != forge.TurnDone {
			t.Fatalf("turn %+v", tr.Error)
		}
	}
	if n := len(h.model.sent()); n != 4 {
		t.Fatalf("%d model calls, want 4", n)
	}
	if n := countType(h.events(s.ID, 0), forge.EventSessionCompacted); n != 0 {
		t.Fatalf("%d compactions with compaction disabled", n)
	}
	if got := len(h.view(s.ID)); got != 8 {
		t.Fatalf("model view has %d messages, want 8", got)
	}
	// Overflow without compaction ends the turn with context_overflow.
	h.model.push(reply{err: &forge.ModelError{Provider: "test", Message: "too long", ContextOverflow: true}})
	tr := h.run(s.ID, msg("q5"))
	if tr.Status != forge.TurnErrored || tr.Error.Code != forge.CodeContextOverflow {
		t.Fatalf("turn %s %+v", tr.Status, tr.Error)
	}
	if _, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, engine.TurnRequest{Compact: true}); !errors.Is(err, forge.ErrInvalid) {
		t.Fatalf("POST /compact with compaction disabled: %v", err)
	}
}

var overflow = &forge.ModelError{Provider: "test", StatusCode: 400, Message: "prompt is too long", ContextOverflow: true}

// overflowSession runs two long turns under an agent whose threshold is
// never reached by the reported usage.
func overflowSession(t *testing.T) (*harness, *forge.Session) {
	h := newHarness(t)
	h.agent("a", compactionAgent(1000, 1, true))
	s := h.session("a")
	h.model.push(
		reply{deltas: []string{long("a1")}, usage: usage(10, 10)},
		reply{deltas: []string{long("a2")}, usage: usage(20, 10)},
	)
	for _, q := range []string{"q1", "q2"} {
		if tr := h.run(s.ID, msg(long(q))); tr.Status != forge.TurnDone {
			t.Fatalf("turn %+v", tr.Error)
		}
	}
	return h, s
}

func TestOverflowCompactsOnceAndRetries(t *testing.T) {
	t.Parallel()
	h, s := overflowSession(t)
	h.model.push(
		reply{err: overflow},
		reply{deltas: []string{"SUMMARY"}, usage: usage(200, 20)},
		reply{deltas: []string{"a3"}, usage: usage(60, 5)},
	)
	tr := h.run(s.ID, msg(long("q3")))
	if tr.Status != forge.TurnDone || short(tr.Output.Text) != "a3" {
		t.Fatalf("turn %s %+v", tr.Status, tr.Error)
	}
	sent := h.model.sent()
	if len(sent) != 5 {
		t.Fatalf("%d model calls, want 5", len(sent))
	}
	eq(t, "summary request", reqTexts(sent[3]), []string{"user:q1", "assistant:a1", "user:q2", "assistant:a2", "user:Context"})
	eq(t, "retried request", reqTexts(sent[4]), []string{"user:Context", "assistant:SUMMARY", "user:q3"})
	eq(t, "model view", msgTexts(h.view(s.ID)), []string{"user:Context", "assistant:SUMMARY", "user:q3", "assistant:a3"})

	// A second overflow in the retried step is not compacted again.
	h.model.push(reply{err: overflow}, reply{err: overflow})
	tr = h.run(s.ID, msg("q4"))
	if tr.Status != forge.TurnErrored || tr.Error.Code != forge.CodeContextOverflow {
		t.Fatalf("turn %s %+v", tr.Status, tr.Error)
	}
}

func TestSummaryOverflowEndsTheTurn(t *testing.T) {
	t.Parallel()
	h, s := overflowSession(t)
	h.model.push(reply{err: overflow}, reply{deltas: []string{"partial"}, err: overflow})
	tr := h.run(s.ID, msg(long("q3")))
	if tr.Status != forge.TurnErrored || tr.Error == nil || tr.Error.Code != forge.CodeContextOverflow {
		t.Fatalf("turn %s %+v", tr.Status, tr.Error)
	}
	if n := len(h.model.sent()); n != 4 {
		t.Fatalf("%d model calls, want 4 (no retry after a failed summary)", n)
	}
	if n := countType(h.events(s.ID, 0), forge.EventSessionCompacted); n != 0 {
		t.Fatalf("session.compacted after a failed summary")
	}
	// The failed summary is no boundary: the view is the whole branch.
	view := h.view(s.ID)
	if got := msgTexts(view); got[0] != "user:q1" {
		t.Fatalf("view starts %q", got)
	}
	// The session goes on; the unanswered compaction request is not sent.
	h.model.push(reply{deltas: []string{"fine"}})
	if tr := h.run(s.ID, msg("q4")); tr.Status != forge.TurnDone {
		t.Fatalf("next turn %+v", tr.Error)
	}
	sent := h.model.sent()
	eq(t, "request after a failed compaction", reqTexts(sent[len(sent)-1]),
		[]string{"user:q1", "assistant:a1", "user:q2", "assistant:a2", "user:q3", "user:q4"})
}

func TestCompactTurn(t *testing.T) {
	t.Parallel()
	h, s := overflowSession(t)
	h.model.push(reply{deltas: []string{"SUMMARY"}, usage: usage(100, 20)})
	started, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, engine.TurnRequest{Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := h.wait(s.ID, started.ID)
	if tr.Status != forge.TurnDone || tr.Output == nil || tr.Output.Text != "SUMMARY" || len(tr.Input) != 0 {
		t.Fatalf("compact turn %s %+v %+v", tr.Status, tr.Error, tr.Output)
	}
	eq(t, "model view", msgTexts(h.view(s.ID)), []string{"user:Context", "assistant:SUMMARY", "user:q2", "assistant:a2"})
	if n := countType(h.events(s.ID, started.LastSeq), forge.EventSessionCompacted); n != 1 {
		t.Fatalf("%d session.compacted", n)
	}
	snap, err := h.store.GetSnapshot(h.ctx, forge.DefaultTenant, tr.ID)
	if err != nil || snap.ContextTokens <= 0 || snap.ContextTokens > 400 {
		t.Fatalf("snapshot after compaction %+v %v", snap, err)
	}
	h.model.push(reply{deltas: []string{"a3"}})
	if tr := h.run(s.ID, msg("q3")); tr.Status != forge.TurnDone {
		t.Fatalf("next turn %+v", tr.Error)
	}
	sent := h.model.sent()
	eq(t, "request after compact turn", reqTexts(sent[len(sent)-1]), []string{"user:Context", "assistant:SUMMARY", "user:q2", "assistant:a2", "user:q3"})
}
