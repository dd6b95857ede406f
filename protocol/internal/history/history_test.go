package history

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	msgs := []Message{{Role: "user", Text: "hi"}, {Role: "assistant", Text: "echo: hi", ToolCalls: []Call{{ID: "c", Name: "f", Arguments: "{}"}}}}
	chat := Book{Seed: "forge chat"}
	tk, sk := chat.Keys("bot", "ses_1", msgs)
	// The form Chat Completions recorded before the matcher moved here:
	// records made then must still be found.
	sum := sha256.Sum256([]byte("forge chat\x00bot"))
	for _, raw := range []string{`{"role":"user","text":"hi"}`, `{"role":"assistant","text":"echo: hi","tool_calls":[{"id":"c","name":"f","arguments":"{}"}]}`} {
		h := sha256.New()
		h.Write(sum[:])
		h.Write([]byte(raw))
		h.Sum(sum[:0])
	}
	if want := "a:" + hex.EncodeToString(sum[:]); tk != want {
		t.Fatalf("tenant key %s, want %s", tk, want)
	}
	if !strings.HasPrefix(sk, "s:ses_1:") || !strings.HasSuffix(sk, tk[2:]) {
		t.Fatalf("session key %s", sk)
	}
	for name, other := range map[string]string{
		"another facade": func() string { k, _ := Book{Seed: "forge responses"}.Keys("bot", "", msgs); return k }(),
		"another agent":  func() string { k, _ := chat.Keys("other", "", msgs); return k }(),
		"a prefix":       func() string { k, _ := chat.Keys("bot", "", msgs[:1]); return k }(),
		"attachments": func() string {
			m := append([]Message(nil), msgs...)
			m[0].Files = []string{"id:file_1"}
			k, _ := chat.Keys("bot", "", m)
			return k
		}(),
	} {
		if other == tk {
			t.Errorf("%s has the same key", name)
		}
	}
}
