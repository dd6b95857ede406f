package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/forge-runtime/forge"
)

// SeedBranch writes a direct session of tenant whose turns chain one after
// the other, each with perTurn messages (a user message, then assistant
// messages, one text part each), n messages in all, as a long trivial
// session leaves them. It returns the session and its tip turn.
func SeedBranch(tb testing.TB, s forge.Store, tenant string, n, perTurn int) (*forge.Session, string) {
	tb.Helper()
	ctx := context.Background()
	clock := &stepClock{t: base}
	ids := forge.NewULIDGen(clock)
	ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: "bench",
		MainThreadID: ids.New(forge.PrefixThread), CreatedAt: clock.Now()}
	if err := s.CreateSession(ctx, ses); err != nil {
		tb.Fatal(err)
	}
	var prev *string
	for written := 0; written < n; {
		now := clock.Now()
		t := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: tenant, SessionID: ses.ID, PreviousTurnID: prev,
			AgentID: "ag_bench", AgentVersion: 1, Status: forge.TurnDone, CreatedAt: now, EndedAt: &now,
			Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}}
		var msgs []*forge.Message
		var parent *string
		for i := 0; i < perTurn && written < n; i++ {
			role := forge.RoleAssistant
			if i == 0 {
				role = forge.RoleUser
			}
			m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: tenant, SessionID: ses.ID, TurnID: t.ID,
				ThreadID: ses.MainThreadID, Role: role, ParentID: parent, CreatedAt: clock.Now()}
			if role == forge.RoleAssistant {
				m.Finish = forge.FinishStop
			}
			m.Parts = []*forge.Part{{ID: ids.New(forge.PrefixPart), MessageID: m.ID, Type: forge.PartText,
				State: forge.StateCompleted, Text: fmt.Sprintf("message %d of a long session", written)}}
			id := m.ID
			parent = &id
			msgs = append(msgs, m)
			written++
		}
		if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: t, Messages: msgs}); err != nil {
			tb.Fatal(err)
		}
		id := t.ID
		prev = &id
	}
	return ses, *prev
}

// BenchListMessages lists the whole branch of a session SeedBranch wrote
// (n messages in turns of perTurn) page after page, following each page's
// cursor, and reports the pages per listing: the cost of GET
// /v1/sessions/{id}/messages to the end.
func BenchListMessages(b *testing.B, s forge.Store, n, perTurn, limit int) {
	ses, tip := SeedBranch(b, s, "bench", n, perTurn)
	ctx := context.Background()
	list := func() int {
		pages, got := 0, 0
		q := forge.MessageQuery{SessionID: ses.ID, TipTurnID: tip, ListOptions: forge.ListOptions{Limit: limit}}
		for {
			ms, next, err := s.ListMessages(ctx, ses.Tenant, q)
			if err != nil {
				b.Fatal(err)
			}
			pages++
			got += len(ms)
			if next == "" {
				break
			}
			q.Cursor = next
		}
		if got != n {
			b.Fatalf("listed %d messages, want %d", got, n)
		}
		return pages
	}
	pages := list()
	cpu := CPUTime()
	b.ResetTimer()
	for b.Loop() {
		list()
	}
	b.ReportMetric(float64(pages), "pages/op")
	b.ReportMetric(float64((CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// Forks is a session whose turns fork, written by WriteForks, with the
// message ids of the branch ending at each of its turns.
type Forks struct {
	Session  *forge.Session
	Turns    map[string]string   // "A".."G", "R" -> turn id
	Branches map[string][]string // tip turn id -> its branch's message ids
}

// WriteForks writes a session of tenant whose turns fork: A <- B <- C,
// D <- E forked from A, F chained from C once the tip had moved to E, a
// new root R and G chained from it. Each turn writes two messages.
func WriteForks(tb testing.TB, s forge.Store, tenant string) *Forks {
	tb.Helper()
	ctx := context.Background()
	clock := &stepClock{t: base}
	ids := forge.NewULIDGen(clock)
	ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: "forks",
		MainThreadID: ids.New(forge.PrefixThread), CreatedAt: clock.Now()}
	if err := s.CreateSession(ctx, ses); err != nil {
		tb.Fatal(err)
	}
	fk := &Forks{Session: ses, Turns: map[string]string{}, Branches: map[string][]string{}}
	turn := func(name, prev string) string {
		now := clock.Now()
		t := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: tenant, SessionID: ses.ID, AgentID: "ag_forks",
			AgentVersion: 1, Status: forge.TurnDone, CreatedAt: now, EndedAt: &now}
		var branch []string
		if prev != "" {
			t.PreviousTurnID = &prev
			branch = append(branch, fk.Branches[prev]...)
		}
		var msgs []*forge.Message
		for _, role := range []string{forge.RoleUser, forge.RoleAssistant} {
			m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: tenant, SessionID: ses.ID, TurnID: t.ID,
				ThreadID: ses.MainThreadID, Role: role, CreatedAt: clock.Now(),
				Parts: []*forge.Part{{ID: ids.New(forge.PrefixPart), Type: forge.PartText, State: forge.StateCompleted, Text: role}}}
			m.Parts[0].MessageID = m.ID
			msgs = append(msgs, m)
			branch = append(branch, m.ID)
		}
		if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: t, Messages: msgs}); err != nil {
			tb.Fatal(err)
		}
		fk.Branches[t.ID] = branch
		fk.Turns[name] = t.ID
		return t.ID
	}
	a := turn("A", "")
	b := turn("B", a)
	c := turn("C", b)
	d := turn("D", a)
	turn("E", d)
	turn("F", c)
	r := turn("R", "")
	turn("G", r)
	return fk
}

// Check fails tb unless ListMessages (in pages of 3) and
// LatestCompaction (none) answer for each turn of fk as written.
func (fk *Forks) Check(tb testing.TB, s forge.Store) {
	tb.Helper()
	ctx := context.Background()
	for tip, want := range fk.Branches {
		got := []string{}
		q := forge.MessageQuery{SessionID: fk.Session.ID, TipTurnID: tip, ListOptions: forge.ListOptions{Limit: 3}}
		for {
			ms, next, err := s.ListMessages(ctx, fk.Session.Tenant, q)
			if err != nil {
				tb.Fatalf("ListMessages to %s: %v", tip, err)
			}
			for _, m := range ms {
				got = append(got, m.ID)
			}
			if next == "" {
				break
			}
			q.Cursor = next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			tb.Fatalf("branch ending at %s:\n got %v\nwant %v", tip, got, want)
		}
		if b, err := s.LatestCompaction(ctx, fk.Session.Tenant, q); err != nil || b != nil {
			tb.Fatalf("LatestCompaction to %s: %+v, %v", tip, b, err)
		}
	}
}
