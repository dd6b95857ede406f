package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/eventlog"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// TestTextSoFarAcrossTrims: with a bus backlog of 8 events, a part streams
// long enough to be trimmed many times, interleaved with a second part;
// a subscriber resuming from every cursor, while both stream and once both
// completed, rebuilds both texts exactly (no gap, no duplicate), from the
// text so far rows the event log folds and the bus keeps.
func TestTextSoFarAcrossTrims(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, eventlog.Config{}, bus.Options{BacklogMax: 8})
		textSoFarAcrossTrims(t, f.log, f.sess)
	})
	t.Run("Redis", func(t *testing.T) {
		redistest.URL(t)
		dbURL := pgtest.NewDatabase(t)
		t.Parallel()
		r := newReplica(t, dbURL, redistest.Prefix(t), redis.Options{WriterID: "replica-r", MaxLen: 8})
		ids, now := forge.NewULIDGen(nil), time.Now().UTC()
		sess := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect, Agent: "a",
			MainThreadID: ids.New(forge.PrefixThread), Metadata: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}
		if err := r.store.CreateSession(t.Context(), sess); err != nil {
			t.Fatal(err)
		}
		textSoFarAcrossTrims(t, r.log, sess)
	})
}

func textSoFarAcrossTrims(t *testing.T, l *eventlog.Log, sess *forge.Session) {
	ctx := t.Context()
	ids := forge.NewULIDGen(nil)
	now := time.Now().UTC()
	tr := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: forge.DefaultTenant, SessionID: sess.ID, AgentID: "ag",
		AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: now}
	if _, err := l.Begin(ctx, forge.DefaultTenant, &forge.BeginTurn{Turn: tr},
		eventlog.Draft{Type: forge.EventTurnCreated, ID: tr.ID, TurnID: tr.ID, Data: tr}); err != nil {
		t.Fatal(err)
	}
	thread := sess.MainThreadID
	msg := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: tr.ID,
		ThreadID: thread, Role: forge.RoleAssistant, CreatedAt: now}
	commit := func(ps []*forge.Part, drafts ...eventlog.Draft) int64 {
		t.Helper()
		b := &forge.Batch{Tenant: forge.DefaultTenant, SessionID: sess.ID, TurnID: tr.ID, Messages: []*forge.Message{msg}, Parts: ps}
		evs, err := l.Commit(ctx, b, drafts...)
		if err != nil {
			t.Fatal(err)
		}
		return evs[len(evs)-1].Seq
	}
	newPart := func(typ string) *forge.Part {
		return &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: msg.ID, Type: typ, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
	}
	partDraft := func(p *forge.Part) eventlog.Draft {
		c := p.Clone()
		return eventlog.Draft{Type: forge.EventModelMessage, ID: p.ID, TurnID: tr.ID, ThreadID: thread, Data: c}
	}
	long, short := newPart(forge.PartText), newPart(forge.PartReasoning)
	started := commit([]*forge.Part{long, short}, partDraft(long), partDraft(short))
	want := map[string]string{}
	var last int64
	// at[seq] is what a client has of each part once it read through seq.
	at := map[int64]map[string]string{}
	delta := func(p *forge.Part, text string) {
		t.Helper()
		ev, err := l.PublishDelta(ctx, forge.DefaultTenant, sess.ID, eventlog.Draft{Type: forge.EventModelDelta, ID: p.ID,
			TurnID: tr.ID, ThreadID: thread, Data: forge.DeltaData{Delta: text}})
		if err != nil {
			t.Fatal(err)
		}
		want[p.ID] += text
		last = ev.Seq
		at[last] = map[string]string{long.ID: want[long.ID], short.ID: want[short.ID]}
	}
	for i := range 60 {
		delta(long, fmt.Sprintf("L%d ", i))
		if i%3 == 1 {
			delta(short, fmt.Sprintf("s%d ", i))
		}
	}
	check := func(phase string, wantRows bool) {
		t.Helper()
		rows := 0
		for cursor := int64(0); cursor < last; cursor++ {
			base := at[cursor]
			for c := cursor; base == nil && c > 0; c-- {
				base = at[c]
			}
			got, n := rebuild(t, l, sess.ID, cursor, last, started, maps.Clone(base))
			rows += n
			for _, p := range []*forge.Part{long, short} {
				if got[p.ID] != want[p.ID] {
					t.Fatalf("%s, cursor %d: part %s rebuilt as %q, want %q", phase, cursor, p.ID, got[p.ID], want[p.ID])
				}
			}
		}
		if wantRows && rows == 0 {
			t.Fatalf("%s: no subscriber got a text so far row: nothing was trimmed", phase)
		}
	}
	check("streaming", true)
	long.State, long.Text = forge.StateCompleted, want[long.ID]
	short.State, short.Text = forge.StateCompleted, want[short.ID]
	last = commit([]*forge.Part{long, short}, partDraft(long), partDraft(short))
	check("completed", false)
}

// rebuild reads the session's events after cursor up to last, checks that
// their seqs increase, and returns each part's text as a client that had
// text at the cursor builds it (a model.message sets it, a delta appends),
// with how many text so far rows it got (a streaming model.message above
// the parts' starts, at started).
func rebuild(t *testing.T, l *eventlog.Log, session string, cursor, last, started int64, text map[string]string) (map[string]string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if text == nil {
		text = map[string]string{}
	}
	rows := 0
	prev := cursor
	for ev, err := range l.Events(ctx, forge.DefaultTenant, session, eventlog.Query{After: cursor}) {
		if err != nil {
			t.Fatalf("cursor %d: %v", cursor, err)
		}
		if ev.Seq <= prev {
			t.Fatalf("cursor %d: seq %d after %d", cursor, ev.Seq, prev)
		}
		prev = ev.Seq
		switch ev.Type {
		case forge.EventModelMessage:
			var p forge.Part
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				t.Fatal(err)
			}
			if p.State == forge.StateStreaming && ev.Seq > started {
				rows++
			}
			text[p.ID] = p.Text
		case forge.EventModelDelta:
			var d forge.DeltaData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			text[ev.ID] += d.Delta
		}
		if ev.Seq >= last {
			break
		}
	}
	if prev < last {
		t.Fatalf("cursor %d: stream stopped at %d, before %d", cursor, prev, last)
	}
	return text, rows
}
