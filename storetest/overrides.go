package storetest

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

// A turn's per-request settings (forge.TurnOverrides) are stored with it:
// written by BeginTurn and EnqueueTurn, kept by the terminal write and a
// promotion, read back by every read of the turn, across a reopen.

func sampleOverrides() *forge.TurnOverrides {
	temp, topP, maxOut := 0.25, 0.5, 321
	return &forge.TurnOverrides{
		Instructions: "Answer in French. «Toujours».", Temperature: &temp, TopP: &topP, MaxOutputTokens: &maxOut,
		Tools: []forge.TurnTool{{Name: "lookup_order", Description: "Find an order.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)}},
		OutputSchema: &forge.OutputSchema{Name: "answer", Schema: json.RawMessage(`{"type":"object"}`), Strict: true},
	}
}

var overrideTests = []test{
	{name: "RoundTripAcrossEndAndReopen", reopen: true, run: func(f *fixture) {
		ses := f.newSession(tenantA)
		plain := f.start(ses, nil, "no settings").turn
		f.end(ses, plain)
		t := f.newTurn(ses, &plain.ID)
		t.Overrides = sampleOverrides()
		f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t}), "BeginTurn")
		f.sameJSON(f.getTurn(t).Overrides, t.Overrides, "overrides as begun")
		f.end(ses, t)
		f.sameJSON(f.getTurn(t).Overrides, t.Overrides, "overrides after the terminal write")
		f.reopen()
		f.sameJSON(f.getTurn(t).Overrides, t.Overrides, "overrides after a reopen")
		byID, err := f.s.GetTurnByID(f.ctx, tenantA, t.ID)
		f.ok(err, "GetTurnByID")
		f.sameJSON(byID.Overrides, t.Overrides, "overrides by id")
		turns, _, err := f.s.ListTurns(f.ctx, tenantA, ses.ID, forge.ListOptions{})
		f.ok(err, "ListTurns")
		eq(f, len(turns), 2, "turns listed")
		if turns[0].Overrides != nil {
			f.Fatalf("a turn begun without overrides has %+v", turns[0].Overrides)
		}
		f.sameJSON(turns[1].Overrides, t.Overrides, "overrides listed")
		b, err := json.Marshal(f.getTurn(plain))
		f.ok(err, "marshal")
		var m map[string]json.RawMessage
		f.ok(json.Unmarshal(b, &m), "unmarshal")
		if _, ok := m["overrides"]; ok {
			f.Fatalf("a turn without overrides shows them: %s", b)
		}
	}},
	{name: "QueuedTurnKeepsThem", run: func(f *fixture) {
		ses := f.newSession(tenantA)
		t1 := f.start(ses, nil, "first").turn
		q := f.newTurn(ses, nil)
		q.Status = forge.TurnQueued
		q.Input = []forge.Input{{Type: forge.InputMessage, Text: "second"}}
		q.RequiredActions = []forge.RequiredAction{}
		q.Overrides = sampleOverrides()
		f.ok(f.s.EnqueueTurn(f.ctx, q, []byte(`{}`)), "EnqueueTurn")
		f.sameJSON(f.getTurn(q).Overrides, q.Overrides, "overrides of the queued turn")
		next, err := f.s.NextQueuedTurn(f.ctx, tenantA, ses.ID)
		f.ok(err, "NextQueuedTurn")
		f.sameJSON(next.Turn.Overrides, q.Overrides, "overrides of the next queued turn")
		f.end(ses, t1)
		f.ok(f.s.BeginTurn(f.ctx, f.promotion(q, &t1.ID)), "promote")
		got := f.getTurn(q)
		eq(f, got.Status, forge.TurnRunning, "promoted")
		f.sameJSON(got.Overrides, q.Overrides, "overrides of the promoted turn")
	}},
}
