package forge

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

var (
	jsonStrings = []string{"", "plain", "<script>alert(1)</script> & more", `quote " back \ slash`,
		"\n\r\t\b\f\x00\x01\x1f\x7f", "line\u2028para\u2029", "bad \xff\xfe utf-8 \xe2\x80", "héllo 日本語 😀",
		"a\u2027b\u202ac", "msg_01M8S19RX84N303WE58KC9MQFG"}
	jsonRaws = []json.RawMessage{nil, {}, json.RawMessage(`{"iteration":1}`),
		json.RawMessage(" {\"a\" : 1,\n \"b\": [1, 2.5e3, true, null]} "), json.RawMessage(`"<&>"`),
		json.RawMessage(`null`), json.RawMessage("{\"x\":\"\u2028\u2029\"}"), json.RawMessage(`{"s":"\u003c"}`),
		json.RawMessage(`{`), json.RawMessage(`[1,]`), json.RawMessage(`"é\ud83d\ude00"`)}
	jsonTimes = []time.Time{{}, time.Date(2026, 12, 1, 14, 49, 19, 528065280, time.UTC),
		time.Date(2026, 12, 1, 14, 49, 19, 0, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("IST", 5*3600+1800)),
		time.Date(1890, 1, 1, 0, 0, 0, 0, time.FixedZone("LMT", 3208)), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2000, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
		time.Now()}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func randPart(r *rand.Rand) *Part {
	if r.IntN(20) == 0 {
		return nil
	}
	p := &Part{ID: pick(r, jsonStrings), MessageID: pick(r, jsonStrings), SessionID: "ses", TurnID: "turn",
		Type: pick(r, jsonStrings), Text: pick(r, jsonStrings), State: pick(r, jsonStrings), CallID: pick(r, jsonStrings),
		Tool: pick(r, jsonStrings), Arguments: pick(r, jsonRaws), Data: pick(r, jsonRaws), Provider: pick(r, jsonRaws),
		CreatedAt: pick(r, jsonTimes), UpdatedAt: pick(r, jsonTimes)}
	if r.IntN(2) == 0 {
		s := pick(r, jsonStrings)
		p.Output = &s
	}
	if r.IntN(2) == 0 {
		s := pick(r, jsonStrings)
		p.Error = &s
	}
	return p
}

func randMessage(r *rand.Rand) *Message {
	m := &Message{ID: pick(r, jsonStrings), Tenant: "t", SessionID: pick(r, jsonStrings), TurnID: pick(r, jsonStrings),
		ThreadID: pick(r, jsonStrings), Role: pick(r, jsonStrings), Author: pick(r, jsonStrings), Model: pick(r, jsonStrings),
		Finish: pick(r, jsonStrings), Summary: r.IntN(2) == 0, Metadata: pick(r, jsonRaws), Origin: "o",
		CreatedAt: pick(r, jsonTimes)}
	if r.IntN(2) == 0 {
		s := pick(r, jsonStrings)
		m.ParentID = &s
	}
	if r.IntN(2) == 0 {
		m.Usage = &Usage{InputTokens: r.Int64N(1e6), OutputTokens: r.Int64N(10), ReasoningTokens: r.Int64N(2),
			CacheReadTokens: r.Int64N(2), CacheWriteTokens: r.Int64N(2),
			Cost: pick(r, []float64{0, 0.25, 1e-7, 123456.789, 1e21, 0.1 + 0.2}), Estimated: r.IntN(2) == 0}
	}
	if r.IntN(3) == 0 {
		m.Forum = &ForumInfo{}
	}
	switch r.IntN(4) {
	case 0: // nil parts
	case 1:
		m.Parts = []*Part{}
	default:
		for range 1 + r.IntN(3) {
			m.Parts = append(m.Parts, randPart(r))
		}
	}
	return m
}

func randTurn(r *rand.Rand) *Turn {
	str := func() *string {
		if r.IntN(2) == 0 {
			return nil
		}
		s := pick(r, jsonStrings)
		return &s
	}
	t := &Turn{ID: pick(r, jsonStrings), Tenant: "t", SessionID: pick(r, jsonStrings), PreviousTurnID: str(),
		AgentID: pick(r, jsonStrings), AgentVersion: r.IntN(1000) - 10, Status: pick(r, jsonStrings),
		CancelReason: str(), CancelMessage: str(), Iterations: r.IntN(5), LastSeq: r.Int64N(1 << 40),
		IdempotencyKey: "k", CreatedAt: pick(r, jsonTimes),
		Usage: Usage{InputTokens: r.Int64N(1e6), Cost: pick(r, []float64{0, 0.5, 1e-9, 3e21})}}
	switch r.IntN(3) {
	case 0:
	case 1:
		t.Input = []Input{}
	default:
		for range 1 + r.IntN(3) {
			in := Input{Type: pick(r, jsonStrings), Text: pick(r, jsonStrings), CallID: pick(r, jsonStrings),
				Reason: pick(r, jsonStrings), Output: str(), IsError: r.IntN(2) == 0, Token: pick(r, jsonStrings)}
			if r.IntN(2) == 0 {
				a := r.IntN(2) == 0
				in.Approved = &a
			}
			t.Input = append(t.Input, in)
		}
	}
	if r.IntN(2) == 0 {
		t.Output = &TurnOutput{MessageID: pick(r, jsonStrings), Text: pick(r, jsonStrings)}
	}
	switch r.IntN(3) {
	case 0:
	case 1:
		t.RequiredActions = []RequiredAction{}
	default:
		for range 1 + r.IntN(2) {
			t.RequiredActions = append(t.RequiredActions, RequiredAction{Type: pick(r, jsonStrings), CallID: pick(r, jsonStrings),
				ThreadID: pick(r, jsonStrings), Tool: pick(r, jsonStrings), Arguments: pick(r, jsonRaws),
				Server: pick(r, jsonStrings), AuthURL: pick(r, jsonStrings)})
		}
	}
	if r.IntN(2) == 0 {
		t.Error = &TurnError{Code: pick(r, jsonStrings), Message: pick(r, jsonStrings)}
	}
	if r.IntN(3) == 0 {
		t.Trigger = &TurnTrigger{CopyID: pick(r, jsonStrings), SourceMessageID: pick(r, jsonStrings), Retry: r.IntN(2) == 0}
	}
	if r.IntN(2) == 0 {
		e := pick(r, jsonTimes)
		t.EndedAt = &e
	}
	return t
}

// reflected is a message as encoding/json's reflection writes it (turn_id
// null when empty), not through Message.MarshalJSON, which is AppendJSON.
type reflected struct{ m *Message }

func (r reflected) MarshalJSON() ([]byte, error) { return r.m.reflectJSON() }

// TestTurnlessMessageTurnIDIsNull: a message outside every turn (a
// forum's, a copy in a monologue) has "turn_id": null through every
// encoder (the event log's AppendJSON, encoding/json for a value, a
// pointer and a list), one in a turn its id; null decodes back to "".
func TestTurnlessMessageTurnIDIsNull(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name, turnID, want string
	}{
		{"outside turns", "", `"turn_id":null`},
		{"in a turn", "turn_1", `"turn_id":"turn_1"`},
	}
	for _, c := range cases {
		m := &Message{ID: "msg_1", SessionID: "ses_1", TurnID: c.turnID, ThreadID: "thr_1", Role: RoleUser, CreatedAt: now,
			Metadata: json.RawMessage(`{"turn_id":""}`), Parts: []*Part{}}
		appended, ok := m.AppendJSON(nil)
		if !ok {
			t.Fatalf("%s: AppendJSON declined", c.name)
		}
		value, err := json.Marshal(*m)
		if err != nil {
			t.Fatal(err)
		}
		pointer, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		list, err := json.Marshal([]*Message{m})
		if err != nil {
			t.Fatal(err)
		}
		reflect, err := m.reflectJSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, enc := range []struct {
			name string
			b    []byte
		}{{"AppendJSON", appended}, {"Marshal value", value}, {"Marshal pointer", pointer}, {"Marshal list", list}, {"reflection", reflect}} {
			if !bytes.Contains(enc.b, []byte(`"session_id":"ses_1",`+c.want+`,`)) || !bytes.Contains(enc.b, []byte(`"metadata":{"turn_id":""}`)) {
				t.Errorf("%s: %s wrote %s, want %s (and the metadata as it is)", c.name, enc.name, enc.b, c.want)
			}
		}
		var back Message
		if err := json.Unmarshal(appended, &back); err != nil || back.TurnID != c.turnID {
			t.Errorf("%s: decoded turn_id %q (%v), want %q", c.name, back.TurnID, err, c.turnID)
		}
	}
}

// checkAppendJSON: where json.Marshal succeeds, AppendJSON writes the same
// bytes or declines; where Marshal fails, AppendJSON declines.
func checkAppendJSON(t *testing.T, v any, appendJSON func([]byte) ([]byte, bool)) (declined bool) {
	t.Helper()
	want, werr := json.Marshal(v)
	got, ok := appendJSON([]byte("prefix"))
	switch {
	case werr != nil && ok:
		t.Fatalf("Marshal fails (%v) but AppendJSON wrote %s", werr, got)
	case werr == nil && ok && !bytes.Equal(got, append([]byte("prefix"), want...)):
		t.Fatalf("AppendJSON differs from Marshal:\ngot:  %s\nwant: prefix%s", got, want)
	}
	return !ok && werr == nil
}

func TestMessageAppendJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	declined := 0
	const n = 20000
	for range n {
		p := randPart(r)
		if checkAppendJSON(t, p, p.AppendJSON) {
			declined++
		}
		m := randMessage(r)
		if checkAppendJSON(t, reflected{m}, m.AppendJSON) {
			declined++
		}
		tu := randTurn(r)
		if checkAppendJSON(t, tu, tu.AppendJSON) {
			declined++
		}
	}
	// Only the awkward times (an offset with seconds) are declined while
	// Marshal would have written them.
	if declined > n {
		t.Errorf("AppendJSON declined %d of %d values Marshal encodes", declined, 3*n)
	}
	// A typical part and message are written, not declined.
	now := time.Now()
	p := &Part{ID: "prt_1", MessageID: "msg_1", Type: PartText, Text: "echo: hi", State: StateCompleted, CreatedAt: now, UpdatedAt: now,
		Data: json.RawMessage(`{"iteration":1}`)}
	m := &Message{ID: "msg_1", SessionID: "ses_1", TurnID: "turn_1", ThreadID: "thr_1", Role: RoleAssistant,
		Model: "scripted/echo", Usage: &Usage{InputTokens: 1, Cost: 0.5}, CreatedAt: now, Parts: []*Part{p}}
	tu := &Turn{ID: "turn_1", SessionID: "ses_1", AgentID: "ag_1", AgentVersion: 1, Status: TurnDone,
		Input: []Input{{Type: InputMessage, Text: "hi"}}, Output: &TurnOutput{MessageID: "msg_1", Text: "echo: hi"},
		RequiredActions: []RequiredAction{}, Usage: Usage{InputTokens: 250, OutputTokens: 2}, Iterations: 1, LastSeq: 1100,
		CreatedAt: now, EndedAt: &now}
	for _, c := range []struct {
		v any
		f func([]byte) ([]byte, bool)
	}{{p, p.AppendJSON}, {reflected{m}, m.AppendJSON}, {tu, tu.AppendJSON}} {
		if checkAppendJSON(t, c.v, c.f) {
			t.Errorf("a typical %T was declined", c.v)
		}
	}
}
