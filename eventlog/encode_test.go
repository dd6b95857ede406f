package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestEncodeDataIsMarshal: an event's data is encoded as json.Marshal
// encodes it, whichever way (parts and messages, by pointer or value, are
// written directly; the rest, and what the direct encoders decline, goes
// through Marshal).
func TestEncodeDataIsMarshal(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 123, time.UTC)
	p := forge.Part{ID: "prt_1", MessageID: "msg_1", Type: forge.PartText, Text: "a <b> & \u2028", State: forge.StateCompleted,
		Data: json.RawMessage(` {"x" : 1} `), CreatedAt: now, UpdatedAt: now}
	m := forge.Message{ID: "msg_1", SessionID: "ses_1", TurnID: "turn_1", ThreadID: "thr_1", Role: forge.RoleAssistant,
		Usage: &forge.Usage{InputTokens: 3, Cost: 1e-7}, CreatedAt: now, Parts: []*forge.Part{&p, nil}}
	lmt := p
	lmt.CreatedAt = time.Date(1890, 1, 1, 0, 0, 0, 0, time.FixedZone("LMT", 3208)) // declined: Marshal writes it
	tu := forge.Turn{ID: "turn_1", SessionID: "ses_1", Status: forge.TurnDone, Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}},
		RequiredActions: []forge.RequiredAction{}, CreatedAt: now, EndedAt: &now}
	for _, v := range []any{&p, p, &m, m, &tu, tu, (*forge.Turn)(nil), (*forge.Part)(nil), (*forge.Message)(nil), &lmt, forge.DeltaData{Delta: "x"},
		map[string]any{"a": 1}, nil} {
		want, werr := json.Marshal(v)
		got, err := encodeData(v)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Errorf("%T: got %s %v, want %s %v", v, got, err, want, werr)
		}
	}
	bad := p
	bad.Arguments = json.RawMessage(`{`)
	if _, err := encodeData(&bad); err == nil {
		t.Error("invalid raw arguments were encoded")
	}
}
