package eventpack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

func TestLZRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	words := func(n int) []byte {
		var b []byte
		for len(b) < n {
			b = append(b, []string{"alpha", "beta", `{"id":"`, "gamma", "\x00", "prt_01J"}[rng.IntN(6)]...)
		}
		return b[:n]
	}
	dict := words(3000)
	for _, c := range []struct {
		name      string
		src, dict []byte
	}{
		{"empty", nil, nil},
		{"empty with dict", nil, dict},
		{"one byte", []byte("x"), nil},
		{"three bytes", []byte("abc"), dict},
		{"random", random(5000), nil},
		{"random with dict", random(5000), dict},
		{"words", words(8000), nil},
		{"words with dict", words(8000), dict},
		{"dict itself", dict, dict},
		{"run", bytes.Repeat([]byte("a"), 10000), nil},
		{"overlapping run", append([]byte("xyz"), bytes.Repeat([]byte("xyzw"), 500)...), nil},
	} {
		z := compress(nil, c.src, c.dict)
		got, err := decompress(nil, z, c.dict, len(c.src))
		if err != nil || !bytes.Equal(got, c.src) {
			t.Errorf("%s: round trip failed (%v)", c.name, err)
		}
		// Appending to a buffer that has content keeps it.
		got, err = decompress([]byte("head"), z, c.dict, len(c.src))
		if err != nil || !bytes.Equal(got, append([]byte("head"), c.src...)) {
			t.Errorf("%s: round trip after a prefix failed (%v)", c.name, err)
		}
	}
	// Repetition is what it is for.
	w := words(8000)
	if z := compress(nil, w, nil); len(z) > len(w)/3 {
		t.Errorf("8000 bytes of six words compress to %d", len(z))
	}
	if z := compress(nil, dict, dict); len(z) > 16 {
		t.Errorf("the dictionary itself compresses to %d bytes", len(z))
	}
}

func TestLZRefusesCorruptStreams(t *testing.T) {
	src := []byte(strings.Repeat("event log ", 50))
	dict := []byte("the event log of a turn")
	z := compress(nil, src, dict)
	if _, err := decompress(nil, z, dict, len(src)+1); err == nil {
		t.Error("a stream shorter than its length decoded")
	}
	if _, err := decompress(nil, z, dict, len(src)-1); err == nil {
		t.Error("a stream longer than its length decoded")
	}
	if _, err := decompress(nil, z[:len(z)-1], dict, len(src)); err == nil {
		t.Error("a truncated stream decoded")
	}
	// A distance reaching before the dictionary.
	bad := []byte{0, 0, 200, 1}
	if _, err := decompress(nil, bad, dict, 4); err == nil {
		t.Error("a distance before the window decoded")
	}
}

func FuzzLZ(f *testing.F) {
	f.Add([]byte("hello hello hello"), []byte("hello"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, src, dict []byte) {
		z := compress(nil, src, dict)
		got, err := decompress(nil, z, dict, len(src))
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("round trip failed: %v", err)
		}
		// Any bytes as a stream: an error or some output, never a panic.
		_, _ = decompress(nil, src, dict, len(dict))
	})
}

func ptr(s string) *string { return &s }

// sample is a trivial turn as the engine writes it: the turn, the user
// message, the reply's message and its parts, their events, and the final
// rows.
func sample() ([]forge.Event, *Rows) {
	at := time.Date(2026, 12, 2, 0, 23, 32, 118710455, time.UTC)
	tick := func(d int) time.Time { return at.Add(time.Duration(d) * time.Microsecond) }
	ses, turnID, thr := "ses_01M8T254Q1DBBYQWZ6Q5F8MES7", "turn_01M8T2560PA6GS8JG3TW4YK0SQ", "thr_01M8T254Q1DBBYQWZ6Q5F8MES8"
	prev := "turn_01M8T255ZW2D9T3YC2B0QYPR0C"
	turn := &forge.Turn{ID: turnID, SessionID: ses, PreviousTurnID: &prev, AgentID: "ag_01M8T254PW5WN5PNRVRBE1MHTP",
		AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{{Type: "message", Text: "hi"}},
		RequiredActions: []forge.RequiredAction{}, CreatedAt: tick(0)}
	user := &forge.Message{ID: "msg_01M8T2560PA6GS8JG3TW4YK0SR", SessionID: ses, TurnID: turnID, ThreadID: thr,
		Role: forge.RoleUser, ParentID: ptr("msg_01M8T255ZW2D9T3YC2B0QYPR0F"), CreatedAt: tick(5)}
	user.Parts = []*forge.Part{{ID: "prt_01M8T2560PA6GS8JG3TW4YK0SS", MessageID: user.ID, Type: forge.PartText,
		Text: "hi", State: forge.StateCompleted, CreatedAt: tick(5), UpdatedAt: tick(5)}}
	reply := &forge.Message{ID: "msg_01M8T2560SDSCT1Z2R6CEXBFHH", SessionID: ses, TurnID: turnID, ThreadID: thr,
		Role: forge.RoleAssistant, ParentID: &user.ID, Model: "scripted/echo", CreatedAt: tick(2400)}
	start := &forge.Part{ID: "prt_01M8T2560SDSCT1Z2R6CEXBFHJ", MessageID: reply.ID, Type: forge.PartStepStart,
		Data: json.RawMessage(`{"iteration":1}`), CreatedAt: tick(2402), UpdatedAt: tick(2402)}
	text := &forge.Part{ID: "prt_01M8T2560SDSCT1Z2R6CEXBFHK", MessageID: reply.ID, Type: forge.PartText,
		State: forge.StateStreaming, CreatedAt: tick(2460), UpdatedAt: tick(2460)}
	usage := forge.Usage{InputTokens: 125, OutputTokens: 2}
	finish := &forge.Part{ID: "prt_01M8T2560SDSCT1Z2R6CEXBFHM", MessageID: reply.ID, Type: forge.PartStepFinish,
		Data:      json.RawMessage(`{"finish":"stop","iteration":1,"usage":{"input_tokens":125,"output_tokens":2,"cost":0}}`),
		CreatedAt: tick(2480), UpdatedAt: tick(2480)}

	var evs []forge.Event
	seq := int64(550)
	emit := func(typ, id string, thread *string, v any) {
		seq++
		if seq == 556 {
			seq = 558 // deltas took these
		}
		data, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		evs = append(evs, forge.Event{Seq: seq, ID: id, Type: typ, SessionID: ses, TurnID: ptr(turnID),
			ThreadID: thread, CreatedAt: tick(int(seq-550) * 3), Data: data})
	}
	clone := func(m *forge.Message) *forge.Message { return m.Clone() }
	emit(forge.EventTurnCreated, turnID, nil, turn)
	emit(forge.EventMessageCreated, user.ID, &thr, user)
	reply.Parts = []*forge.Part{start}
	emit(forge.EventMessageCreated, reply.ID, &thr, clone(reply))
	emit(forge.EventStepStarted, start.ID, &thr, start)
	emit(forge.EventModelMessage, text.ID, &thr, text.Clone())
	text.Text, text.State, text.UpdatedAt = "echo: hi", forge.StateCompleted, tick(2470)
	emit(forge.EventModelMessage, text.ID, &thr, text)
	emit(forge.EventStepFinished, finish.ID, &thr, finish)
	reply.Parts = []*forge.Part{start, text, finish}
	reply.Finish, reply.Usage = forge.FinishStop, &usage
	emit(forge.EventMessageUpdated, reply.ID, &thr, clone(reply))
	done := *turn
	done.Status, done.Output = forge.TurnDone, &forge.TurnOutput{MessageID: reply.ID, Text: "echo: hi"}
	done.Usage, done.Iterations, done.EndedAt = usage, 1, ptrTime(tick(2500))
	done.LastSeq = seq + 1
	emit(forge.EventTurnDone, turnID, nil, &done)

	rows := NewRows()
	rows.AddTurn(&done)
	rows.AddMessage(user)
	rows.AddMessage(reply)
	return evs, rows
}

func ptrTime(t time.Time) *time.Time { return &t }

// wire is what a client gets for evs: the JSON of each.
func wire(t *testing.T, evs []forge.Event) []string {
	t.Helper()
	out := make([]string, len(evs))
	for i, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

func TestPackRoundTripsByteForByte(t *testing.T) {
	evs, rows := sample()
	turn := evs[0].TurnID
	for _, c := range []struct {
		name string
		refs []Ref
	}{
		{"no refs", nil},
		{"refs", RefsFor(evs, rows, "")},
	} {
		body, err := Encode(evs, turn, c.refs, rows)
		if err != nil {
			t.Fatal(err)
		}
		h, err := ReadHeader(body)
		if err != nil || h.Count != len(evs) || !reflect.DeepEqual(h.Refs, c.refs) {
			t.Fatalf("%s: header %+v, %v", c.name, h, err)
		}
		got, err := Decode(body, evs[0].SessionID, rows)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(wire(t, got), wire(t, evs)) || !reflect.DeepEqual(got, evs) {
			t.Fatalf("%s: decoded\n%s\nwant\n%s", c.name, wire(t, got), wire(t, evs))
		}
		t.Logf("%s: %d bytes for %d events", c.name, len(body), len(evs))
	}
}

// TestPackIsSmall pins what packing a trivial turn against its rows is
// for: its events cost a small fraction of their JSON.
func TestPackIsSmall(t *testing.T) {
	evs, rows := sample()
	var raw int
	for _, w := range wire(t, evs) {
		raw += len(w)
	}
	body, err := Encode(evs, evs[0].TurnID, RefsFor(evs, rows, ""), rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 300 {
		t.Errorf("a trivial turn's %d events (%d bytes of JSON) pack into %d bytes, want at most 300", len(evs), raw, len(body))
	}
	plain, err := Encode(evs, evs[0].TurnID, nil, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) > raw/2 {
		t.Errorf("without rows, %d bytes of JSON pack into %d", raw, len(plain))
	}
	t.Logf("%d events, %d bytes of JSON: %d bytes against their rows, %d without", len(evs), raw, len(body), len(plain))
}

func TestPackEnvelopes(t *testing.T) {
	// Every envelope shape: no turn, another turn, no thread, a thread
	// that repeats or changes, an unknown type, no data, empty data,
	// time going backwards, seqs far apart.
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	evs := []forge.Event{
		{Seq: 1, ID: "a", Type: "custom.type", SessionID: "s", CreatedAt: at},
		{Seq: 2, ID: "", Type: forge.EventPatch, SessionID: "s", TurnID: ptr("t1"), ThreadID: ptr("th1"), CreatedAt: at.Add(-time.Hour), Data: json.RawMessage(`{}`)},
		{Seq: 3, ID: "b", Type: forge.EventPatch, SessionID: "s", TurnID: ptr("t1"), ThreadID: ptr("th1"), CreatedAt: at, Data: json.RawMessage(`"x"`)},
		{Seq: 1 << 40, ID: "c", Type: forge.EventForumMessage, SessionID: "s", TurnID: ptr("t2"), ThreadID: ptr("th2"), CreatedAt: time.Unix(0, 0).UTC(), Data: json.RawMessage("[1,2]")},
		{Seq: 1<<40 + 1, ID: "d\x00é", Type: forge.EventForumMessage, SessionID: "s", ThreadID: ptr("th2"), CreatedAt: at},
	}
	for _, turn := range []*string{nil, ptr("t1"), ptr("none")} {
		body, err := Encode(evs, turn, nil, NewRows())
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(body, "s", NewRows())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, evs) {
			t.Fatalf("turn %v: decoded %+v", turn, got)
		}
		// Decoded events share no pointer.
		*got[2].TurnID = "changed"
		if *got[1].TurnID != "t1" {
			t.Fatal("decoded events share a turn id")
		}
	}
	// Empty data is stored as no data, as the old log stored it (NULL).
	empty := []forge.Event{{Seq: 1, ID: "a", Type: forge.EventPatch, SessionID: "s", CreatedAt: at, Data: json.RawMessage{}}}
	body, err := Encode(empty, nil, nil, NewRows())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(body, "s", NewRows()); err != nil || got[0].Data != nil {
		t.Fatalf("empty data decoded as %q, %v", got[0].Data, err)
	}
	if _, err := Encode(nil, nil, nil, NewRows()); err == nil {
		t.Error("an empty pack encoded")
	}
	if _, err := Encode([]forge.Event{evs[1], evs[0]}, nil, nil, NewRows()); err == nil {
		t.Error("events out of seq order encoded")
	}
	if _, err := Encode([]forge.Event{evs[0], evs[0]}, nil, nil, NewRows()); err == nil {
		t.Error("a seq twice encoded")
	}
}

func TestDecodeAgainstOtherRowsFails(t *testing.T) {
	evs, rows := sample()
	refs := RefsFor(evs, rows, "")
	body, err := Encode(evs, evs[0].TurnID, refs, rows)
	if err != nil {
		t.Fatal(err)
	}
	changes := map[string]func(r *Rows){
		"part text":   func(r *Rows) { r.Message("msg_01M8T2560SDSCT1Z2R6CEXBFHH").Parts[1].Text = "echo: hI" },
		"turn status": func(r *Rows) { r.Turn("turn_01M8T2560PA6GS8JG3TW4YK0SQ").Status = forge.TurnErrored },
		"a part more": func(r *Rows) {
			m := r.Message("msg_01M8T2560SDSCT1Z2R6CEXBFHH")
			m.Parts = append(m.Parts, &forge.Part{ID: "prt_x", MessageID: m.ID, Type: forge.PartText})
		},
		"message gone": func(r *Rows) {
			user := r.Message("msg_01M8T2560PA6GS8JG3TW4YK0SR")
			delete(r.messages, user.ID)
			r.byTurn[user.TurnID] = r.byTurn[user.TurnID][1:]
		},
	}
	for name, change := range changes {
		_, r := sample()
		change(r)
		if _, err := Decode(body, evs[0].SessionID, r); !errors.Is(err, ErrRowsChanged) {
			t.Errorf("%s: decode gave %v, want ErrRowsChanged", name, err)
		}
	}
	// Metadata is not part of the dictionary: marking a message later
	// (a published forum reply) leaves its events readable.
	_, r := sample()
	r.Message("msg_01M8T2560SDSCT1Z2R6CEXBFHH").Metadata = json.RawMessage(`{"type":"reply"}`)
	got, err := Decode(body, evs[0].SessionID, r)
	if err != nil || !reflect.DeepEqual(wire(t, got), wire(t, evs)) {
		t.Fatalf("after a metadata change: %v", err)
	}
}

func TestRefsFor(t *testing.T) {
	evs, rows := sample()
	got := RefsFor(evs, rows, "")
	want := []Ref{{Kind: RefTurn, ID: "turn_01M8T2560PA6GS8JG3TW4YK0SQ"},
		{Kind: RefMessage, ID: "msg_01M8T2560PA6GS8JG3TW4YK0SR"}, {Kind: RefMessage, ID: "msg_01M8T2560SDSCT1Z2R6CEXBFHH"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("refs %+v, want %+v", got, want)
	}
	// Part events alone refer to their parts.
	var partEvs []forge.Event
	for _, e := range evs {
		if e.Type == forge.EventModelMessage || e.Type == forge.EventStepStarted {
			partEvs = append(partEvs, e)
		}
	}
	got = RefsFor(partEvs, rows, "")
	want = []Ref{{Kind: RefPart, Message: "msg_01M8T2560SDSCT1Z2R6CEXBFHH", ID: "prt_01M8T2560SDSCT1Z2R6CEXBFHJ"},
		{Kind: RefPart, Message: "msg_01M8T2560SDSCT1Z2R6CEXBFHH", ID: "prt_01M8T2560SDSCT1Z2R6CEXBFHK"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("refs of part events %+v, want %+v", got, want)
	}
	body, err := Encode(partEvs, partEvs[0].TurnID, got, rows)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Decode(body, partEvs[0].SessionID, rows)
	if err != nil || !reflect.DeepEqual(dec, partEvs) {
		t.Fatalf("part refs: %v", err)
	}
	if _, err := Encode(partEvs, nil, []Ref{{Kind: RefTurn, ID: "turn_ghost"}}, rows); !errors.Is(err, ErrRowsChanged) {
		t.Errorf("a ref to a missing row encoded: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	evs, rows := sample()
	body, err := Encode(evs, evs[0].TurnID, RefsFor(evs, rows, ""), rows)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	plain, _ := Encode(evs, nil, nil, rows)
	f.Add(plain)
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never a panic; an error or events.
		_, _ = Decode(b, "s", rows)
	})
}

// TestRowEncodingIsFrozen pins the JSON of rows as the dictionary holds
// it. A stored body decodes only against these bytes: if forge's encoding
// of a turn, message or part changes, this test fails, and the old
// encoding must be kept (a frozen copy here) for the bodies of version 1,
// with a new version for bodies encoded with the new one.
func TestRowEncodingIsFrozen(t *testing.T) {
	evs, rows := sample()
	_ = evs
	var got []string
	for _, ref := range []Ref{{Kind: RefTurn, ID: "turn_01M8T2560PA6GS8JG3TW4YK0SQ"},
		{Kind: RefMessage, ID: "msg_01M8T2560SDSCT1Z2R6CEXBFHH"},
		{Kind: RefPart, Message: "msg_01M8T2560SDSCT1Z2R6CEXBFHH", ID: "prt_01M8T2560SDSCT1Z2R6CEXBFHK"}} {
		b, err := rowBytes(nil, ref, rows)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	// A row with every field set.
	full := &forge.Message{ID: "msg_1", SessionID: "ses_1", ThreadID: "thr_1", Role: forge.RoleAssistant,
		Author: "agent:x", Model: "m", Finish: forge.FinishToolCalls, Usage: &forge.Usage{InputTokens: 1, OutputTokens: 2,
			ReasoningTokens: 3, CacheReadTokens: 4, CacheWriteTokens: 5, Cost: 0.5, Estimated: true}, Summary: true,
		Metadata: json.RawMessage(`{"type":"reply"}`), CreatedAt: time.Unix(1, 2).UTC(),
		Parts: []*forge.Part{{ID: "prt_1", MessageID: "msg_1", Type: forge.PartTool, State: forge.StateError,
			CallID: "call_1", Tool: "echo", Arguments: json.RawMessage(`{"a":1}`), Output: ptr("o"), Error: ptr("e"),
			Data: json.RawMessage(`{"d":true}`), Provider: json.RawMessage(`{"p":1}`), CreatedAt: time.Unix(3, 4).UTC(),
			UpdatedAt: time.Unix(5, 6).UTC()}}}
	fr := NewRows()
	fr.AddMessage(full)
	ended := time.Unix(9, 0).UTC()
	fr.AddTurn(&forge.Turn{ID: "turn_1", SessionID: "ses_1", AgentID: "ag_1", AgentVersion: 2,
		Status: forge.TurnCancelled, Input: []forge.Input{{Type: "message", Text: "t"}},
		Output: &forge.TurnOutput{MessageID: "msg_1", Text: "x"}, Error: &forge.TurnError{Code: "c", Message: "m"},
		CancelReason: ptr("client"), CancelMessage: ptr("why"), Usage: forge.Usage{InputTokens: 7}, Iterations: 3,
		LastSeq: 99, CreatedAt: time.Unix(8, 0).UTC(), EndedAt: &ended})
	for _, ref := range []Ref{{Kind: RefMessage, ID: "msg_1"}, {Kind: RefTurn, ID: "turn_1"}} {
		b, err := rowBytes(nil, ref, fr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	want := []string{
		`{"id":"turn_01M8T2560PA6GS8JG3TW4YK0SQ","session_id":"ses_01M8T254Q1DBBYQWZ6Q5F8MES7","previous_turn_id":"turn_01M8T255ZW2D9T3YC2B0QYPR0C","agent_id":"ag_01M8T254PW5WN5PNRVRBE1MHTP","agent_version":1,"status":"done","input":[{"type":"message","text":"hi"}],"output":{"message_id":"msg_01M8T2560SDSCT1Z2R6CEXBFHH","text":"echo: hi"},"required_actions":[],"error":null,"cancel_reason":null,"usage":{"input_tokens":125,"output_tokens":2,"cost":0},"iterations":1,"last_seq":561,"created_at":"2026-12-02T00:23:32.118710455Z","ended_at":"2026-12-02T00:23:32.121210455Z"}`,
		`{"id":"msg_01M8T2560SDSCT1Z2R6CEXBFHH","session_id":"ses_01M8T254Q1DBBYQWZ6Q5F8MES7","turn_id":"turn_01M8T2560PA6GS8JG3TW4YK0SQ","thread_id":"thr_01M8T254Q1DBBYQWZ6Q5F8MES8","role":"assistant","parent_id":"msg_01M8T2560PA6GS8JG3TW4YK0SR","model":"scripted/echo","finish":"stop","usage":{"input_tokens":125,"output_tokens":2,"cost":0},"created_at":"2026-12-02T00:23:32.121110455Z","parts":[{"id":"prt_01M8T2560SDSCT1Z2R6CEXBFHJ","message_id":"msg_01M8T2560SDSCT1Z2R6CEXBFHH","type":"step-start","data":{"iteration":1},"created_at":"2026-12-02T00:23:32.121112455Z","updated_at":"2026-12-02T00:23:32.121112455Z"},{"id":"prt_01M8T2560SDSCT1Z2R6CEXBFHK","message_id":"msg_01M8T2560SDSCT1Z2R6CEXBFHH","type":"text","text":"echo: hi","state":"completed","created_at":"2026-12-02T00:23:32.121170455Z","updated_at":"2026-12-02T00:23:32.121180455Z"},{"id":"prt_01M8T2560SDSCT1Z2R6CEXBFHM","message_id":"msg_01M8T2560SDSCT1Z2R6CEXBFHH","type":"step-finish","data":{"finish":"stop","iteration":1,"usage":{"input_tokens":125,"output_tokens":2,"cost":0}},"created_at":"2026-12-02T00:23:32.121190455Z","updated_at":"2026-12-02T00:23:32.121190455Z"}]}`,
		`{"id":"prt_01M8T2560SDSCT1Z2R6CEXBFHK","message_id":"msg_01M8T2560SDSCT1Z2R6CEXBFHH","type":"text","text":"echo: hi","state":"completed","created_at":"2026-12-02T00:23:32.121170455Z","updated_at":"2026-12-02T00:23:32.121180455Z"}`,
		`{"id":"msg_1","session_id":"ses_1","turn_id":null,"thread_id":"thr_1","role":"assistant","parent_id":null,"author":"agent:x","model":"m","finish":"tool_calls","usage":{"input_tokens":1,"output_tokens":2,"reasoning_tokens":3,"cache_read_tokens":4,"cache_write_tokens":5,"cost":0.5,"estimated":true},"summary":true,"created_at":"1970-01-01T00:00:01.000000002Z","parts":[{"id":"prt_1","message_id":"msg_1","type":"tool","state":"error","call_id":"call_1","tool":"echo","arguments":{"a":1},"output":"o","error":"e","data":{"d":true},"created_at":"1970-01-01T00:00:03.000000004Z","updated_at":"1970-01-01T00:00:05.000000006Z"}]}`,
		`{"id":"turn_1","session_id":"ses_1","previous_turn_id":null,"agent_id":"ag_1","agent_version":2,"status":"cancelled","input":[{"type":"message","text":"t"}],"output":{"message_id":"msg_1","text":"x"},"required_actions":null,"error":{"code":"c","message":"m"},"cancel_reason":"client","cancel_message":"why","usage":{"input_tokens":7,"output_tokens":0,"cost":0},"iterations":3,"last_seq":99,"created_at":"1970-01-01T00:00:08Z","ended_at":"1970-01-01T00:00:09Z"}`,
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Errorf("row %d encodes as\n%s\nwant\n%s", i, fmt.Sprint(got[i]), want[i])
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	evs, rows := sample()
	refs := RefsFor(evs, rows, *evs[0].TurnID)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(evs, evs[0].TurnID, refs, rows); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	evs, rows := sample()
	body, err := Encode(evs, evs[0].TurnID, RefsFor(evs, rows, *evs[0].TurnID), rows)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(body, evs[0].SessionID, rows); err != nil {
			b.Fatal(err)
		}
	}
}
