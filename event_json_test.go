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
