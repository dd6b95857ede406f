package forge_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestEventAppendJSON: the envelope written directly is json.Marshal's,
// byte for byte, over awkward values; Encode's Data is the data's slice of
// Wire.
func TestEventAppendJSON(t *testing.T) {
	turn, thread := "turn_1", "thr_<&>\u2028"
	for _, ev := range []forge.Event{
		{Seq: 1, ID: "prt_1", Type: forge.EventModelDelta, SessionID: "ses_1", TurnID: &turn, ThreadID: &thread,
			CreatedAt: time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600)), Data: json.RawMessage(`{"delta":"a\u003c\"b"}`)},
		{Seq: 1 << 60, ID: "", Type: "forum.message", SessionID: "ses_\xff", Data: json.RawMessage(`{"data": {"x" : [1, 2]} , "<": "&"}`)},
		{Seq: 2, Type: "t", Data: nil},
	} {
		want, err := json.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ev.AppendJSON(nil)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON = %s (%v)\nwant          %s", got, ok, want)
		}
		enc := ev
		if err := enc.Encode(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc.Wire, want) {
			t.Fatalf("Wire = %s, want %s", enc.Wire, want)
		}
		var back struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		if ev.Data == nil {
			back.Data = nil
		}
		if !bytes.Equal(enc.Data, back.Data) {
			t.Fatalf("Data = %s, want %s", enc.Data, back.Data)
		}
		if j, _ := enc.JSON(); !bytes.Equal(j, want) {
			t.Fatalf("JSON = %s", j)
		}
		if compact, err := json.Marshal(ev.Data); err == nil && ev.Data != nil {
			trusted := ev
			trusted.Data = compact // what the event log hands EncodeTrusted
			if err := trusted.EncodeTrusted(); err != nil || !bytes.Equal(trusted.Wire, want) {
				t.Fatalf("EncodeTrusted = %s (%v), want %s", trusted.Wire, err, want)
			}
		}
	}
	bad := forge.Event{Seq: 1, Data: json.RawMessage(`{`)}
	if err := bad.Encode(); err == nil {
		t.Fatal("Encode of invalid data: no error")
	}
}

// TestEventDecodeWire: an envelope Encode wrote decodes to the same event
// as json.Unmarshal gives, with Wire kept; any other form is Unmarshal's,
// without Wire.
func TestEventDecodeWire(t *testing.T) {
	turn, thread := "turn_1", "thr_1"
	odd := "thr_<&>\u2028"
	encoded := func(ev forge.Event) []byte {
		if err := ev.Encode(); err != nil {
			t.Fatal(err)
		}
		return ev.Wire
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		name     string
		raw      []byte
		wireKept bool
	}{
		{"delta", encoded(forge.Event{Seq: 7, ID: "prt_1", Type: forge.EventModelDelta, SessionID: "ses_1", TurnID: &turn, ThreadID: &thread,
			CreatedAt: at, Data: json.RawMessage(`{"delta":"a\u003c\"b \\n"}`)}), true},
		{"no turn, null data", encoded(forge.Event{Seq: 1 << 60, Type: "t", SessionID: "ses_1", CreatedAt: at}), true},
		{"offset time", encoded(forge.Event{Seq: 2, Type: "t", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", -7*3600)), Data: json.RawMessage(`[1,{"a":" "}]`)}), true},
		{"escaped thread", encoded(forge.Event{Seq: 3, Type: "t", ThreadID: &odd, CreatedAt: at, Data: json.RawMessage(`1`)}), false},
		{"non-ASCII id", encoded(forge.Event{Seq: 3, ID: "é", Type: "t", CreatedAt: at, Data: json.RawMessage(`1`)}), false},
		{"spaced data", []byte(`{"seq":1,"id":"a","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":{"a": 1}}`), false},
		{"members reordered", []byte(`{"id":"a","seq":1,"type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":1}`), false},
		{"time not as Marshal writes it", []byte(`{"seq":1,"id":"a","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00.000Z","data":1}`), false},
		{"seq with a plus", []byte(`{"seq":01,"id":"a","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":1}`), false},
		{"unescaped html in data", []byte(`{"seq":1,"id":"a","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":"<"}`), false},
		{"trailing member", []byte(`{"seq":1,"id":"a","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":1,"x":2}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want forge.Event
			wantErr := json.Unmarshal(tc.raw, &want)
			var got forge.Event
			err := got.DecodeWire(tc.raw)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("DecodeWire error %v, Unmarshal's %v", err, wantErr)
			}
			if err != nil {
				return
			}
			if (got.Wire != nil) != tc.wireKept {
				t.Fatalf("Wire kept: %v, want %v", got.Wire != nil, tc.wireKept)
			}
			sameEvent(t, got, want)
			if got.Wire != nil {
				if !bytes.Equal(got.Wire, tc.raw) {
					t.Fatalf("Wire = %s", got.Wire)
				}
				again, err := json.Marshal(&got)
				if err != nil || !bytes.Equal(again, tc.raw) {
					t.Fatalf("Marshal of the decoded event = %s (%v), want %s", again, err, tc.raw)
				}
			}
		})
	}
}

func sameEvent(t *testing.T, got, want forge.Event) {
	t.Helper()
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	_, gotOff := got.CreatedAt.Zone()
	_, wantOff := want.CreatedAt.Zone()
	if got.Seq != want.Seq || got.ID != want.ID || got.Type != want.Type || got.SessionID != want.SessionID ||
		str(got.TurnID) != str(want.TurnID) || str(got.ThreadID) != str(want.ThreadID) ||
		!got.CreatedAt.Equal(want.CreatedAt) || gotOff != wantOff || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("decoded %+v\nwant    %+v", got, want)
	}
}

// FuzzEventDecodeWire: whatever the bytes, DecodeWire agrees with
// json.Unmarshal, and a kept Wire is what Marshal writes for the event.
func FuzzEventDecodeWire(f *testing.F) {
	f.Add([]byte(`{"seq":1,"id":"a","type":"t","session_id":"s","turn_id":"u","thread_id":null,"created_at":"2026-12-01T10:00:00.5+01:00","data":{"delta":"x"}}`))
	f.Add([]byte(`{"seq":1,"id":"a","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":null}`))
	f.Add([]byte(`{"seq":-1,"id":"\u0041","type":"t","session_id":"s","turn_id":null,"thread_id":null,"created_at":"2026-12-01T10:00:00Z","data":[1, 2]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want forge.Event
		wantErr := json.Unmarshal(raw, &want)
		var got forge.Event
		err := got.DecodeWire(raw)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeWire error %v, Unmarshal's %v", err, wantErr)
		}
		if err != nil {
			return
		}
		sameEvent(t, got, want)
		if got.Wire != nil {
			again, err := json.Marshal(&got)
			if err != nil || !bytes.Equal(again, raw) {
				t.Fatalf("Wire kept for %s, but Marshal writes %s (%v)", raw, again, err)
			}
		}
	})
}

// BenchmarkEventDecode: what a replica spends on each event another one
// published, from its bytes to the bytes a client is sent: json.Unmarshal
// and encoding again, against DecodeWire (which keeps the bytes).
func BenchmarkEventDecode(b *testing.B) {
	turn, thread := "turn_01JF3Y8Q6W0ZK2M5N7P9R1T3V5", "thr_01JF3Y8Q6W0ZK2M5N7P9R1T3V6"
	ev := forge.Event{Seq: 1234, ID: "prt_01JF3Y8Q6W0ZK2M5N7P9R1T3V7", Type: forge.EventModelDelta, SessionID: "ses_01JF3Y8Q6W0ZK2M5N7P9R1T3V8",
		TurnID: &turn, ThreadID: &thread, CreatedAt: time.Now().UTC(), Data: json.RawMessage(`{"delta":" token"}`)}
	if err := ev.Encode(); err != nil {
		b.Fatal(err)
	}
	raw := ev.Wire
	b.Run("unmarshal+encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got forge.Event
			if err := json.Unmarshal(raw, &got); err != nil {
				b.Fatal(err)
			}
			if _, err := got.JSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeWire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got forge.Event
			if err := got.DecodeWire(raw); err != nil {
				b.Fatal(err)
			}
			if _, err := got.JSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDeltaDataAppendJSON: a delta's data written directly is
// json.Marshal's, byte for byte.
func TestDeltaDataAppendJSON(t *testing.T) {
	for _, text := range []string{"", "plain", `"quoted" \ back`, "<b>&amp;</b>", "\u2028\u2029", "\x00\x1f\x7f", "ünï 日本 🙂", "bad \xff\xfe utf-8", "\xed\xa0\x80"} {
		want, err := json.Marshal(forge.DeltaData{Delta: text})
		if err != nil {
			t.Fatal(err)
		}
		if got := (forge.DeltaData{Delta: text}).AppendJSON([]byte("x")); string(got) != "x"+string(want) {
			t.Errorf("%q: AppendJSON = %s, want %s", text, got[1:], want)
		}
	}
}
