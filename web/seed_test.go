package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// seedEchoSession builds a session of n scripted/echo turns (2n messages)
// fast: it runs two real turns through the engine in a template session,
// then writes n copies of the second one straight into the store, with
// fresh ids, its own seqs (gaps included: the deltas' seqs are not
// stored) and "#<i>" in place of the template's marker in every text.
// Each copy is one BeginTurn holding the ended turn, its messages and its
// stored events, exactly as the engine stored the original. The engine
// never saw the new session, so its next live turn reserves seqs above.
func seedEchoSession(t testing.TB, s *testServer, agent, title string, n int) forge.Session {
	t.Helper()
	ctx := context.Background()
	const marker = "#TEMPLATE#"
	tpl := s.createSession(agent, "template")
	s.turn(tpl.ID, "warm up")
	tt := s.turn(tpl.ID, "message "+marker)
	turn, err := s.store.GetTurn(ctx, forge.DefaultTenant, tpl.ID, tt.ID)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := s.store.TurnMessages(ctx, forge.DefaultTenant, tt.ID)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.store.ListEvents(ctx, forge.DefaultTenant, forge.EventQuery{SessionID: tpl.ID, TurnID: tt.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if turn.PreviousTurnID == nil || len(evs) == 0 || len(msgs) != 2 {
		t.Fatalf("template turn %+v with %d messages, %d events", turn, len(msgs), len(evs))
	}
	base := *turn.PreviousTurnID
	prevLast := s.getTurn(tpl.ID, base).LastSeq
	span := turn.LastSeq - prevLast

	ses := s.createSession(agent, title)
	bound, err := s.store.ReserveSeqs(ctx, forge.DefaultTenant, ses.ID, span*int64(n))
	if err != nil {
		t.Fatal(err)
	}
	first := bound - span*int64(n) // the seq every copy's offsets start from
	ids := forge.NewULIDGen(nil)
	var prev *string
	start := time.Now().Add(-time.Duration(n) * time.Second)
	for i := range n {
		// Every id of the template is replaced by a fresh one of its kind.
		repl := []string{tpl.ID, ses.ID, tpl.MainThreadID, ses.MainThreadID, marker, fmt.Sprintf("#%d", i)}
		newTurn := ids.New(forge.PrefixTurn)
		repl = append(repl, turn.ID, newTurn)
		for _, m := range msgs {
			repl = append(repl, m.ID, ids.New(forge.PrefixMessage))
			for _, p := range m.Parts {
				repl = append(repl, p.ID, ids.New(forge.PrefixPart))
			}
		}
		prevID := "null"
		if prev != nil {
			prevID = `"` + *prev + `"`
		}
		r := strings.NewReplacer(repl...)
		prevRepl := strings.NewReplacer(`"previous_turn_id":"`+base+`"`, `"previous_turn_id":`+prevID)
		when := start.Add(time.Duration(i) * time.Second)
		shift := when.Sub(turn.CreatedAt)
		offset := first + int64(i)*span - prevLast

		ct := *turn
		ct.ID, ct.SessionID, ct.PreviousTurnID = newTurn, ses.ID, prev
		ct.Input = append([]forge.Input(nil), turn.Input...)
		for k := range ct.Input {
			ct.Input[k].Text = r.Replace(ct.Input[k].Text)
		}
		if turn.Output != nil {
			ct.Output = &forge.TurnOutput{MessageID: r.Replace(turn.Output.MessageID), Text: r.Replace(turn.Output.Text)}
		}
		ct.LastSeq = turn.LastSeq + offset
		ct.CreatedAt = turn.CreatedAt.Add(shift)
		if turn.EndedAt != nil {
			e := turn.EndedAt.Add(shift)
			ct.EndedAt = &e
		}
		var cm []*forge.Message
		for _, m := range msgs {
			c := *m
			c.ID, c.SessionID, c.TurnID, c.ThreadID = r.Replace(m.ID), ses.ID, newTurn, ses.MainThreadID
			if m.ParentID != nil {
				p := r.Replace(*m.ParentID)
				c.ParentID = &p
			}
			c.CreatedAt = m.CreatedAt.Add(shift)
			c.Parts = nil
			for _, p := range m.Parts {
				cp := p.Clone()
				cp.ID, cp.MessageID, cp.SessionID, cp.TurnID = r.Replace(p.ID), c.ID, ses.ID, newTurn
				cp.Text = r.Replace(p.Text)
				cp.CreatedAt, cp.UpdatedAt = p.CreatedAt.Add(shift), p.UpdatedAt.Add(shift)
				c.Parts = append(c.Parts, cp)
			}
			cm = append(cm, &c)
		}
		var ce []forge.Event
		for _, e := range evs {
			c := e
			c.Seq += offset
			c.ID = r.Replace(e.ID)
			c.SessionID = ses.ID
			tid, thr := newTurn, ses.MainThreadID
			c.TurnID = &tid
			if e.ThreadID != nil {
				c.ThreadID = &thr
			}
			c.CreatedAt = e.CreatedAt.Add(shift)
			c.Data = []byte(prevRepl.Replace(r.Replace(string(e.Data))))
			ce = append(ce, c)
		}
		if err := s.store.BeginTurn(ctx, &forge.BeginTurn{Turn: &ct, Messages: cm, Events: ce}); err != nil {
			t.Fatalf("seeding turn %d: %v", i, err)
		}
		id := newTurn
		prev = &id
	}
	return s.session(ses.ID)
}
